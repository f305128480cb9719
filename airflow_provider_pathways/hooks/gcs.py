"""Hook that frees stale Pathways/JAX compilation-cache entries in GCS, safely and concurrently.

Google client libraries are imported inside methods only, so importing this module (e.g. at DAG
parse time through the operator) loads neither ``google.cloud`` nor ``google.auth``.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import random
import select
import shutil
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_provider_pathways import __version__
from airflow_provider_pathways.compilation_cache import (
    DEFAULT_MIN_AGE,
    BucketNotFoundError,
    CacheCleanupError,
    CacheEntry,
    CacheObject,
    CacheSelector,
    CleanupPlan,
    CleanupReport,
    GcsLocation,
    PlanBuilder,
    SetDigest,
    check_count,
    encode_entry,
    looks_like_cache_folder,
    normalize_prefix,
    parse_duration,
    parse_size,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from google.auth.credentials import Credentials
    from google.cloud.storage import Client

DEFAULT_GCP_CONN_ID = "google_cloud_default"
STORAGE_SCOPE = "https://www.googleapis.com/auth/devstorage.full_control"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
DEFAULT_ENDPOINT = "https://storage.googleapis.com"
LIST_PAGE_SIZE = 1000
MAX_WORKERS = 256
_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_USER_AGENT = f"airflow-provider-pathways/{__version__} compilation-cache-cleanup"
_MAX_ERROR_SAMPLES = 10


@dataclass(frozen=True)
class _Outcome:
    """Result of one conditional delete: ``deleted``, ``changed``, ``missing`` or ``error``."""

    status: str
    http_status: int = 0
    detail: str = ""


class HttpProtocolError(OSError):
    """The server's answer was not valid HTTP/1.1 (the connection is dropped and the request retried)."""


class RequestNotSent(OSError):
    """The request never reached the server: connecting failed or the request could not be written."""


def read_http_response(rfile: Any, method: str) -> tuple[int, bytes, bool]:
    """Read one HTTP/1.1 response from a buffered binary file: (status, body, connection must close).

    Handles ``Content-Length``, ``chunked`` and close-delimited bodies, bodiless answers (HEAD,
    1xx, 204, 304) and skips interim 1xx responses.
    """
    while True:
        line = rfile.readline(65537)
        if not line:
            raise HttpProtocolError("connection closed before a response")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise HttpProtocolError(f"bad status line {line[:80]!r}")
        status = int(parts[1])
        length: int | None = None
        chunked = False
        close = parts[0] == b"HTTP/1.0"
        while True:
            header = rfile.readline(65537)
            if header in (b"\r\n", b"\n"):
                break
            if not header:
                raise HttpProtocolError("connection closed inside the response headers")
            name, _, value = header.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value.strip())
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                token = value.strip().lower()
                close = token == b"close" or (close and token != b"keep-alive")
        if 100 <= status < 200:
            continue
        if method == "HEAD" or status in (204, 304):
            return status, b"", close
        if chunked:
            pieces: list[bytes] = []
            while True:
                size_line = rfile.readline(65537)
                if not size_line:
                    raise HttpProtocolError("connection closed inside a chunked body")
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return status, b"".join(pieces), close
                pieces.append(rfile.read(size))
                rfile.readline(65537)
        if length is not None:
            body = rfile.read(length)
            if len(body) != length:
                raise HttpProtocolError("connection closed inside the response body")
            return status, body, close
        return status, rfile.read(), True


