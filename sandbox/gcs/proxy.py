"""An HTTP proxy in front of a GCS emulator that records deletes and adds what the emulator lacks.

Measured: fake-gcs-server and gcp-storage-emulator both ignore ``ifGenerationMatch`` on object
DELETE. Real GCS answers 412 when the object's generation differs. This proxy does that check (it
reads the object's current generation from the emulator, then forwards the delete only if it
matches), records every DELETE it sees with its query (so tests can show the condition was sent
with each request) and every request's method, path and ``Authorization`` header, and injects
two kinds of faults on the first N delete attempts of each object:

- ``fail_deletes(503, n)``: answer with an error status *before* forwarding (the object stays);
- ``drop_delete_responses(n)``: forward the delete (the object goes), then close the connection
  without an answer, as when a response is lost on the way back.

JSON batch requests (``POST /batch/storage/v1``) are answered by the proxy itself: each part is
handled as the single DELETE above (recorded, checked, faults injected, then forwarded on its
own), and the answers go back as one ``multipart/mixed`` response. With
``drop_delete_responses``, a batch loses its whole answer when a faulty part was carried out and
so was every other part (a request carried out in full, its answer lost).

``refuse_batches()`` makes it answer batch requests with 404, like a server without them.
``fail_bucket_requests(status, n)`` answers the next ``n`` requests for a bucket's own metadata
(reading it, updating its lifecycle rules) with ``status`` instead of forwarding them.
``cut_listings(n, after_bytes)`` forwards the next ``n`` object listings but sends only the first
``after_bytes`` bytes of each answer's body (its full length announced), then closes the
connection, as when a connection breaks while an answer is read. ``hold_listings(n)`` makes the
next ``n`` object listings wait for one another before they are forwarded (a barrier, with a
deadline), and ``listings_in_flight_high`` says how many listings it has seen at once, so a test can
show listings run at the same time. Everything else is forwarded unchanged.
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import http.client
import json
import threading
import urllib.parse
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"})


@dataclass
class RecordedDelete:
    """One DELETE of an object as the proxy saw it, and what it answered."""

    bucket: str
    name: str
    query: dict[str, str]
    status: int


@dataclass
class _Faults:
    status: int = 0  # 0: drop the response after forwarding
    per_object: int = 0
    seen: dict[str, int] = field(default_factory=dict)
    injected: int = 0

    def take(self, name: str) -> bool:
        """Whether this attempt on ``name`` gets the fault (counts it)."""
        if self.per_object and self.seen.get(name, 0) < self.per_object:
            self.seen[name] = self.seen.get(name, 0) + 1
            return True
        return False


_DROP = (0, [], b"")  # sentinel answer: close the connection without responding


class GcsProxy:
    """A running proxy: point ``STORAGE_EMULATOR_HOST`` at :attr:`url`."""

    def __init__(
        self, upstream: str, *, enforce_generation_match: bool = True, host: str = "127.0.0.1"
    ) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream_host = parsed.hostname or "127.0.0.1"
        self.upstream_port = parsed.port or 80
        self.enforce_generation_match = enforce_generation_match
        self.deletes: list[RecordedDelete] = []
        self.requests: list[tuple[str, str]] = []
        self.fault_injected = threading.Event()  # set at the first fault injected
        self.authorizations: list[str] = []  # the Authorization header of every request that had one
        self.batches = True
        self._bucket_faults = (0, 0)  # (status, bucket requests still to answer with it)
        self.bucket_faults_injected = 0
        self.cut_answers = 0  # listing answers cut off so far
        self._cuts = (0, 0)  # (listings still to cut, bytes of each answer to send)
        self._hold: tuple[threading.Barrier, int] | None = None  # (barrier, listings still to hold)
        self._listings_in_flight = 0
        self.listings_in_flight_high = 0
        self._faults = _Faults()
        self._lock = threading.Lock()
        self._local = threading.local()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.command == "GET" and _is_listing_path(urllib.parse.urlsplit(self.path).path):
                    proxy._listing_started()
                    try:
                        answer = proxy._dispatch(self.command, self.path, dict(self.headers), body)
                    finally:
                        proxy._listing_ended()
                else:
                    answer = proxy._dispatch(self.command, self.path, dict(self.headers), body)
                status, headers, data = answer
                if status == 0:
                    self.close_connection = True
                    return
                cut = proxy._cut_at(self.command, self.path, status, len(data))
                self.send_response(status)
                for key, value in headers:
                    if key.lower() not in _HOP_HEADERS and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if cut is None:
                    self.wfile.write(data)
                else:  # the announced length is never sent in full
                    self.wfile.write(data[:cut])
                    self.wfile.flush()
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="gcs-proxy", daemon=True
        )
        self._thread.start()

    def refuse_batches(self) -> None:
        """Answer batch requests with 404, as a server without the batch endpoint does."""
        self.batches = False

    def fail_bucket_requests(self, status: int, count: int) -> None:
        """Answer the next ``count`` requests for a bucket's own metadata (``/storage/v1/b/BUCKET``)
        with ``status``, without forwarding them."""
        if status < 400:
            raise ValueError(f"status={status}: give an error status such as 503 or 429")
        with self._lock:
            self._bucket_faults = (status, count)

    def _bucket_fault(self, path: str) -> int | None:
        """The status to answer this request with instead of forwarding it, if any."""
        if len(path.split("/")) != 5 or not path.startswith("/storage/v1/b/"):
            return None
        with self._lock:
            status, left = self._bucket_faults
            if left <= 0:
                return None
            self._bucket_faults = (status, left - 1)
            self.bucket_faults_injected += 1
        return status

    def hold_listings(self, count: int, timeout: float = 30.0) -> None:
        """Make the next ``count`` object listings wait until ``count`` are in flight at once (or
        ``timeout`` seconds pass; then they go on) before they are forwarded."""
        with self._lock:
            self._hold = (threading.Barrier(count, timeout=timeout), count)

    def _listing_started(self) -> None:
        with self._lock:
            self._listings_in_flight += 1
            self.listings_in_flight_high = max(self.listings_in_flight_high, self._listings_in_flight)
            barrier = None
            if self._hold is not None:
                barrier, left = self._hold
                self._hold = (barrier, left - 1) if left > 1 else None
        if barrier is not None:
            with contextlib.suppress(threading.BrokenBarrierError):  # not all came in time: go on
                barrier.wait()

    def _listing_ended(self) -> None:
        with self._lock:
            self._listings_in_flight -= 1

    def cut_listings(self, count: int, after_bytes: int) -> None:
        """Send only the first ``after_bytes`` bytes of the next ``count`` object listing answers
        (answered 200 with a longer body), then close the connection."""
        with self._lock:
            self._cuts = (count, after_bytes)

    def _cut_at(self, method: str, path: str, status: int, length: int) -> int | None:
        """Where to cut this answer off, or None to send it whole."""
        if method != "GET" or not _is_listing_path(urllib.parse.urlsplit(path).path) or status != 200:
            return None
        with self._lock:
            count, after = self._cuts
            if count <= 0 or after >= length:
                return None
            self._cuts = (count - 1, after)
            self.cut_answers += 1
        return after

    def fail_deletes(self, status: int, per_object: int) -> None:
        """Answer the first ``per_object`` DELETE attempts of each object with ``status`` (not forwarded)."""
        if status < 400:
            raise ValueError(f"status={status}: give an error status such as 503 or 429")
        with self._lock:
            self._faults = _Faults(status=status, per_object=per_object)
            self.fault_injected.clear()

    def drop_delete_responses(self, per_object: int) -> None:
        """Forward the first ``per_object`` DELETE attempts of each object, then drop the connection
        without answering: the object is gone but the client never hears so."""
        with self._lock:
            self._faults = _Faults(status=0, per_object=per_object)
            self.fault_injected.clear()

    def faults_injected(self) -> int:
        """How many error answers or dropped answers the proxy has injected since the last setting."""
        with self._lock:
            return self._faults.injected

    def deleted_by_proxy(self) -> int:
        """How many DELETEs the emulator carried out (answered 2xx, or forwarded and then dropped)."""
        with self._lock:
            return sum(1 for d in self.deletes if 200 <= d.status < 300 or d.status == 0)

    def _upstream(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = getattr(self._local, "conn", None)
        for attempt in range(2):
            if conn is None:
                conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
                self._local.conn = conn
            try:
                forward = {
                    k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS and k.lower() != "host"
                }
                forward["Content-Length"] = str(len(body))
                conn.request(method, path, body=body or None, headers=forward)
                response = conn.getresponse()
                return response.status, response.getheaders(), response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = self._local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _dispatch(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        authorization = next((v for k, v in headers.items() if k.lower() == "authorization"), None)
        with self._lock:
            self.requests.append((method, path))
            if authorization is not None:
                self.authorizations.append(authorization)
        parsed = urllib.parse.urlsplit(path)
        if method == "POST" and parsed.path == "/batch/storage/v1":
            return self._batch(headers, body) if self.batches else _error(404, "Not Found")
        fault = self._bucket_fault(parsed.path)
        if fault is not None:
            return _error(fault, "injected by the sandbox proxy")
        if method != "DELETE" or not _is_object_path(parsed.path):
            return self._upstream(method, path, headers, body)
        answer = self._recorded_delete(path, headers)
        return self._lose_answer() if answer[0] == 0 else answer

    def _recorded_delete(
        self, path: str, headers: dict[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        parsed = urllib.parse.urlsplit(path)
        parts = parsed.path.split("/")
        bucket = urllib.parse.unquote(parts[4])
        name = urllib.parse.unquote(parts[6])
        query = dict(urllib.parse.parse_qsl(parsed.query))
        status, out_headers, data = self._delete("DELETE", path, headers, b"", name, query)
        with self._lock:
            self.deletes.append(RecordedDelete(bucket, name, query, status))
        return status, out_headers, data

    def _lose_answer(self) -> tuple[int, list[tuple[str, str]], bytes]:
        with self._lock:
            self._faults.injected += 1
        self.fault_injected.set()
        return _DROP

    def _batch(self, headers: dict[str, str], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        """Answer a JSON batch request part by part (only object DELETEs are supported)."""
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + body
        )
        if not message.is_multipart():
            return _error(400, "a batch request must be multipart/mixed")
        boundary = f"batch_{uuid.uuid4().hex}"
        out: list[bytes] = []
        lose = False  # a faulty part was carried out
        all_done = True  # every part was carried out
        for part in message.iter_parts():
            payload = part.get_payload(decode=True) or b""
            request_line = payload.split(b"\r\n", 1)[0].decode()
            method, target, _ = [*request_line.split(" ", 2), "", ""][:3]
            if method == "DELETE" and _is_object_path(urllib.parse.urlsplit(target).path):
                status, _, data = self._recorded_delete(target, {})
                if status == 0:  # carried out, answer to be lost
                    lose, status, data = True, 204, b""
            else:
                status, _, data = _error(
                    400, f"the sandbox proxy batches only object DELETEs: {request_line}"
                )
            reason = http.client.responses.get(status, "")
            content_id = str(part.get("Content-ID", "")).strip("<>")
            out.append(
                f"--{boundary}\r\nContent-Type: application/http\r\n"
                f"Content-ID: <response-{content_id}>\r\n\r\n"
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n".encode()
                + data
                + b"\r\n"
            )
            all_done = all_done and 200 <= status < 300
        if lose and all_done:  # the whole batch was carried out: its answer is lost
            return self._lose_answer()
        out.append(f"--{boundary}--\r\n".encode())
        return 200, [("Content-Type", f"multipart/mixed; boundary={boundary}")], b"".join(out)

    def _delete(
        self, method: str, path: str, headers: dict[str, str], body: bytes, name: str, query: dict[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        with self._lock:
            faults = self._faults
            faulty = faults.take(name)
            if faulty and faults.status:
                faults.injected += 1
                self.fault_injected.set()
                return _error(faults.status, "injected by the sandbox proxy")
        wanted = query.get("ifGenerationMatch")
        if self.enforce_generation_match and wanted is not None:
            meta_path = urllib.parse.urlsplit(path).path
            status, _, data = self._upstream("GET", meta_path, {}, b"")
            if status == 200 and str(json.loads(data).get("generation")) != wanted:
                return _error(412, "At least one of the pre-conditions you specified did not hold.")
        answer = self._upstream(method, path, headers, body)
        if faulty and 200 <= answer[0] < 300:
            return _DROP  # carried out, answer to be lost
        return answer

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> GcsProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _is_listing_path(path: str) -> bool:
    """``/storage/v1/b/{bucket}/o``: an object listing."""
    parts = path.split("/")
    return len(parts) == 6 and parts[1:4] == ["storage", "v1", "b"] and parts[5] == "o"


def _is_object_path(path: str) -> bool:
    """``/storage/v1/b/{bucket}/o/{object}`` (the object name escaped)."""
    parts = path.split("/")
    return len(parts) == 7 and parts[1:4] == ["storage", "v1", "b"] and parts[5] == "o"


def _error(status: int, message: str) -> tuple[int, list[tuple[str, str]], bytes]:
    body = json.dumps(
        {"error": {"code": status, "message": message, "errors": [{"message": message}]}}
    ).encode()
    return status, [("Content-Type", "application/json")], body
