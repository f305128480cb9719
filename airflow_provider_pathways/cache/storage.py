"""The GCS JSON API calls of a cleanup: list, conditional delete (single or batch), create-if-absent.

Requests go through google-auth's authorised urllib3 pool (``AuthorizedHttp``: credentials applied
and refreshed, connections kept alive, at most ``pool_size`` kept open) and are retried on
408/429/5xx and connection errors by ``google.api_core.retry`` with exponential backoff and
jitter. google-auth, urllib3 and google-api-core are imported when a :class:`StorageApi` is
built, not when this module is.

Every attempt is classified for the accounting rule (:mod:`.accounting`): *not sent* (the
connection could not be made), *answered* (any status), or *unanswered* (sent, then the connection
dropped or timed out while waiting: the server may have carried it out).
"""

from __future__ import annotations

import functools
import json
import os
import queue
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from airflow_provider_pathways.cache.batch import BatchCall, encode_batch, parse_batch_response
from airflow_provider_pathways.cache.errors import BucketNotFoundError, CacheCleanupError
from airflow_provider_pathways.cache.selection import CacheObject

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
DEFAULT_ENDPOINT = "https://storage.googleapis.com"
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
BATCH_UNSUPPORTED_STATUSES = frozenset({400, 404, 405, 501})
LIST_FIELDS = "items(name,generation,size,updated),nextPageToken"

T = TypeVar("T")


class Transient(Exception):
    """A failed attempt worth retrying."""

    status: int | None = None


class NotSent(Transient):
    """The request never reached the server (connecting failed)."""


class Unanswered(Transient):
    """The request was sent and no answer came: the server may have carried it out."""


class RetryableStatus(Transient):
    """The server answered 408, 429 or 5xx: it did not carry the request out."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


class BatchUnsupported(Exception):
    """The server has no JSON batch endpoint (it refused the batch request as a whole)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts per request, backoff delays, and hooks for cancellation and counting retries."""

    max_attempts: int = 6
    initial_delay: float = 0.5
    max_delay: float = 16.0
    cancelled: Callable[[], bool] = lambda: False
    on_retry: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class DeleteResult:
    """A delete's final answer (``None``: none) and whether an earlier attempt went unanswered."""

    status: int | None
    unanswered_before: bool
    detail: str = ""


class _Call:
    """One logical request across its attempts."""

    __slots__ = ("attempts", "unanswered")

    def __init__(self) -> None:
        self.attempts = 0
        self.unanswered = False


def storage_endpoint() -> str:
    """``STORAGE_EMULATOR_HOST`` (an emulator) if set, else the public GCS endpoint."""
    host = os.environ.get(EMULATOR_ENV, "").strip().rstrip("/")
    if not host:
        return DEFAULT_ENDPOINT
    return host if "://" in host else f"http://{host}"


def error_detail(status: int, body: bytes) -> str:
    """The server's error message (never request headers), shortened."""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body[:200].decode("utf-8", errors="replace")
    return f"HTTP {status}: {str(message)[:200]}"


