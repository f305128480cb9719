"""Stand-ins for what a Google identity reaches a GKE cluster through (``--google``).

- the OAuth 2.0 token endpoint (``POST /token``): a service account signs a JWT with its key and
  gets an access token with a lifetime (``--token-lifetime``, 3600 s on Google); ``POST /revoke``
  revokes one, as ``oauth2.googleapis.com/revoke`` does;
- the GKE API's ``projects.locations.clusters.get`` (``GET /v1/projects/P/locations/L/clusters/C``),
  answering one cluster in the shape of the real ``Cluster`` resource: ``endpoint``,
  ``masterAuth.clusterCaCertificate``, ``privateClusterConfig.privateEndpoint`` and
  ``controlPlaneEndpointsConfig.dnsEndpointConfig.endpoint``;
- the cluster's control plane over TLS (a CA made at start), at the three endpoints the
  ``Cluster`` names (each on its own port of 127.0.0.1; the DNS one by the name ``localhost``).

The API server accepts the access tokens this endpoint issued until they expire or are revoked,
and answers anything else ``401 Unauthorized``, as GKE does. The service account's key is written
to the state dir (mode 0600) so that clients sign in with it.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

DEFAULT_TOKEN_LIFETIME = 3600.0
DEFAULT_CLUSTER = "projects/sandbox-project/locations/us-east5/clusters/pathways-sandbox"
SERVICE_ACCOUNT = "airflow@sandbox-project.iam.gserviceaccount.com"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# The audience of a service account's grant assertion, whichever token endpoint it is sent to.
GRANT_AUDIENCE = "https://oauth2.googleapis.com/token"
# The endpoints of a Cluster, and the host each is reached by here.
ENDPOINTS = {"public": "127.0.0.1", "private": "127.0.0.1", "dns": "localhost"}


@dataclass
class IssuedTokens:
    """Access tokens the token endpoint issued, with their expiry; what the API server accepts."""

    lifetime: float = DEFAULT_TOKEN_LIFETIME
    expiry: dict[str, float] = field(default_factory=dict)
    revoked: set[str] = field(default_factory=set)
    # The token endpoint refuses every grant (a disabled service account or deleted key).
    refusing: bool = False
    grants: int = 0
    rejected: int = 0
    # The GKE API's next getCluster answers: these HTTP statuses, one each (an outage of the API).
    cluster_faults: list[int] = field(default_factory=list)

    def issue(self) -> str:
        now = time.time()
        for token in [t for t, end in self.expiry.items() if end < now - self.lifetime]:
            del self.expiry[token]  # long expired: forget
        token = "ya29.sandbox-" + secrets.token_urlsafe(24)
        self.expiry[token] = now + self.lifetime
        self.grants += 1
        return token

    def valid(self, token: str) -> bool:
        end = self.expiry.get(token)
        return end is not None and time.time() < end and token not in self.revoked

    def revoke(self, token: str | None = None) -> int:
        """Revoke ``token``, or every token issued so far; how many were still valid."""
        chosen = [token] if token else list(self.expiry)
        live = [t for t in chosen if self.valid(t)]
        self.revoked.update(t for t in chosen if t in self.expiry)
        return len(live)

    def snapshot(self) -> dict[str, Any]:
        return {
            "lifetime": self.lifetime,
            "grants": self.grants,
            "valid": sum(1 for t in self.expiry if self.valid(t)),
            "revoked": len(self.revoked),
            "rejected": self.rejected,
            "refusing": self.refusing,
            "cluster_faults": len(self.cluster_faults),
        }


@dataclass
class TlsMaterial:
    """PEM text: the CA, the server's certificate chain and its private key."""

    ca_pem: bytes
    chain_pem: bytes
    key_pem: bytes


def make_tls() -> TlsMaterial:
    """A CA and a server certificate for 127.0.0.1 and localhost, signed by it."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pathways-sandbox-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(*[False] * 5, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    return TlsMaterial(
        ca_pem=ca_pem,
        chain_pem=cert.public_bytes(serialization.Encoding.PEM) + ca_pem,
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def service_account_key(token_uri: str) -> tuple[dict[str, Any], bytes]:
    """A service-account key file's content (its ``token_uri`` this stand-in) and its public key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    info = {
        "type": "service_account",
        "project_id": DEFAULT_CLUSTER.split("/")[1],
        "private_key_id": secrets.token_hex(8),
        "private_key": pem,
        "client_email": SERVICE_ACCOUNT,
        "client_id": "100000000000000000001",
        "token_uri": token_uri,
    }
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return info, public


