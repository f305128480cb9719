"""Which Kubernetes API errors are worth a retry, and how long the server asks to wait."""

from __future__ import annotations

import aiohttp
import urllib3
from kubernetes.client import ApiException
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from airflow_provider_pathways.transient import (
    TRANSIENT_HTTP_STATUSES,
    parse_retry_after,
)


class CredentialsRefused(RuntimeError):
    """The API server answered 401 Unauthorized: the connection's credentials are expired or revoked."""


def credentials_refused(conn_id: str | None, gcp_conn_id: str | None) -> CredentialsRefused:
    """The error for a 401 answer, naming the connection (and never the credentials)."""
    what = (
        f"the access token of Google connection {gcp_conn_id!r} was refused (expired or revoked; "
        "check that the Google account is enabled and may use the cluster)"
        if gcp_conn_id
        else "its token or client certificate is expired or revoked (renew the kubeconfig or token)"
    )
    return CredentialsRefused(f"Kubernetes connection {conn_id!r}: 401 Unauthorized: {what}")


def is_transient(err: BaseException) -> bool:
    """A Kubernetes API error worth retrying: a status of ``TRANSIENT_HTTP_STATUSES`` (429, 5xx,
    408), or no answer at all; never another 4xx."""
    if isinstance(err, (ApiException, AsyncApiException)):
        return err.status in TRANSIENT_HTTP_STATUSES or not err.status
    return isinstance(
        err, (urllib3.exceptions.HTTPError, aiohttp.ClientError, ConnectionError, TimeoutError, OSError)
    )


def retry_after(err: BaseException) -> float | None:
    """The ``Retry-After`` an API server sent with a 429 or 503, in seconds."""
    headers = getattr(err, "headers", None)
    return parse_retry_after(headers.get("Retry-After")) if headers else None
