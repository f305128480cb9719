"""The stand-ins of ``--google`` answer as Google's token endpoint, the GKE API and a GKE control
plane do: only what the service account signed gets a token, tokens end, and ended tokens get 401."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.kube.launcher import KubeStandin, start_kube_standin

SCOPE = "https://www.googleapis.com/auth/cloud-platform"


@pytest.fixture(scope="module")
def google_kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeStandin]:
    standin = start_kube_standin(
        tmp_path_factory.mktemp("kube-google"), extra_args=("--google", "--no-controllers")
    )
    yield standin
    standin.stop()


def _google(standin: KubeStandin) -> dict[str, Any]:
    assert standin.google is not None
    return standin.google


def _credentials(standin: KubeStandin, **changes: Any) -> Any:
    from google.oauth2 import service_account

    info = {**json.loads(Path(_google(standin)["service_account_file"]).read_text()), **changes}
    return service_account.Credentials.from_service_account_info(info, scopes=[SCOPE])


def _get(url: str, token: str | None, context: ssl.SSLContext | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_signed_grant_gets_a_token_the_api_server_takes_until_it_is_revoked(
    google_kube: KubeStandin,
) -> None:
    from google.auth.transport.requests import Request

    google = _google(google_kube)
    credentials = _credentials(google_kube)
    credentials.refresh(Request())
    assert credentials.token.startswith("ya29.") and credentials.valid
    context = ssl.create_default_context(cafile=google["ca_file"])
    version = f"https://{google['endpoints']['public']}/version"
    assert _get(version, credentials.token, context)[0] == 200

    data = urllib.parse.urlencode({"token": credentials.token}).encode()
    with urllib.request.urlopen(urllib.request.Request(f"{google['url']}/revoke", data=data)) as answer:
        assert answer.status == 200
    code, body = _get(version, credentials.token, context)
    assert code == 401 and body["kind"] == "Status" and body["reason"] == "Unauthorized"
    assert credentials.token not in json.dumps(body)


def test_a_grant_signed_with_another_key_is_refused(google_kube: KubeStandin) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from google.auth import exceptions
    from google.auth.transport.requests import Request

    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(exceptions.RefreshError, match="invalid_grant"):
        _credentials(google_kube, private_key=other.decode()).refresh(Request())


def test_clusters_get_answers_the_cluster_resource_to_signed_in_callers_only(
    google_kube: KubeStandin,
) -> None:
    from google.auth.transport.requests import Request

    google = _google(google_kube)
    url = f"{google['url']}/v1/{google['cluster']}"
    code, body = _get(url, None)
    assert code == 401 and body["error"]["status"] == "UNAUTHENTICATED"

    credentials = _credentials(google_kube)
    credentials.refresh(Request())
    code, cluster = _get(url, credentials.token)
    assert code == 200
    assert cluster["endpoint"] == google["endpoints"]["public"]
    assert cluster["privateClusterConfig"]["privateEndpoint"] == google["endpoints"]["private"]
    dns = cluster["controlPlaneEndpointsConfig"]["dnsEndpointConfig"]["endpoint"]
    assert dns == google["endpoints"]["dns"] and dns.startswith("localhost:")
    ca = base64.b64decode(cluster["masterAuth"]["clusterCaCertificate"])
    assert ca == Path(google["ca_file"]).read_bytes()

    code, body = _get(url.replace("/clusters/pathways-sandbox", "/clusters/other"), credentials.token)
    assert code == 404 and body["error"]["status"] == "NOT_FOUND"


def test_a_token_is_taken_for_its_lifetime_only(tmp_path: Path) -> None:
    from google.auth.transport.requests import Request

    from tests.support.kube_jobs import wait_for

    with start_kube_standin(
        tmp_path, extra_args=("--google", "--no-controllers", "--token-lifetime", "2")
    ) as kube:
        google = _google(kube)
        credentials = _credentials(kube)
        credentials.refresh(Request())
        context = ssl.create_default_context(cafile=google["ca_file"])
        version = f"https://{google['endpoints']['public']}/version"
        assert _get(version, credentials.token, context)[0] == 200
        wait_for(lambda: _get(version, credentials.token, context)[0] == 401, what="the token to expire")
        assert kube.control("google")["valid"] == 0