def parse_rfc3339(text: str) -> datetime:
    """A GCS timestamp such as ``2026-01-01T10:00:00.123Z`` as an aware datetime."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:  # more than 6 fraction digits, or an older Python
        from google.api_core.datetime_helpers import from_rfc3339

        return from_rfc3339(text)


def prefetched(pages: Iterable[list[T]], depth: int = 1) -> Iterator[T]:
    """Yield the items of ``pages`` while a thread fetches up to ``depth`` pages ahead."""
    slots: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def fetch() -> None:
        try:
            for page in pages:
                while not stop.is_set():
                    try:
                        slots.put(("page", page), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            slots.put(("end", None))
        except BaseException as err:  # handed to the consumer
            slots.put(("error", err))

    thread = threading.Thread(target=fetch, name="cache-listing", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = slots.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield from value
    finally:
        stop.set()


class StorageApi:
    """The JSON API calls of a cleanup over one authorised, pooled HTTP client.

    :param credentials: google-auth credentials (anonymous for an emulator).
    :param endpoint: API root, e.g. ``https://storage.googleapis.com`` (:func:`storage_endpoint`).
    :param pool_size: connections kept open (one per concurrent request).
    :param timeout: seconds to connect, and to wait for each answer.
    :param user_project: project billed for requester-pays buckets.
    :param user_agent: ``User-Agent`` header.
    :param policy: retries.
    """

    def __init__(
        self,
        credentials: Any,
        *,
        endpoint: str,
        pool_size: int,
        timeout: float,
        user_project: str | None,
        user_agent: str,
        policy: RetryPolicy,
    ) -> None:
        import urllib3
        from google.auth.transport.urllib3 import AuthorizedHttp

        self.endpoint = endpoint.rstrip("/")
        self.user_project = user_project
        self.policy = policy
        self._timeout = urllib3.Timeout(connect=timeout, read=timeout)
        self._headers = {"User-Agent": user_agent}
        scheme = urllib.parse.urlsplit(self.endpoint).scheme
        host = urllib.parse.urlsplit(self.endpoint).hostname or ""
        proxy = urllib.request.getproxies().get(scheme)
        manager: urllib3.PoolManager
        if proxy and not urllib.request.proxy_bypass(host):
            manager = urllib3.ProxyManager(proxy, num_pools=2, maxsize=pool_size, retries=False)
        else:
            manager = urllib3.PoolManager(num_pools=2, maxsize=pool_size, retries=False)
        self._manager = manager
        self._http = AuthorizedHttp(credentials, http=manager)
        errors = urllib3.exceptions
        self._not_sent: tuple[type[BaseException], ...] = (
            errors.NewConnectionError,
            errors.ConnectTimeoutError,
            errors.ProxyError,
            errors.EmptyPoolError,
            errors.ClosedPoolError,
            errors.LocationValueError,
        )
        self._unanswered: tuple[type[BaseException], ...] = (errors.HTTPError, OSError)

    def close(self) -> None:
        """Close the pooled connections."""
        self._manager.clear()

    # ----------------------------------------------------------------------------------------

    def _url(self, path: str, query: dict[str, str]) -> str:
        if self.user_project:
            query = {**query, "userProject": self.user_project}
        return f"{self.endpoint}{path}?{urllib.parse.urlencode(query)}" if query else f"{self.endpoint}{path}"

    @staticmethod
    def object_path(bucket: str, name: str) -> str:
        """``/storage/v1/b/BUCKET/o/NAME`` with both parts escaped."""
        return f"/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o/{urllib.parse.quote(name, safe='')}"

    def _attempt(
        self, call: _Call, method: str, url: str, body: bytes | None = None, content_type: str | None = None
    ) -> tuple[int, str, bytes]:
        """One attempt: (status, content type, body); raises :class:`Transient` to be retried."""
        call.attempts += 1
        headers = dict(self._headers)
        if content_type:
            headers["Content-Type"] = content_type
        try:
            response = self._http.request(
                method, url, body=body, headers=headers, retries=False, redirect=False, timeout=self._timeout
            )
        except self._not_sent as err:
            raise NotSent(f"{type(err).__name__}: {err}"[:200]) from None
        except self._unanswered as err:
            call.unanswered = True
            raise Unanswered(f"{type(err).__name__}: {err}"[:200]) from None
        data = response.data
        if response.status in RETRY_STATUSES:
            raise RetryableStatus(response.status, error_detail(response.status, data))
        return response.status, response.headers.get("Content-Type", ""), data

    def _retrying(self, call: _Call, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` until it succeeds, fails for good, or the attempts are used up."""
        from google.api_core import retry as api_retry

        policy = self.policy

        def retryable(err: Exception) -> bool:
            return (
                isinstance(err, Transient) and call.attempts < policy.max_attempts and not policy.cancelled()
            )

        retry = api_retry.Retry(
            predicate=retryable,
            initial=policy.initial_delay,
            maximum=policy.max_delay,
            multiplier=2.0,
            timeout=None,
            on_error=lambda _err: policy.on_retry(),
        )
        return retry(attempt)()

    # ----------------------------------------------------------------------------------------

    def list_pages(self, bucket: str, prefix: str, page_size: int) -> Iterator[list[CacheObject]]:
        """Objects under ``prefix``, in name order, one page (at most ``page_size``) at a time."""
        path = f"/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o"
        token: str | None = None
        while True:
            query = {"maxResults": str(page_size), "fields": LIST_FIELDS}
            if prefix:
                query["prefix"] = prefix
            if token:
                query["pageToken"] = token
            url = self._url(path, query)
            call = _Call()
            try:
                status, _, data = self._retrying(call, functools.partial(self._attempt, call, "GET", url))
            except Transient as err:
                raise CacheCleanupError(f"listing gs://{bucket}/{prefix} failed: {err}") from None
            if status == 404:
                raise BucketNotFoundError(
                    f"bucket {bucket!r} does not exist or is not visible to these credentials: "
                    "check the bucket name"
                )
            if status in (401, 403):
                raise CacheCleanupError(
                    f"not allowed to list gs://{bucket}/{prefix}: the account needs storage.objects.list "
                    "and storage.objects.delete on the bucket (e.g. roles/storage.objectAdmin)"
                )
            if status != 200:
                raise CacheCleanupError(
                    f"listing gs://{bucket}/{prefix} failed: {error_detail(status, data)}"
                )
            page = json.loads(data)
            yield [
                CacheObject(
                    item["name"],
                    int(item.get("generation") or 0),
                    int(item.get("size") or 0),
                    parse_rfc3339(item.get("updated") or item["timeCreated"]),
                )
                for item in page.get("items", ())
            ]
            token = page.get("nextPageToken")
            if not token:
                return

    def delete(self, bucket: str, obj: CacheObject) -> DeleteResult:
        """Delete ``obj`` if its generation is still the one listed (``ifGenerationMatch``)."""
        url = self._url(self.object_path(bucket, obj.name), {"ifGenerationMatch": str(obj.generation)})
        call = _Call()
        try:
            status, _, data = self._retrying(call, functools.partial(self._attempt, call, "DELETE", url))
        except Transient as err:
            return DeleteResult(err.status, call.unanswered, str(err))
        return DeleteResult(status, call.unanswered, "" if status < 300 else error_detail(status, data))

    def delete_batch(self, bucket: str, objects: Sequence[CacheObject]) -> list[DeleteResult]:
        """Delete ``objects`` (at most 100) in JSON batch requests, each part conditioned like :meth:`delete`.

        Parts answered 408/429/5xx, and parts missing from an answer, are sent again in a smaller
        batch. Raises :class:`BatchUnsupported` if the server refuses batches (nothing was done).
        """
        pending = dict(enumerate(objects))
        results: dict[int, DeleteResult] = {}
        unanswered: set[int] = set()
        details: dict[int, tuple[int | None, str]] = {}
        call = _Call()
        url = f"{self.endpoint}/batch/storage/v1"
        query = {"userProject": self.user_project} if self.user_project else {}

        def attempt() -> None:
            calls = [
                BatchCall(
                    str(index),
                    "DELETE",
                    self.object_path(bucket, obj.name)
                    + "?"
                    + urllib.parse.urlencode({"ifGenerationMatch": str(obj.generation), **query}),
                )
                for index, obj in sorted(pending.items())
            ]
            body, content_type = encode_batch(calls)
            try:
                status, answer_type, data = self._attempt(call, "POST", url, body, content_type)
            except Unanswered:
                unanswered.update(pending)
                raise
            if status in BATCH_UNSUPPORTED_STATUSES and call.attempts == 1:
                raise BatchUnsupported(error_detail(status, data))
            if status != 200:
                for index in list(pending):
                    results[index] = DeleteResult(status, index in unanswered, error_detail(status, data))
                pending.clear()
                return
            try:
                answers = parse_batch_response(answer_type, data)
            except ValueError as err:
                unanswered.update(pending)
                raise Unanswered(str(err)) from None
            by_id = {a.content_id: a for a in answers if a.content_id is not None}
            for position, (index, _) in enumerate(sorted(pending.items())):
                answer = by_id.get(str(index))
                if answer is None and not by_id and position < len(answers):
                    answer = answers[position]  # a server that sends no ids answers in order
                if answer is None:
                    unanswered.add(index)
                    details[index] = (None, "no answer for this object in the batch response")
                elif answer.status in RETRY_STATUSES:
                    details[index] = (answer.status, error_detail(answer.status, answer.body))
                else:
                    detail = "" if answer.status < 300 else error_detail(answer.status, answer.body)
                    results[index] = DeleteResult(answer.status, index in unanswered, detail)
                    del pending[index]
            if pending:
                raise RetryableStatus(503, f"{len(pending)} of {len(calls)} batch parts to send again")

        try:
            self._retrying(call, attempt)
        except Transient as err:
            for index in pending:
                status, detail = details.get(index, (err.status, str(err)))
                results[index] = DeleteResult(status, index in unanswered, detail)
        return [results[index] for index in range(len(objects))]

    def create_if_absent(self, bucket: str, name: str, data: bytes) -> bool:
        """Write ``name`` only if no object has that name; True if it exists afterwards."""
        path = f"/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o"
        url = self._url(path, {"uploadType": "media", "name": name, "ifGenerationMatch": "0"})
        call = _Call()
        try:
            status, _, _ = self._retrying(
                call, lambda: self._attempt(call, "POST", url, data, "application/octet-stream")
            )
        except Transient:
            return False
        return 200 <= status < 300 or status == 412  # written, or another writer re-created it
