"""An HTTP relay in front of slurmrestd that carries requests out and can lose an answer on the way
back, as a network partition or a timed-out proxy does: the cluster acted (the job was submitted),
the client never learned its result.

One request per client connection, forwarded as sent, its answer returned saying
``Connection: close``; ``drop(path_part, count, body_part)`` makes the next ``count`` answers to
POSTs whose path contains ``path_part`` (and whose body contains ``body_part``, when given: e.g. a
job name, so that one client's submission is lost, not whichever comes first) go missing (the
client's connection is closed with no answer). When the upstream cannot be reached, the client's
connection is closed unanswered too, as a proxy's would be.

``hold(path_part, body_part)`` makes the next such POST a slow one: the relay keeps it (``held`` is
set) and carries it out only when the next request of any kind reaches the relay, as a request
still on its way reaches the cluster after its sender went on to something else (a killed try's
search for its job), or with ``until_next=False`` when the test calls ``release()``. Its answer
then goes back as usual.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


def _read_message(conn: socket.socket) -> tuple[list[bytes], bytes] | None:
    """One HTTP message: its head lines and its ``Content-Length`` body; None when the peer left."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return lines, body[:length]


def _closing(lines: list[bytes], body: bytes) -> bytes:
    """The message again, saying ``Connection: close`` (the relay answers one request per
    connection, so the client never reuses it)."""
    kept = [line for line in lines if not line.lower().startswith(b"connection:")]
    return b"\r\n".join([*kept, b"Connection: close"]) + b"\r\n\r\n" + body


class LosingRelay:
    """``with LosingRelay(host, port) as relay``: listens on ``relay.port`` (loopback)."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._drops: dict[tuple[str, bytes], int] = {}
        #: ``(method and path, answered)`` of every request relayed, in order
        self.requests: list[tuple[str, bool]] = []
        self._hold: tuple[str, bytes] | None = None
        self._until_next = True
        #: set when a POST :meth:`hold` matched arrives; ``_release`` once the next request did
        self.held = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def drop(self, path_part: str, count: int = 1, body_part: bytes = b"") -> None:
        with self._lock:
            self._drops[(path_part, body_part)] = count

    def hold(self, path_part: str, body_part: bytes = b"", *, until_next: bool = True) -> None:
        """Hold the next matching POST until the next request (``until_next``) or :meth:`release`."""
        with self._lock:
            self._hold = (path_part, body_part)
            self._until_next = until_next
            self.held.clear()  # a relay holds again after an earlier hold was carried out
            self._release.clear()

    def release(self) -> None:
        """Carry a held request out now."""
        self._release.set()

    def _take_hold(self, request_line: str, body: bytes) -> bool:
        """Whether this request is the one to hold; any other request releases a held one."""
        method, _, rest = request_line.partition(" ")
        with self._lock:
            if self._hold is not None and method == "POST":
                part, in_body = self._hold
                if part in rest and in_body in body:
                    self._hold = None
                    self.held.set()
                    return True
        if self.held.is_set() and self._until_next:
            self._release.set()
        return False

    def _take_drop(self, request_line: str, body: bytes) -> bool:
        method, _, rest = request_line.partition(" ")
        with self._lock:
            for (part, in_body), left in self._drops.items():
                if method == "POST" and part in rest and in_body in body and left > 0:
                    self._drops[(part, in_body)] = left - 1
                    return True
        return False

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        with conn:
            request = _read_message(conn)
            if request is None:
                return
            request_line = request[0][0].decode(errors="replace")
            if self._take_hold(request_line, request[1]):
                self._release.wait(120)
            try:
                with socket.create_connection(self.upstream, timeout=60) as upstream:
                    upstream.sendall(b"\r\n".join(request[0]) + b"\r\n\r\n" + request[1])
                    answer = _read_message(upstream)
            except OSError:  # the upstream is unreachable (e.g. its gate is closed)
                answer = None
            lose = answer is None or self._take_drop(request_line, request[1])
            with self._lock:
                self.requests.append((request_line.rsplit(" ", 1)[0], not lose))
            if answer is not None and not lose:
                with contextlib.suppress(OSError):  # the client left (a killed task's)
                    conn.sendall(_closing(*answer))

    def __enter__(self) -> LosingRelay:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._release.set()
        self._server.close()
