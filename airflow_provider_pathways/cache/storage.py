"""The GCS JSON API calls of a cleanup: list, conditional delete (single or batch), create-if-absent;
the batch format they use, listing answers read as they arrive, and the cleanup's errors.

Requests go through google-auth's authorised urllib3 pool (``AuthorizedHttp``: credentials applied
and refreshed, connections kept alive, at most ``pool_size`` kept open). An answer with a status of
:data:`~airflow_provider_pathways.transient.TRANSIENT_HTTP_STATUSES` and a connection error are
retried as the package retries every call (:class:`~airflow_provider_pathways.transient.CallRetry`:
exponential backoff, here with jitter). google-auth and urllib3 are imported when a
:class:`StorageApi` is built, not when this module is.

Listing answers (``{"nextPageToken": ..., "items": [...], "prefixes": [...]}``) are read as they
arrive, member by member and array element by element (:func:`iter_members`, elements decoded by the
standard library's C scanner), and handed on in chunks of at most :data:`CHUNK_OBJECTS` objects, so
memory holds one element and one network chunk at a time, however many objects a server puts in one
page (an emulator may answer everything at once). No page size is asked unless the caller gives one:
GCS then answers its maximum, 1000.

Every attempt is classified for the accounting rule (:mod:`.report`): *not sent* (the
connection could not be made), *answered* (any status), or *unanswered* (sent, then the connection
dropped or timed out while waiting: the server may have carried it out).

The batch format (``multipart/mixed``, up to 100 calls per request): each part of a request is one
HTTP call with a ``Content-ID``; each part of the answer carries the call's status and ``Content-ID:
<response-ID>``. Parts are matched by that id, or by position when a server sends none (GCS answers
the parts in the order they were asked).

Why not google-cloud-storage's own batch (``client.batch()`` around ``blob.delete``): the cleanup
counts every object by its own answer (deleted, 412 changed, 404 already gone, or sent and
unanswered), and the library's batch cannot give that:

- the answers of a batch run without raising are kept only in the batch's private
  ``_responses`` (``blob.delete`` returns nothing, ``raise_exception=True`` raises the last
  error only);
- it sends no ``Content-ID`` and matches answers by position, and an answer with a part missing
  fails the whole batch (``ValueError``), so the parts that were answered cannot be told from the
  one that was not: all would have to count as unanswered, and a 404 for an object another
  cleanup deleted would then count as deleted by both;
- it writes the batch with bare LF line ends and full URLs in each call (the GCS
  documentation asks for paths only); fake-gcs-server answers such a batch with no parts at all;
- it was slower than this module's in ``bench/bench_cache_cleanup.py`` (part 4; the numbers are in
  ``bench/README.md``).
"""

from __future__ import annotations

import codecs
import functools
import json
import os
import re
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from airflow_provider_pathways.cache.selection import CacheObject
from airflow_provider_pathways.transient import TRANSIENT_HTTP_STATUSES, CallRetry

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
DEFAULT_ENDPOINT = "https://storage.googleapis.com"
BATCH_UNSUPPORTED_STATUSES = frozenset({400, 404, 405, 501})
LIST_FIELDS = "items(name,generation,size,updated),prefixes,nextPageToken"
FOLDER_FIELDS = "prefixes,nextPageToken"
# Objects handed on at a time by a listing (GCS pages hold at most 1000).
CHUNK_OBJECTS = 1000
_STREAM_BYTES = 64 * 1024
_LISTED_ARRAYS = frozenset({"items", "prefixes"})

T = TypeVar("T")


class Transient(Exception):
    """A failed attempt worth retrying."""

    status: int | None = None


class NotSent(Transient):
    """The request never reached the server (connecting failed)."""


class Unanswered(Transient):
    """The request was sent and no answer came: the server may have carried it out."""


