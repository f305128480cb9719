"""Kubernetes API clients: a GKE cluster reached with a Google identity, as the google provider's
``GKEStartPodOperator`` does; the async hook that signs in so; and the async clients the hooks of
one event loop share, per connection.

A Pathways-on-GKE connection with ``gcp_conn_id`` names the cluster (``gcp_project``,
``gke_location``, ``gke_cluster``) and the Google Cloud connection to sign in with (with
``impersonation_chain``). The cluster's endpoint and CA come from the GKE API
(``projects.locations.clusters.get``), the bearer token from those Google credentials, refreshed
before it expires on every request: in the worker and in the triggerer, where the credentials are
rebuilt from the connections (a trigger carries no token). Everything Google is imported only when
such a client is built: kubeconfig users need no google provider.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from airflow.providers.common.compat.sdk import AirflowNotFoundException
from asgiref.sync import sync_to_async
from kubernetes_asyncio import client as async_client

from airflow_provider_pathways.hooks.google_credentials import (
    CLOUD_PLATFORM_SCOPE,
    DEFAULT_GCP_CONN_ID,
    NoDefaultCredentials,
    application_default_credentials,
    impersonation_chain_of,
)
from airflow_provider_pathways.transient import ConnectionToFix

if TYPE_CHECKING:
    from google.auth.credentials import Credentials
    from kubernetes import client as sync_client

# The Cluster field each endpoint choice reads; the DNS endpoint has a publicly trusted certificate.
ENDPOINT_FIELDS = {
    "public": "endpoint",
    "private": "privateClusterConfig.privateEndpoint",
    "dns": "controlPlaneEndpointsConfig.dnsEndpointConfig.endpoint",
}
CLUSTER_FIELDS = ("gcp_project", "gke_location", "gke_cluster")
KUBECONFIG_FIELDS = ("in_cluster", "kube_config_path", "kube_config")
INSTALL_GOOGLE = "pip install 'airflow-provider-pathways[google]'"

log = logging.getLogger(__name__)


class GkeConnectionError(ConnectionToFix, RuntimeError):
    """The connection cannot reach its cluster with its Google identity (never worth a retry: its
    message says what to fix). Met during a wait (the credentials refused a new token mid-wait), it
    fails the try for good."""


class GoogleUnavailable(ConnectionError):
    """Google's token endpoint or the GKE API could not be reached, or answered a server error or
    asked to retry (transient: an outage, ridden out as one)."""


@dataclass(frozen=True)
class GkeTarget:
    """Which cluster a connection reaches, through which endpoint, as which Google identity."""

    conn_id: str | None
    project: str
    location: str
    cluster: str
    gcp_conn_id: str
    impersonation_chain: tuple[str, ...] = ()
    endpoint: str = "public"
    api_endpoint: str | None = None

    @classmethod
    def from_extras(cls, conn_id: str | None, extras: Mapping[str, Any]) -> GkeTarget | None:
        """The target of a connection's extra fields; None when it names no ``gcp_conn_id``."""

        def field(key: str) -> Any:
            value = extras.get(key, extras.get(f"extra__kubernetes__{key}"))
            return value.strip() if isinstance(value, str) else value

        gcp_conn_id = field("gcp_conn_id")
        if not gcp_conn_id:
            return None
        where = f"Kubernetes connection {conn_id!r}"
        clashing = [key for key in KUBECONFIG_FIELDS if field(key)]
        if clashing:
            raise GkeConnectionError(
                f"{where}: gcp_conn_id (sign in with a Google identity) and {', '.join(clashing)} "
                "exclude each other; keep one"
            )
        missing = [key for key in CLUSTER_FIELDS if not field(key)]
        if missing:
            raise GkeConnectionError(f"{where}: gcp_conn_id needs the cluster too: set {', '.join(missing)}")
        endpoint = str(field("gke_endpoint") or "public").lower()
        if endpoint not in ENDPOINT_FIELDS:
            raise GkeConnectionError(
                f"{where}: gke_endpoint {endpoint!r} is none of {', '.join(ENDPOINT_FIELDS)}"
            )
        return cls(
            conn_id=conn_id,
            project=field("gcp_project"),
            location=field("gke_location"),
            cluster=field("gke_cluster"),
            gcp_conn_id=gcp_conn_id,
            impersonation_chain=tuple(impersonation_chain_of(field("impersonation_chain"))),
            endpoint=endpoint,
            api_endpoint=field("gke_api_endpoint") or None,
        )

    @property
    def resource_name(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/clusters/{self.cluster}"

    @property
    def where(self) -> str:
        return f"Kubernetes connection {self.conn_id!r} (Google connection {self.gcp_conn_id!r})"


class TokenSource:
    """The Google credentials' access token, refreshed when it is about to expire (the google-auth
    rule: a few minutes before its end); one refresh at a time, shared by every user."""

    def __init__(self, credentials: Credentials, target: GkeTarget) -> None:
        self.credentials = credentials
        self.target = target
        self._lock = threading.Lock()

    def token(self) -> str:
        with self._lock:
            if not self.credentials.valid:
                self._refresh()
            return str(self.credentials.token)

    async def a_token(self) -> str:
        if self.credentials.valid:
            return str(self.credentials.token)
        return await asyncio.to_thread(self.token)

    def _refresh(self) -> None:
        from google.auth import exceptions
        from google.auth.transport.requests import Request

        try:
            self.credentials.refresh(Request())
        except exceptions.RefreshError as err:
            reason = _reason(err)
            if getattr(err, "retryable", False):
                raise GoogleUnavailable(
                    f"{self.target.where}: the Google token endpoint asked to retry ({reason})"
                ) from None
            raise GkeConnectionError(
                f"{self.target.where}: the Google credentials got no access token ({reason}); check "
                "that the account, its key and its impersonation rights are still valid"
            ) from None
        except exceptions.TransportError as err:
            raise GoogleUnavailable(
                f"{self.target.where}: the Google token endpoint is unreachable ({type(err).__name__})"
            ) from None


def _reason(err: Exception) -> str:
    """The OAuth error code and description of a refusal (never the request or its tokens)."""
    first = err.args[0] if err.args else ""
    return (first if isinstance(first, str) else type(err).__name__)[:200]


@dataclass
class ClusterAccess:
    """Where the cluster's API server is and how to sign in to it."""

    url: str
    ca_certificate: str | None  # base64 PEM, as the GKE API gives it; None: the system's CAs
    tokens: TokenSource

    def ca_file(self) -> str | None:
        if self.ca_certificate is None:
            return None
        from kubernetes.config.kube_config import FileOrData

        # Cached by content (one file per CA), removed when the process ends.
        file: str = FileOrData(
            {"certificate-authority-data": self.ca_certificate}, file_key_name="certificate-authority"
        ).as_file()
        return file


def _default_credentials(target: GkeTarget) -> Credentials:
    """The Google connection does not exist: Application Default Credentials when it is the default
    one (as the compilation-cache cleanup, and as Composer's ``google_cloud_default`` itself does),
    else an error naming it."""
    if target.gcp_conn_id != DEFAULT_GCP_CONN_ID:
        raise GkeConnectionError(
            f"{target.where}: no Airflow connection {target.gcp_conn_id!r}; create it, or set gcp_conn_id "
            f"to {DEFAULT_GCP_CONN_ID!r} (missing, it signs in with Application Default Credentials)"
        )
    try:
        credentials, _ = application_default_credentials(CLOUD_PLATFORM_SCOPE, target.impersonation_chain)
    except NoDefaultCredentials as err:
        raise GkeConnectionError(
            f"{target.where}: no Airflow connection {DEFAULT_GCP_CONN_ID!r} and {err}; create the "
            "connection or set up Application Default Credentials"
        ) from None
    log.info("%s: no such connection, signing in with Application Default Credentials", target.where)
    return credentials


def cluster_access(target: GkeTarget) -> ClusterAccess:
    """Sign in with the Google connection and read the cluster's endpoint and CA from the GKE API.

    Blocking (the connection is read and two HTTP requests are made)."""
    try:
        from airflow.providers.google.cloud.hooks.kubernetes_engine import GKEHook
        from airflow.providers.google.common.consts import CLIENT_INFO
    except ImportError:
        raise GkeConnectionError(
            f"{target.where}: signing in with a Google identity needs apache-airflow-providers-google "
            f"({INSTALL_GOOGLE})"
        ) from None
    from google.api_core import exceptions as api_exceptions
    from google.api_core.client_options import ClientOptions
    from google.cloud.container_v1 import ClusterManagerClient

    try:
        hook = GKEHook(
            gcp_conn_id=target.gcp_conn_id,
            location=target.location,
            impersonation_chain=list(target.impersonation_chain) or None,
        )
        credentials = hook.get_credentials()
    except AirflowNotFoundException:
        credentials = _default_credentials(target)
    tokens = TokenSource(credentials, target)
    tokens.token()  # a refusal is reported here, by TokenSource, naming the connection
    # REST, not gRPC: the endpoint can be given as a URL (gke_api_endpoint), as for any Google API.
    client = ClusterManagerClient(
        credentials=credentials,
        client_info=CLIENT_INFO,
        client_options=ClientOptions(api_endpoint=target.api_endpoint) if target.api_endpoint else None,
        transport="rest",
    )
    try:
        cluster = client.get_cluster(name=target.resource_name)
    except api_exceptions.GoogleAPICallError as err:
        answer = f"{target.where}: the GKE API answered {err.code} for {target.resource_name}: {err.message}"
        if isinstance(err.code, int) and (err.code == 429 or err.code >= 500):  # after its own retries
            raise GoogleUnavailable(answer) from None
        raise GkeConnectionError(answer) from None
    finally:
        client.transport.close()
    if target.endpoint == "dns":
        host = cluster.control_plane_endpoints_config.dns_endpoint_config.endpoint
    elif target.endpoint == "private":
        host = cluster.private_cluster_config.private_endpoint
    else:
        host = cluster.endpoint
    if not host:
        raise GkeConnectionError(
            f"{target.where}: cluster {target.resource_name} has no {target.endpoint} endpoint "
            f"({ENDPOINT_FIELDS[target.endpoint]} is empty); choose another gke_endpoint"
        )
    ca = None if target.endpoint == "dns" else cluster.master_auth.cluster_ca_certificate
    if ca is not None:
        base64.b64decode(ca, validate=True)  # a damaged answer fails here, not in the TLS layer
    return ClusterAccess(url=f"https://{host}", ca_certificate=ca, tokens=tokens)


# kubernetes >= 36 reads the bearer token as "BearerToken", older clients as "authorization".
_KEYS = ("BearerToken", "authorization")


def sync_api_client(target: GkeTarget) -> sync_client.ApiClient:
    """A ``kubernetes`` API client for the cluster whose token is refreshed before each request
    when it is about to expire."""
    from airflow.providers.cncf.kubernetes import kube_client
    from kubernetes import client

    access = cluster_access(target)
    configuration = client.Configuration()
    configuration.host = access.url
    configuration.ssl_ca_cert = access.ca_file()
    configuration.api_key_prefix = dict.fromkeys(_KEYS, "Bearer")

    def refresh(config: client.Configuration) -> None:
        config.api_key = dict.fromkeys(_KEYS, access.tokens.token())

    refresh(configuration)
    configuration.refresh_api_key_hook = refresh
    # TCP keepalive: cncf-kubernetes 10.24+ sets it on the configuration, earlier releases (the
    # last on Python 3.10 among them) on urllib3's default socket options
    configure_keepalive = getattr(kube_client, "configure_tcp_keepalive", None)
    if configure_keepalive is not None:
        configure_keepalive(configuration)
    else:
        kube_client._enable_tcp_keepalive()
    return kube_client._TimeoutK8sApiClient(configuration=configuration)


async def configure_async(configuration: async_client.Configuration, target: GkeTarget) -> None:
    """Point a ``kubernetes_asyncio`` configuration at the cluster; its token is refreshed before
    each request when it is about to expire (in a thread, without blocking the event loop)."""
    access = await asyncio.to_thread(cluster_access, target)
    configuration.host = access.url
    configuration.ssl_ca_cert = access.ca_file()
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    configuration.api_key = {"BearerToken": await access.tokens.a_token()}

    async def refresh(config: async_client.Configuration) -> None:
        config.api_key = {"BearerToken": await access.tokens.a_token()}

    configuration.refresh_api_key_hook = refresh


class PathwaysAsyncKubernetesHook(AsyncKubernetesHook):
    """The cncf-kubernetes async hook, reaching the cluster through the GKE API with a Google
    identity when the connection names ``gcp_conn_id`` (and the task gives no kubeconfig)."""

    async def _load_config(self) -> None:
        if self._config_loaded:
            return
        target = None
        if not (self.config_dict or self.in_cluster):
            target = GkeTarget.from_extras(self.conn_id, await self.get_conn_extras())
        if target is None:
            await super()._load_config()
        else:
            if self.client_configuration is None:
                self.client_configuration = async_client.Configuration()
            await configure_async(self.client_configuration, target)
            self._is_in_cluster = False
            self._config_loaded = True
        if self.client_configuration is not None and await self._ssl_verification_disabled():
            self.client_configuration.verify_ssl = False

    async def _ssl_verification_disabled(self) -> bool:
        """The connection's ``disable_verify_ssl``, which cncf-kubernetes' sync hook honours and its
        async hook ignores."""
        extras = await self.get_conn_extras()
        value = extras.get("disable_verify_ssl", extras.get("extra__kubernetes__disable_verify_ssl"))
        return value is True or (isinstance(value, str) and value.strip().lower() == "true")

    async def get_conn_extras(self) -> dict[str, Any]:
        """The connection's extras, read in a worker thread: reading them masks their secrets, and
        Airflow 3.0's triggerer refuses to send that mask from its event loop ("You cannot use
        AsyncToSync in the same thread as an async event loop")."""
        if self._extras is None:
            self._extras = await sync_to_async(self._read_extras)()
        return self._extras

    def _read_extras(self) -> dict[str, Any]:
        if not self.conn_id:
            return {}
        try:
            return dict(self.get_connection(self.conn_id).extra_dejson)
        except AirflowNotFoundException:
            if self.conn_id == self.default_conn_name:
                return {}
            raise