def _google_error(code: int, message: str, status: str) -> web.Response:
    """An error as Google's JSON APIs answer it."""
    body = {"error": {"code": code, "message": message, "status": status}}
    return web.json_response(body, status=code)


def _oauth_error(error: str, description: str) -> web.Response:
    return web.json_response({"error": error, "error_description": description}, status=400)


@dataclass
class GoogleStandin:
    """The token endpoint and the GKE API, sharing ``tokens`` with the API server."""

    tokens: IssuedTokens
    public_key: bytes
    cluster: str
    ca_pem: bytes
    endpoints: dict[str, str]  # public/private/dns -> host:port

    def cluster_resource(self) -> dict[str, Any]:
        """The ``Cluster`` as ``clusters.get`` answers it (the fields a client connects with)."""
        project, location, name = self.cluster.split("/")[1::2]
        return {
            "name": name,
            "location": location,
            "selfLink": f"https://container.googleapis.com/v1/{self.cluster}",
            "status": "RUNNING",
            "currentMasterVersion": "1.31.0-gke.1000",
            "endpoint": self.endpoints["public"],
            "masterAuth": {"clusterCaCertificate": base64.b64encode(self.ca_pem).decode()},
            "privateClusterConfig": {
                "enablePrivateNodes": True,
                "privateEndpoint": self.endpoints["private"],
                "publicEndpoint": self.endpoints["public"],
            },
            "controlPlaneEndpointsConfig": {
                "dnsEndpointConfig": {"endpoint": self.endpoints["dns"], "allowExternalTraffic": True},
                "ipEndpointsConfig": {
                    "enabled": True,
                    "enablePublicEndpoint": True,
                    "publicEndpoint": self.endpoints["public"],
                    "privateEndpoint": self.endpoints["private"],
                },
            },
            "workloadIdentityConfig": {"workloadPool": f"{project}.svc.id.goog"},
        }

    def _signed_by_the_account(self, token: str, audience: str | None = None) -> bool:
        from google.auth import exceptions, jwt

        try:
            jwt.decode(token, certs=self.public_key.decode(), audience=audience)
        except (exceptions.GoogleAuthError, ValueError):
            return False
        return True

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("grant_type") != JWT_BEARER:
            return _oauth_error("unsupported_grant_type", "Invalid grant_type.")
        if self.tokens.refusing:
            self.tokens.rejected += 1
            return _oauth_error("invalid_grant", "Invalid grant: account not found")
        if not self._signed_by_the_account(str(form.get("assertion", "")), audience=GRANT_AUDIENCE):
            self.tokens.rejected += 1
            return _oauth_error("invalid_grant", "Invalid JWT Signature.")
        body = {
            "access_token": self.tokens.issue(),
            "expires_in": int(self.tokens.lifetime),
            "token_type": "Bearer",
        }
        return web.json_response(body)

    async def revoke(self, request: web.Request) -> web.Response:
        form = await request.post()
        token = str(request.query.get("token") or form.get("token") or "")
        if not token or token not in self.tokens.expiry:
            return _oauth_error("invalid_token", "Token expired or revoked")
        self.tokens.revoke(token)
        return web.json_response({})

    async def get_cluster(self, request: web.Request) -> web.Response:
        given = request.headers.get("Authorization", "").partition(" ")[2].strip()
        # Google APIs take access tokens and a service account's self-signed JWTs.
        if not (self.tokens.valid(given) or self._signed_by_the_account(given)):
            self.tokens.rejected += 1
            return _google_error(
                401,
                "Request had invalid authentication credentials. Expected OAuth 2 access token, "
                "login cookie or other valid authentication credential.",
                "UNAUTHENTICATED",
            )
        if self.tokens.cluster_faults:  # Google's error body for each (google.rpc.Code)
            code = self.tokens.cluster_faults.pop(0)
            status = {429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}.get(
                code, "INTERNAL"
            )
            return _google_error(code, "Internal error encountered.", status)
        path = "projects/{project}/locations/{location}/clusters/{name}".format(**request.match_info)
        if path != self.cluster:
            return _google_error(404, f"Not found: {path}.", "NOT_FOUND")
        return web.json_response(self.cluster_resource())

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/token", self.token)
        app.router.add_post("/revoke", self.revoke)
        app.router.add_get("/v1/projects/{project}/locations/{location}/clusters/{name}", self.get_cluster)
        return app