class _StorageHttp:
    """Minimal JSON-API client for the hot path: one keep-alive connection per worker thread.

    Listing and bucket calls go through ``google-cloud-storage``; deletes go straight to the JSON
    API (one small request each) because the client library's per-call overhead is several times
    the cost of the request itself. Connections (TLS, ``https_proxy`` tunnels) are opened by
    ``http.client``; requests are framed here. Credentials are refreshed under a lock and applied to
    each request; they are never logged.
    """

    def __init__(self, endpoint: str, credentials: Credentials, *, timeout: float, user_project: str | None):
        parsed = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        self.scheme = parsed.scheme
        self.host = parsed.hostname or ""
        self.port = parsed.port or (443 if self.scheme == "https" else 80)
        default_port = 443 if self.scheme == "https" else 80
        self.host_header = self.host if self.port == default_port else f"{self.host}:{self.port}"
        self.base_path = parsed.path.rstrip("/")
        self.timeout = timeout
        self.user_project = user_project
        self._credentials = credentials
        self._cred_lock = threading.Lock()
        self._local = threading.local()
        self._ssl = ssl.create_default_context() if self.scheme == "https" else None
        proxy = urllib.request.getproxies().get(self.scheme)
        self._proxy: tuple[str, int] | None = None
        if proxy and not urllib.request.proxy_bypass(self.host):
            proxy_url = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            self._proxy = (proxy_url.hostname or "", proxy_url.port or 3128)
        self._static = f"Host: {self.host_header}\r\nUser-Agent: {_USER_AGENT}\r\n"

    def _open(self) -> tuple[http.client.HTTPConnection, Any]:
        if self._proxy and self.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                *self._proxy, timeout=self.timeout, context=self._ssl
            )
            conn.set_tunnel(self.host, self.port)
        elif self._proxy:
            conn = http.client.HTTPConnection(*self._proxy, timeout=self.timeout)
        elif self.scheme == "https":
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        conn.connect()
        assert conn.sock is not None
        if self.scheme == "http":
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, conn.sock.makefile("rb")

    def reset(self) -> None:
        """Close this thread's connection."""
        current = getattr(self._local, "conn", None)
        self._local.conn = None
        if current is not None:
            current[1].close()
            current[0].close()

    def _auth_lines(self, force_refresh: bool) -> str:
        creds = self._credentials
        if force_refresh or not creds.valid:
            with self._cred_lock:
                if force_refresh or not creds.valid:
                    from google.auth.transport.requests import Request

                    creds.refresh(Request())
        headers: dict[str, str] = {}
        creds.apply(headers)
        return "".join(f"{k}: {v}\r\n" for k, v in headers.items())

    def request(
        self, method: str, path: str, query: dict[str, str], body: bytes = b"", force_refresh: bool = False
    ) -> tuple[int, bytes]:
        """Send one request on this thread's keep-alive connection; returns (status, body)."""
        if self.user_project:
            query = {**query, "userProject": self.user_project}
        target = f"{self.base_path}{path}?{urllib.parse.urlencode(query)}"
        if self._proxy and self.scheme == "http":
            target = f"http://{self.host_header}{target}"
        extra = "Content-Type: application/octet-stream\r\n" if body else ""
        head = (
            f"{method} {target} HTTP/1.1\r\n{self._static}{self._auth_lines(force_refresh)}{extra}"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        payload = head.encode("utf-8") + body
        current = getattr(self._local, "conn", None)
        if current is not None and _dropped(current[0].sock):
            self.reset()  # an idle keep-alive connection the server has closed: do not send on it
            current = None
        if current is None:
            try:
                current = self._local.conn = self._open()
            except (OSError, http.client.HTTPException) as err:
                raise RequestNotSent(f"{type(err).__name__}: {err}") from None
        try:
            current[0].sock.sendall(payload)  # type: ignore[union-attr]
        except OSError as err:
            self.reset()
            raise RequestNotSent(f"{type(err).__name__}: {err}") from None
        try:
            status, data, close = read_http_response(current[1], method)
        except (OSError, http.client.HTTPException):
            self.reset()  # sent but unanswered: the server may have carried it out
            raise
        if close:
            self.reset()
        return status, data


def _dropped(sock: socket.socket | None) -> bool:
    """Whether an idle connection was closed by the server (readable with nothing asked means EOF)."""
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _error_detail(status: int, body: bytes) -> str:
    """The server's error message (never request headers), shortened."""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body[:200].decode("utf-8", errors="replace")
    return f"HTTP {status}: {str(message)[:200]}"


class CompilationCacheHook(BaseHook):
    """
    Plan and delete stale compilation-cache entries under a GCS scratch location.

    Credentials: with ``apache-airflow-providers-google`` installed, from the Airflow Google
    connection ``gcp_conn_id`` (with ``impersonation_chain``); otherwise, or when the default
    connection does not exist, Application Default Credentials (impersonating the last account of
    ``impersonation_chain`` if given). With ``STORAGE_EMULATOR_HOST`` set and no connection, anonymous
    credentials against that emulator.

    :param gcp_conn_id: Airflow connection of type ``google_cloud_platform``.
    :param impersonation_chain: service account (or chain, last one impersonated) to act as.
    :param project_id: project for the client (listing and deleting do not need one).
    :param user_project: project billed for requester-pays buckets.
    :param max_workers: concurrent delete requests (GCS starts a bucket at about 1000 writes/s).
    :param list_page_size: objects asked per listing page; GCS answers at most 1000, so memory
        holds at most one page of that size.
    :param timeout: seconds per HTTP request.
    :param max_attempts: attempts per delete on 408/429/5xx or connection errors.
    :param retry_initial_delay: first backoff delay in seconds (doubles, with jitter).
    :param retry_max_delay: longest backoff delay in seconds.
    :param progress_every: log progress every this many processed objects.
    """

    conn_name_attr = "gcp_conn_id"
    default_conn_name = DEFAULT_GCP_CONN_ID
    conn_type = "google_cloud_platform"
    hook_name = "Pathways compilation cache (GCS)"

    def __init__(
        self,
        gcp_conn_id: str = DEFAULT_GCP_CONN_ID,
        impersonation_chain: str | Sequence[str] | None = None,
        *,
        project_id: str | None = None,
        user_project: str | None = None,
        max_workers: int = 32,
        list_page_size: int = LIST_PAGE_SIZE,
        timeout: float = 60.0,
        max_attempts: int = 6,
        retry_initial_delay: float = 0.5,
        retry_max_delay: float = 16.0,
        progress_every: int = 5000,
    ) -> None:
        super().__init__()
        check_count(max_workers, param="max_workers", low=1, high=MAX_WORKERS)
        if not isinstance(list_page_size, int) or list_page_size < 1:
            raise ValueError(f"list_page_size={list_page_size!r} must be a positive integer")
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts={max_attempts!r} must be an integer of 1 or more")
        if timeout <= 0 or retry_initial_delay < 0 or retry_max_delay < 0:
            raise ValueError("timeout must be positive and retry delays zero or more")
        if not isinstance(progress_every, int) or progress_every < 1:
            raise ValueError(f"progress_every={progress_every!r} must be a positive integer")
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.project_id = project_id
        self.user_project = user_project
        self.max_workers = max_workers
        self.list_page_size = list_page_size
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.retry_initial_delay = retry_initial_delay
        self.retry_max_delay = retry_max_delay
        self.progress_every = progress_every
        self._client: Client | None = None
        self._credentials: Credentials | None = None
        self._cancel = threading.Event()

    # ----------------------------------------------------------------------------------------
    # Credentials and client
    # ----------------------------------------------------------------------------------------

    def get_credentials_and_project(self) -> tuple[Credentials, str | None]:
        """Credentials and project, from the Airflow connection, the emulator or ADC."""
        base = self._google_base_hook()
        if base is not None:
            credentials, project = base.get_credentials_and_project_id()
            return credentials, self.project_id or project
        if os.environ.get(EMULATOR_ENV):
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials(), self.project_id
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            credentials, project = google.auth.default(scopes=[STORAGE_SCOPE])
        except DefaultCredentialsError:
            raise CacheCleanupError(
                "no Google credentials: install apache-airflow-providers-google and create the "
                f"connection {self.gcp_conn_id!r}, or set up Application Default Credentials "
                "(GOOGLE_APPLICATION_CREDENTIALS, workload identity or "
                "`gcloud auth application-default login`)"
            ) from None
        chain = self._chain()
        if chain:
            from google.auth import impersonated_credentials

            credentials = impersonated_credentials.Credentials(
                source_credentials=credentials,
                target_principal=chain[-1],
                delegates=chain[:-1],
                target_scopes=[STORAGE_SCOPE],
            )
        return credentials, self.project_id or project

    def _chain(self) -> list[str]:
        chain = self.impersonation_chain
        if not chain:
            return []
        if isinstance(chain, str):
            return [part.strip() for part in chain.split(",") if part.strip()]
        return list(chain)

    def _google_base_hook(self) -> Any | None:
        """A ``GoogleBaseHook`` for ``gcp_conn_id`` if the google provider is installed, else None."""
        try:
            from airflow.providers.google.common.hooks.base_google import GoogleBaseHook
        except ImportError:
            return None
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            return GoogleBaseHook(gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain)
        except AirflowNotFoundException:
            if self.gcp_conn_id == DEFAULT_GCP_CONN_ID:
                self.log.info("No connection %r: using Application Default Credentials", self.gcp_conn_id)
                return None
            raise CacheCleanupError(
                f"gcp_conn_id={self.gcp_conn_id!r}: no such Airflow connection; create it, or leave "
                f"gcp_conn_id at {DEFAULT_GCP_CONN_ID!r} to fall back to Application Default Credentials"
            ) from None

    def get_conn(self) -> Client:
        """The ``google.cloud.storage.Client`` (cached)."""
        if self._client is None:
            from google.cloud import storage

            credentials, project = self.get_credentials_and_project()
            self._credentials = credentials
            self._client = storage.Client(project=project, credentials=credentials)
        return self._client

    # ----------------------------------------------------------------------------------------
    # Planning
    # ----------------------------------------------------------------------------------------

    def _builder(
        self,
        location: str,
        *,
        older_than: timedelta | float | str | None = None,
        max_cache_bytes: int | str | None = None,
        cache_prefixes: Sequence[str] | None = None,
        jax_pairs: bool = True,
        min_age: timedelta | float | str = DEFAULT_MIN_AGE,
        allow_bucket_root: bool = False,
        allow_any_prefix: bool = False,
    ) -> PlanBuilder:
        """Check every argument (``ValueError`` naming it and the fix) before any request."""
        loc = GcsLocation.parse(location, param="location")
        selector = CacheSelector.build(
            loc,
            cache_prefixes=cache_prefixes,
            jax_pairs=jax_pairs,
            allow_bucket_root=allow_bucket_root,
            allow_any_prefix=allow_any_prefix,
        )
        age = parse_duration(older_than, param="older_than") if older_than is not None else None
        budget = parse_size(max_cache_bytes, param="max_cache_bytes") if max_cache_bytes is not None else None
        guard = parse_duration(min_age, param="min_age")
        return PlanBuilder(selector, older_than=age, max_cache_bytes=budget, min_age=guard)

    def plan(
        self,
        location: str,
        *,
        older_than: timedelta | float | str | None = None,
        max_cache_bytes: int | str | None = None,
        cache_prefixes: Sequence[str] | None = None,
        jax_pairs: bool = True,
        min_age: timedelta | float | str = DEFAULT_MIN_AGE,
        allow_bucket_root: bool = False,
        allow_any_prefix: bool = False,
    ) -> CleanupPlan:
        """
        List the location page by page and plan which cache entries go; deletes nothing.

        Only cache entries count (see :class:`CacheSelector`): objects inside a ``compilation_cache/``
        or ``jax_cache/`` folder (at any depth) or, with ``cache_prefixes``, inside those folders
        (relative to the location); never inside ``checkpoints/``, ``tensorboard/`` and the like;
        JAX ``<key>-cache``/``<key>-atime`` files only as complete pairs. An entry goes if it was
        last updated more than ``older_than`` ago, and then, while the cache exceeds
        ``max_cache_bytes``, oldest first (never one updated less than ``min_age`` ago). The plan
        keeps each object's generation and lives on disk: use it as a context manager (or
        ``close()`` it).

        :raises ValueError: bad input (named parameter and the fix), before any request.
        :raises BucketNotFoundError: the bucket does not exist (or is not visible).
        """
        builder = self._builder(
            location,
            older_than=older_than,
            max_cache_bytes=max_cache_bytes,
            cache_prefixes=cache_prefixes,
            jax_pairs=jax_pairs,
            min_age=min_age,
            allow_bucket_root=allow_bucket_root,
            allow_any_prefix=allow_any_prefix,
        )
        started = time.monotonic()
        workdir = Path(tempfile.mkdtemp(prefix="pathways-cache-plan-"))
        spill = workdir / "plan.jsonl"
        try:
            with open(spill, "w", encoding="utf-8") as out:
                for entry in builder.select(self._iter_listing(builder.selector)):
                    out.write(encode_entry(entry))
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        summary = builder.summary
        self.log.info(
            "Planned %s: %d of %d listed objects are cache (%d bytes); %d objects (%d bytes) to delete; "
            "listing took %.1fs",
            summary.location,
            summary.cache_objects,
            summary.listed_objects,
            summary.cache_bytes,
            summary.planned_objects,
            summary.planned_bytes,
            time.monotonic() - started,
        )
        return CleanupPlan(builder.selector.location, summary, spill, workdir)

    def _iter_listing(self, selector: CacheSelector) -> Iterator[CacheObject]:
        """Stream listed objects page by page (one page in memory at a time)."""
        from google.api_core import exceptions as gexc

        client = self.get_conn()
        bucket = selector.location.bucket
        for prefix in selector.listing_prefixes():
            iterator = client.list_blobs(
                client.bucket(bucket, user_project=self.user_project),
                prefix=prefix or None,
                page_size=self.list_page_size,
                fields="items(name,generation,size,updated),nextPageToken",
                timeout=self.timeout,
            )
            try:
                for page in iterator.pages:
                    for blob in page:
                        yield CacheObject(
                            blob.name, int(blob.generation or 0), int(blob.size or 0), blob.updated
                        )
            except gexc.NotFound:
                raise BucketNotFoundError(
                    f"bucket {bucket!r} does not exist or is not visible to these credentials "
                    f"(location {selector.location.url}): check the bucket name"
                ) from None
            except gexc.Forbidden:
                raise CacheCleanupError(
                    f"not allowed to list gs://{bucket}/{prefix}: the account needs storage.objects.list "
                    "and storage.objects.delete on the bucket (e.g. roles/storage.objectAdmin)"
                ) from None

    # ----------------------------------------------------------------------------------------
    # Deleting
    # ----------------------------------------------------------------------------------------

    def cleanup(
        self,
        location: str,
        *,
        dry_run: bool = False,
        max_errors: int = 100,
        older_than: timedelta | float | str | None = None,
        max_cache_bytes: int | str | None = None,
        cache_prefixes: Sequence[str] | None = None,
        jax_pairs: bool = True,
        min_age: timedelta | float | str = DEFAULT_MIN_AGE,
        allow_bucket_root: bool = False,
        allow_any_prefix: bool = False,
    ) -> CleanupReport:
        """
        Plan and delete in one pass: deletes start while the listing goes on (same selection as
        :meth:`plan`, each delete conditioned on the generation just listed). ``dry_run`` lists and
        reports the plan but deletes nothing.
        """
        builder = self._builder(
            location,
            older_than=older_than,
            max_cache_bytes=max_cache_bytes,
            cache_prefixes=cache_prefixes,
            jax_pairs=jax_pairs,
            min_age=min_age,
            allow_bucket_root=allow_bucket_root,
            allow_any_prefix=allow_any_prefix,
        )
        check_count(max_errors, param="max_errors", low=1)
        report = CleanupReport(plan=builder.summary, dry_run=dry_run)
        entries = builder.select(self._iter_listing(builder.selector))
        if dry_run:
            started = time.monotonic()
            for _ in entries:
                pass
            report.duration_seconds = round(time.monotonic() - started, 3)
            self._log_dry_run(report)
            return report
        self._run_deletes(builder.selector.location, entries, report, max_errors)
        return report

    def cancel(self) -> None:
        """Stop a running delete after the requests in flight (e.g. from ``on_kill``)."""
        self._cancel.set()

    def delete(self, plan: CleanupPlan, *, dry_run: bool = False, max_errors: int = 100) -> CleanupReport:
        """
        Delete a plan's entries with ``max_workers`` concurrent conditional requests.

        Each delete carries ``ifGenerationMatch`` with the generation seen when planning, so an
        object rewritten since survives (counted as changed). A 404 counts as already gone, unless
        an earlier attempt of this run was sent and left unanswered (then it counts as deleted).
        JAX pairs go ``-atime`` first: if it changed, the pair is kept; if the ``-cache`` object
        then cannot go, the ``-atime`` is written back so the pair stays whole. 408/429/5xx and
        connection errors are retried with exponential backoff. Stops after ``max_errors`` failed
        objects. ``dry_run`` sends no request and reports the plan.
        """
        check_count(max_errors, param="max_errors", low=1)
        report = CleanupReport(plan=plan.summary, dry_run=dry_run)
        if dry_run:
            self._log_dry_run(report)
            return report
        self._run_deletes(plan.location, plan.entries(), report, max_errors)
        return report

    def _log_dry_run(self, report: CleanupReport) -> None:
        summary = report.plan
        self.log.info(
            "Dry run: would delete %d objects (%d bytes) in %d entries; first: %s",
            summary.planned_objects,
            summary.planned_bytes,
            summary.planned_entries,
            ", ".join(summary.planned_sample) or "-",
        )

    def _run_deletes(
        self, location: GcsLocation, entries: Iterator[CacheEntry], report: CleanupReport, max_errors: int
    ) -> None:
        self.get_conn()
        assert self._credentials is not None
        endpoint = (
            os.environ.get(EMULATOR_ENV) or getattr(self._client, "api_endpoint", None) or DEFAULT_ENDPOINT
        )
        http_client = _StorageHttp(
            endpoint, self._credentials, timeout=self.timeout, user_project=self.user_project
        )
        _DeleteRun(self, location, entries, report, http_client, max_errors).execute()

    def ensure_lifecycle_rule(
        self,
        bucket: str,
        prefix: str,
        age_days: int,
        *,
        allow_bucket_root: bool = False,
        allow_any_prefix: bool = False,
    ) -> str:
        """
        Make sure ``bucket`` has one age-based ``Delete`` rule for ``prefix``; idempotent.

        Returns ``"added"``, ``"updated"`` (the age changed; duplicates collapse into one) or
        ``"unchanged"``. Other rules are kept. The update is conditioned on the bucket's
        metageneration and re-read to confirm. The prefix must be a cache folder, as for :meth:`plan`.
        """
        return _ensure_lifecycle_rule(
            self,
            bucket,
            prefix,
            age_days,
            allow_bucket_root=allow_bucket_root,
            allow_any_prefix=allow_any_prefix,
        )


class _DeleteRun:
    """One concurrent delete pass over a plan: a bounded queue feeding worker threads."""

    def __init__(
        self,
        hook: CompilationCacheHook,
        location: GcsLocation,
        entries: Iterator[CacheEntry],
        report: CleanupReport,
        http_client: _StorageHttp,
        max_errors: int,
    ) -> None:
        self.hook = hook
        self.location = location
        self.entries = entries
        self.report = report
        self.http = http_client
        self.max_errors = max_errors
        self.prefix = location.prefix
        self.bucket_path = f"/storage/v1/b/{urllib.parse.quote(location.bucket, safe='')}/o/"
        self.lock = threading.Lock()
        self.digest = SetDigest()
        self.processed = 0
        self.stop = threading.Event()
        self.queue: queue.Queue[CacheEntry | None] = queue.Queue(maxsize=hook.max_workers * 4)

    def execute(self) -> None:
        hook = self.hook
        started = time.monotonic()
        workers = [
            threading.Thread(target=self._worker, name=f"cache-cleanup-{i}", daemon=True)
            for i in range(hook.max_workers)
        ]
        for thread in workers:
            thread.start()
        try:
            for entry in self.entries:
                if self.stop.is_set() or hook._cancel.is_set():
                    break
                self._put(entry)
        finally:
            for _ in workers:
                self._put(None, force=True)
            for thread in workers:
                thread.join()
            self.http.reset()
        if hook._cancel.is_set() and not self.report.aborted:
            self.report.aborted = "cancelled"
        self.report.duration_seconds = round(time.monotonic() - started, 3)
        self.report.deleted_digest = self.digest.hexdigest()
        hook.log.info(
            "Deleted %d objects (%d bytes) in %.1fs; kept %d changed since planning; %d already gone; "
            "%d errors",
            self.report.deleted_objects,
            self.report.deleted_bytes,
            self.report.duration_seconds,
            self.report.skipped_changed_objects,
            self.report.missing_objects,
            self.report.errors,
        )

    def _put(self, item: CacheEntry | None, force: bool = False) -> None:
        while True:
            try:
                self.queue.put(item, timeout=0.2)
                return
            except queue.Full:
                if not force and (self.stop.is_set() or self.hook._cancel.is_set()):
                    return

    def _worker(self) -> None:
        while True:
            entry = self.queue.get()
            if entry is None:
                return
            if self.stop.is_set() or self.hook._cancel.is_set():
                continue
            try:
                self._delete_entry(entry)
            except Exception as err:  # a bug must not hang the feeder: count it and go on
                self._record_error(
                    entry.objects[0].name, _Outcome("error", 0, f"{type(err).__name__}: {err}")
                )

    def _delete_entry(self, entry: CacheEntry) -> None:
        for obj in entry.objects:
            if not obj.name.startswith(self.prefix):  # never outside the location, whatever the plan says
                raise CacheCleanupError(f"refusing to delete {obj.name!r}: outside {self.location.url}")
        first = entry.objects[0]
        outcome = self._delete_object(first)
        if not entry.is_jax_pair:
            self._account(entry, [(first, outcome)])
            return
        if outcome.status in ("changed", "error"):
            self._account(entry, [(first, outcome)], whole_entry_kept=True)
            return
        second = entry.objects[1]
        second_outcome = self._delete_object(second)
        if second_outcome.status in ("changed", "error") and outcome.status == "deleted":
            restored = self._restore_atime(first)
            with self.lock:
                self.report.restored_atimes += restored
                if not restored:
                    self._record_error_locked(
                        first.name, _Outcome("error", 0, "JAX pair split: -atime deleted, -cache kept")
                    )
            if restored:
                self._account(entry, [(second, second_outcome)], whole_entry_kept=True)
                return
        self._account(entry, [(first, outcome), (second, second_outcome)])

    def _account(
        self,
        entry: CacheEntry,
        results: list[tuple[CacheObject, _Outcome]],
        whole_entry_kept: bool = False,
    ) -> None:
        report = self.report
        with self.lock:
            if whole_entry_kept:
                changed = any(o.status == "changed" for _, o in results)
                if changed:
                    report.skipped_changed_entries += 1
                    report.skipped_changed_objects += len(entry.objects)
                for obj, outcome in results:
                    if outcome.status == "error":
                        self._record_error_locked(obj.name, outcome)
            else:
                for obj, outcome in results:
                    if outcome.status == "deleted":
                        report.deleted_objects += 1
                        report.deleted_bytes += obj.size
                        self.digest.add(obj.name, obj.generation)
                    elif outcome.status == "missing":
                        report.missing_objects += 1
                    elif outcome.status == "changed":
                        report.skipped_changed_objects += 1
                    else:
                        self._record_error_locked(obj.name, outcome)
                # An entry is deleted by the run that deleted its last object (a pair's -cache):
                # concurrent cleanups count each entry once.
                last_obj, last_outcome = results[-1]
                if last_obj is entry.objects[-1] and last_outcome.status == "deleted":
                    report.deleted_entries += 1
                elif any(o.status == "changed" for _, o in results):
                    report.skipped_changed_entries += 1
            before = self.processed
            self.processed += len(entry.objects)
            every = self.hook.progress_every
            if self.processed // every > before // every:
                self.hook.log.info(
                    "Progress: %d/%d planned objects processed, %d deleted (%d bytes), %d errors",
                    self.processed,
                    report.plan.planned_objects,
                    report.deleted_objects,
                    report.deleted_bytes,
                    report.errors,
                )

    def _record_error(self, name: str, outcome: _Outcome) -> None:
        with self.lock:
            self._record_error_locked(name, outcome)

    def _record_error_locked(self, name: str, outcome: _Outcome) -> None:
        report = self.report
        report.errors += 1
        if len(report.error_samples) < _MAX_ERROR_SAMPLES:
            report.error_samples.append({"object": name, "error": outcome.detail})
        if report.errors >= self.max_errors and not self.stop.is_set():
            report.aborted = f"{report.errors} errors (max_errors={self.max_errors})"
            self.stop.set()

    def _delete_object(self, obj: CacheObject) -> _Outcome:
        path = self.bucket_path + urllib.parse.quote(obj.name, safe="")
        query = {"ifGenerationMatch": str(obj.generation)}
        return self._send("DELETE", path, query, b"", expect_missing_after_retry=True)

    def _restore_atime(self, atime: CacheObject) -> bool:
        """Write a fresh ``-atime`` back (only if none exists) so a JAX pair stays whole."""
        path = "/upload" + self.bucket_path.rstrip("/")
        stamp = time.time_ns().to_bytes(8, "little")
        query = {"uploadType": "media", "name": atime.name, "ifGenerationMatch": "0"}
        outcome = self._send("POST", path, query, stamp, expect_missing_after_retry=False)
        return outcome.status in ("deleted", "changed")  # written, or another writer re-created it

    def _send(
        self, method: str, path: str, query: dict[str, str], body: bytes, *, expect_missing_after_retry: bool
    ) -> _Outcome:
        hook = self.hook
        delay = hook.retry_initial_delay
        refreshed = False
        # An attempt the server answered (any status) was not carried out unless it says so; one sent
        # and left unanswered (connection dropped or timed out while waiting) may have been.
        maybe_applied = False
        last = _Outcome("error", 0, "no attempt made")
        for attempt in range(1, hook.max_attempts + 1):
            try:
                status, data = self.http.request(method, path, query, body, force_refresh=False)
            except RequestNotSent as err:
                last = _Outcome("error", 0, str(err)[:200])
            except (OSError, http.client.HTTPException) as err:
                maybe_applied = True
                last = _Outcome("error", 0, f"{type(err).__name__}: {err}"[:200])
            else:
                if status in (200, 204):
                    return _Outcome("deleted", status)
                if status == 412:
                    return _Outcome("changed", status)
                if status == 404:
                    # Gone: this run removed it only if an earlier attempt went unanswered.
                    gone = "deleted" if maybe_applied and expect_missing_after_retry else "missing"
                    return _Outcome(gone, status)
                if status == 401 and not refreshed:
                    refreshed = True
                    self.http._auth_lines(force_refresh=True)
                    continue
                last = _Outcome("error", status, _error_detail(status, data))
                if status not in _RETRY_STATUSES:
                    return last
            if attempt == hook.max_attempts or hook._cancel.is_set():
                break
            with self.lock:
                self.report.retries += 1
            time.sleep(min(delay, hook.retry_max_delay) * (0.5 + random.random()))
            delay = delay * 2 if delay else 0
        return last


def ensure_age_rule(
    rules: list[dict[str, Any]], prefix: str, age_days: int
) -> tuple[list[dict[str, Any]], str]:
    """The rules with exactly one ``Delete {age: age_days, matchesPrefix: [prefix]}`` rule, and the change."""
    ours = [
        i
        for i, rule in enumerate(rules)
        if (rule.get("action") or {}).get("type") == "Delete"
        and set((rule.get("condition") or {}).keys()) == {"age", "matchesPrefix"}
        and list(rule["condition"]["matchesPrefix"]) == [prefix]
    ]
    wanted = {"action": {"type": "Delete"}, "condition": {"age": age_days, "matchesPrefix": [prefix]}}
    if len(ours) == 1 and rules[ours[0]]["condition"]["age"] == age_days:
        return rules, "unchanged"
    kept = [rule for i, rule in enumerate(rules) if i not in ours]
    return [*kept, wanted], ("updated" if ours else "added")


def _ensure_lifecycle_rule(
    hook: CompilationCacheHook,
    bucket: str,
    prefix: str,
    age_days: int,
    *,
    allow_bucket_root: bool,
    allow_any_prefix: bool,
) -> str:
    from google.api_core import exceptions as gexc

    name = bucket.strip().removeprefix("gs://").strip("/") if isinstance(bucket, str) else bucket
    GcsLocation.parse(f"gs://{name}/", param="bucket")
    if not isinstance(prefix, str) or prefix.startswith("gs://"):
        raise ValueError(
            f"prefix={prefix!r} must be an object prefix inside the bucket, e.g. "
            "'pathways-scratch/shared/compilation_cache/'"
        )
    clean = normalize_prefix(prefix, param="prefix")
    if not clean and not allow_bucket_root:
        raise ValueError(
            "prefix is empty: a delete rule would cover the whole bucket; give the cache folder, e.g. "
            "'pathways-scratch/shared/compilation_cache/', or set allow_bucket_root=True"
        )
    if clean and not allow_any_prefix and not looks_like_cache_folder(clean.rstrip("/").rpartition("/")[2]):
        raise ValueError(
            f"prefix={prefix!r} is not a cache folder: an age rule deletes everything under it; give the "
            f"cache folder (e.g. '{clean}compilation_cache/') or set allow_any_prefix=True"
        )
    if isinstance(age_days, bool) or not isinstance(age_days, int) or age_days < 1:
        raise ValueError(f"age_days={age_days!r} must be a whole number of days, 1 or more")
    client = hook.get_conn()
    for _ in range(5):
        try:
            bucket_obj = client.get_bucket(name, timeout=hook.timeout)
        except gexc.NotFound:
            raise BucketNotFoundError(
                f"bucket {name!r} does not exist or is not visible to these credentials"
            ) from None
        rules = [dict(rule) for rule in bucket_obj.lifecycle_rules]
        new_rules, outcome = ensure_age_rule(rules, clean, age_days)
        if outcome == "unchanged":
            return outcome
        bucket_obj.lifecycle_rules = new_rules
        try:
            bucket_obj.patch(if_metageneration_match=bucket_obj.metageneration, timeout=hook.timeout)
        except gexc.PreconditionFailed:
            continue  # someone else changed the bucket meanwhile: read again
        check = client.get_bucket(name, timeout=hook.timeout)
        _, after = ensure_age_rule([dict(r) for r in check.lifecycle_rules], clean, age_days)
        if after != "unchanged":
            raise CacheCleanupError(
                f"the server did not keep the lifecycle rule on bucket {name!r} (it answered the update "
                "but the rule is not there): check the bucket's lifecycle configuration"
            )
        hook.log.info(
            "Lifecycle rule %s on gs://%s: delete %s* after %d days", outcome, name, clean, age_days
        )
        return outcome
    raise CacheCleanupError(f"bucket {name!r} kept changing while updating its lifecycle rules; try again")