class RetryableStatus(Transient):
    """The server answered a status of ``TRANSIENT_HTTP_STATUSES``: it did not carry the request out."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


class BatchUnsupported(Exception):
    """The server has no JSON batch endpoint (it refused the batch request as a whole)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts per request and backoff delays (``calls``), and hooks for cancellation and counting
    retries."""

    calls: CallRetry = field(default_factory=lambda: CallRetry(jitter=True))
    cancelled: Callable[[], bool] = lambda: False
    on_retry: Callable[[], None] = lambda: None


class ListChunk(NamedTuple):
    """Part of a listing: objects in name order and, at the end of each answer of a listing with a
    delimiter, the folder prefixes that answer held."""

    objects: list[CacheObject]
    prefixes: list[str]


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


def _listed_object(item: dict[str, Any]) -> CacheObject:
    return CacheObject(
        item["name"],
        int(item.get("generation") or 0),
        int(item.get("size") or 0),
        parse_rfc3339(item.get("updated") or item["timeCreated"]),
    )


def _listing_refused(bucket: str, prefix: str, where: str, status: int, data: bytes) -> CacheCleanupError:
    """The error for a listing answered with a status that is not worth retrying."""
    if status == 404:
        return BucketNotFoundError(
            f"bucket {bucket!r} does not exist or is not visible to these credentials: check the bucket name"
        )
    if status in (401, 403):
        return CacheCleanupError(
            f"not allowed to list {where}: the account needs storage.objects.list "
            "and storage.objects.delete on the bucket (e.g. roles/storage.objectAdmin)"
        )
    return CacheCleanupError(f"listing {where} failed: {error_detail(status, data)}")


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

    def _send(
        self,
        call: _Call,
        method: str,
        url: str,
        body: bytes | None = None,
        content_type: str | None = None,
        *,
        stream: bool = False,
    ) -> Any:
        """Send one attempt and return the urllib3 response (its body not read yet if ``stream``);
        raises :class:`NotSent` or :class:`Unanswered`."""
        call.attempts += 1
        headers = dict(self._headers)
        if content_type:
            headers["Content-Type"] = content_type
        try:
            return self._http.request(
                method,
                url,
                body=body,
                headers=headers,
                retries=False,
                redirect=False,
                timeout=self._timeout,
                preload_content=not stream,
            )
        except self._not_sent as err:
            raise NotSent(f"{type(err).__name__}: {err}"[:200]) from None
        except self._unanswered as err:
            call.unanswered = True
            raise Unanswered(f"{type(err).__name__}: {err}"[:200]) from None

    def _attempt(
        self, call: _Call, method: str, url: str, body: bytes | None = None, content_type: str | None = None
    ) -> tuple[int, str, bytes]:
        """One attempt: (status, content type, body); raises :class:`Transient` to be retried."""
        response = self._send(call, method, url, body, content_type)
        data = response.data
        if response.status in TRANSIENT_HTTP_STATUSES:
            raise RetryableStatus(response.status, error_detail(response.status, data))
        return response.status, response.headers.get("Content-Type", ""), data

    def _retrying(self, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` until it succeeds, fails for good, or the attempts are used up."""
        return self.policy.calls.call(attempt, is_transient=self._retryable, on_retry=self._counted)

    def _retryable(self, err: BaseException) -> bool:
        return isinstance(err, Transient) and not self.policy.cancelled()

    def _counted(self, _err: BaseException, _delay: float) -> None:
        self.policy.on_retry()

    # ----------------------------------------------------------------------------------------

    def list_chunks(
        self,
        bucket: str,
        prefix: str,
        page_size: int | None = None,
        *,
        delimiter: str = "",
        start_offset: str = "",
        folders_only: bool = False,
        chunk_size: int = CHUNK_OBJECTS,
        on_next_page: Callable[[], None] | None = None,
    ) -> Iterator[ListChunk]:
        """Objects under ``prefix`` in name order, in chunks of at most ``chunk_size``, read as the
        answers arrive. ``page_size``: ``maxResults`` to ask (None: the server's own, 1000 on GCS).
        With a ``delimiter``, objects below the next delimiter are left out and their folder
        prefixes come instead (with the last chunk of each answer); ``folders_only`` asks for the
        prefixes alone (one chunk per answer, empty if the answer named no folder).
        ``start_offset``: only names from this one on. ``on_next_page`` is called as soon as an
        answer says another page follows.

        An answer cut off while it was being read is asked again (backoff and attempts as for
        every request); what was already handed on is skipped, by name.
        """
        path = f"/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o"
        where = f"gs://{bucket}/{prefix}"
        token: str | None = None
        handed_on: str | None = None  # the last object name handed on
        while True:
            query = {"fields": FOLDER_FIELDS if folders_only else LIST_FIELDS}
            if page_size:
                query["maxResults"] = str(page_size)
            if prefix:
                query["prefix"] = prefix
            if delimiter:
                query["delimiter"] = delimiter
            if start_offset:
                query["startOffset"] = start_offset
            if token:
                query["pageToken"] = token
            url = self._url(path, query)
            call = _Call()
            answer: dict[str, str | None] = {"next": None}

            def read_answer(
                url: str = url, call: _Call = call, answer: dict[str, str | None] = answer
            ) -> Iterator[ListChunk]:
                nonlocal handed_on
                answer["next"] = None
                response = self._send(call, "GET", url, stream=True)
                done = False
                try:
                    status = response.status
                    if status != 200:
                        data = response.data
                        done = True
                        if status in TRANSIENT_HTTP_STATUSES:
                            raise RetryableStatus(status, error_detail(status, data))
                        raise _listing_refused(bucket, prefix, where, status, data)
                    objects: list[CacheObject] = []
                    prefixes: list[str] = []
                    try:
                        for key, value in iter_members(response.stream(_STREAM_BYTES), _LISTED_ARRAYS):
                            if key == "items":
                                obj = _listed_object(value)
                                if handed_on is not None and obj.name <= handed_on:
                                    continue  # handed on before this answer was cut off
                                if len(objects) >= chunk_size:
                                    handed_on = objects[-1].name
                                    yield ListChunk(objects, [])
                                    objects = []
                                objects.append(obj)
                            elif key == "prefixes":
                                prefixes.append(value)
                            elif key == "nextPageToken":
                                answer["next"] = value
                                if value and on_next_page is not None:
                                    on_next_page()
                    except self._unanswered as err:
                        raise Unanswered(f"{type(err).__name__}: {err}"[:200]) from None
                    except (ValueError, KeyError, TypeError) as err:
                        raise Unanswered(f"listing answer unreadable: {err}"[:200]) from None
                    done = True
                    if objects:
                        handed_on = objects[-1].name
                    if objects or prefixes or folders_only:
                        yield ListChunk(objects, prefixes)
                finally:
                    if done:
                        response.release_conn()
                    else:  # stopped or cut off while reading: the connection cannot be reused
                        response.close()
                        response.release_conn()

            try:
                yield from self.policy.calls.stream(
                    read_answer, is_transient=self._retryable, on_retry=self._counted
                )
            except Transient as err:
                raise CacheCleanupError(f"listing {where} failed: {err}") from None
            token = answer["next"]
            if not token:
                return

    def list_pages(
        self, bucket: str, prefix: str, page_size: int | None = None
    ) -> Iterator[list[CacheObject]]:
        """Objects under ``prefix``, in name order, a chunk (at most :data:`CHUNK_OBJECTS`) at a time."""
        for chunk in self.list_chunks(bucket, prefix, page_size):
            if chunk.objects:
                yield chunk.objects

    def delete(self, bucket: str, obj: CacheObject) -> DeleteResult:
        """Delete ``obj`` if its generation is still the one listed (``ifGenerationMatch``)."""
        url = self._url(self.object_path(bucket, obj.name), {"ifGenerationMatch": str(obj.generation)})
        call = _Call()
        try:
            status, _, data = self._retrying(functools.partial(self._attempt, call, "DELETE", url))
        except Transient as err:
            return DeleteResult(err.status, call.unanswered, str(err))
        return DeleteResult(status, call.unanswered, "" if status < 300 else error_detail(status, data))

    def delete_batch(self, bucket: str, objects: Sequence[CacheObject]) -> list[DeleteResult]:
        """Delete ``objects`` (at most 100) in JSON batch requests, each part conditioned like :meth:`delete`.

        Parts answered with a status worth a retry, and parts missing from an answer, are sent
        again in a smaller batch. Raises :class:`BatchUnsupported` if the server refuses batches
        (nothing was done).
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
                elif answer.status in TRANSIENT_HTTP_STATUSES:
                    details[index] = (answer.status, error_detail(answer.status, answer.body))
                else:
                    detail = "" if answer.status < 300 else error_detail(answer.status, answer.body)
                    results[index] = DeleteResult(answer.status, index in unanswered, detail)
                    del pending[index]
            if pending:
                raise RetryableStatus(503, f"{len(pending)} of {len(calls)} batch parts to send again")

        try:
            self._retrying(attempt)
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
                lambda: self._attempt(call, "POST", url, data, "application/octet-stream")
            )
        except Transient:
            return False
        return 200 <= status < 300 or status == 412  # written, or another writer re-created it


class CacheCleanupError(Exception):
    """A cleanup could not run (missing bucket, no permission, server refused a change)."""


class BucketNotFoundError(CacheCleanupError):
    """The bucket does not exist or the credentials cannot see it."""


BATCH_LIMIT = 100
_BOUNDARY = re.compile(r'boundary="?([^";]+)"?', re.IGNORECASE)
_STATUS_LINE = re.compile(rb"^HTTP/\d(?:\.\d)?\s+(\d{3})")


@dataclass(frozen=True)
class BatchCall:
    """One call inside a batch: method and path with query (``/storage/v1/b/B/o/NAME?...``)."""

    content_id: str
    method: str
    target: str


@dataclass(frozen=True)
class BatchAnswer:
    """One answered call: its id (``None`` if the server sent none), status and body."""

    content_id: str | None
    status: int
    body: bytes


def encode_batch(calls: Sequence[BatchCall]) -> tuple[bytes, str]:
    """The request body and its ``Content-Type`` for ``calls`` (at most :data:`BATCH_LIMIT`)."""
    if not 1 <= len(calls) <= BATCH_LIMIT:
        raise ValueError(f"a batch holds 1 to {BATCH_LIMIT} calls, got {len(calls)}")
    boundary = f"batch_{uuid.uuid4().hex}"
    chunks = []
    for call in calls:
        chunks.append(
            f"--{boundary}\r\n"
            "Content-Type: application/http\r\n"
            "Content-Transfer-Encoding: binary\r\n"
            f"Content-ID: <{call.content_id}>\r\n"
            "\r\n"
            f"{call.method} {call.target} HTTP/1.1\r\n"
            "Content-Length: 0\r\n"
            "\r\n"  # end of the call's headers
            "\r\n"  # belongs to the next delimiter
        )
    chunks.append(f"--{boundary}--\r\n")
    return "".join(chunks).encode("utf-8"), f"multipart/mixed; boundary={boundary}"


def parse_batch_response(content_type: str, body: bytes) -> list[BatchAnswer]:
    """The answers in a ``multipart/mixed`` batch response, in the order the server sent them.

    Raises ``ValueError`` when the response is not a batch response.
    """
    match = _BOUNDARY.search(content_type or "")
    if not content_type.lower().startswith("multipart/") or match is None:
        raise ValueError(f"not a batch response (Content-Type {content_type!r})")
    delimiter = b"--" + match.group(1).encode("latin-1")
    answers: list[BatchAnswer] = []
    for raw in body.split(delimiter)[1:]:
        if raw.startswith(b"--"):
            break  # the closing delimiter
        lines = raw.lstrip(b"\r\n").split(b"\n")
        content_id: str | None = None
        status: int | None = None
        rest_at = len(lines)
        for number, line in enumerate(lines):
            text = line.rstrip(b"\r")
            status_match = _STATUS_LINE.match(text)
            if status_match:
                status, rest_at = int(status_match.group(1)), number + 1
                break
            name, _, value = text.partition(b":")
            if name.strip().lower() == b"content-id":
                content_id = _answer_id(value.decode("latin-1").strip())
        if status is None:
            raise ValueError("a batch response part has no status line")
        rest = b"\n".join(lines[rest_at:])
        _, _, payload = rest.partition(b"\r\n\r\n") if b"\r\n\r\n" in rest else rest.partition(b"\n\n")
        answers.append(BatchAnswer(content_id, status, payload.strip()))
    return answers


def _answer_id(value: str) -> str:
    """``<response-ID>`` -> ``ID``."""
    value = value.strip("<>")
    return value[len("response-") :] if value.startswith("response-") else value


_WHITESPACE = " \t\n\r"
_DECODER = json.JSONDecoder()
_COMPACT_AT = 1 << 16


class _Text:
    """Decoded text over an iterable of byte chunks, with a read position."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self.buf = ""
        self.pos = 0
        self.eof = False

    def more(self) -> bool:
        """Append the next chunk's text; False at the end of the input."""
        if self.eof:
            return False
        if self.pos >= _COMPACT_AT:
            self.buf, self.pos = self.buf[self.pos :], 0
        for chunk in self._chunks:
            text = self._utf8.decode(chunk)
            if text:
                self.buf += text
                return True
        self.eof = True
        tail = self._utf8.decode(b"", final=True)
        self.buf += tail
        return bool(tail)

    def peek(self) -> str:
        """The next character that is not whitespace (not consumed); ``""`` at the end."""
        while True:
            buf, pos = self.buf, self.pos
            while pos < len(buf) and buf[pos] in _WHITESPACE:
                pos += 1
            self.pos = pos
            if pos < len(buf):
                return buf[pos]
            if not self.more():
                return ""

    def expect(self, char: str) -> None:
        found = self.peek()
        if found != char:
            raise ValueError(f"expected {char!r} in the JSON answer, found {found or 'its end'!r}")
        self.pos += 1

    def value(self) -> Any:
        """Decode the next complete JSON value."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                if self.more():
                    continue
                raise ValueError("the JSON answer ends inside a value") from None
            if end >= len(self.buf) and isinstance(value, (int, float)) and self.more():
                continue  # a number may go on in the next chunk
            self.pos = end
            return value


def iter_members(chunks: Iterable[bytes], streamed: frozenset[str]) -> Iterator[tuple[str, Any]]:
    """``(key, value)`` for each member of the top-level JSON object in ``chunks``; for a key in
    ``streamed`` whose value is an array, ``(key, element)`` for each element instead.

    Raises ``ValueError`` if the input is not one complete JSON object.
    """
    text = _Text(chunks)
    text.expect("{")
    if text.peek() == "}":
        text.pos += 1
    else:
        while True:
            key = text.value()
            if not isinstance(key, str):
                raise ValueError("a JSON object key is not a string")
            text.expect(":")
            if key in streamed and text.peek() == "[":
                text.pos += 1
                if text.peek() == "]":
                    text.pos += 1
                else:
                    while True:
                        yield key, text.value()
                        after = text.peek()
                        text.pos += 1
                        if after == "]":
                            break
                        if after != ",":
                            raise ValueError(f"expected ',' or ']' in the JSON answer, found {after!r}")
            else:
                yield key, text.value()
            after = text.peek()
            text.pos += 1
            if after == "}":
                break
            if after != ",":
                raise ValueError(f"expected ',' or '}}' in the JSON answer, found {after!r}")
    if text.peek():
        raise ValueError("the JSON answer goes on after its object")
