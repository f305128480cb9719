"""A TCP gate in front of a service: clients connect to the gate, which relays to the service.

``down()`` makes the service unreachable for everyone who goes through the gate, as a crashed or
restarting server is: the listening socket closes (new connections are refused) and every open
connection is reset. ``up()`` listens again on the same port. The service itself keeps running and
keeps its state (a Kubernetes API server's objects, Slurm's jobs), and clients that do not use the
gate are not affected, so one scenario's outage leaves the others alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from concurrent.futures import Future
from typing import Any


class Gate:
    """Relay ``127.0.0.1:<port>`` to ``target_host:target_port`` until ``down()``; ``up()`` again."""

    def __init__(self, target_host: str, target_port: int, name: str = "gate") -> None:
        self.target = (target_host, target_port)
        self.name = name
        self.port = _free_port()
        self.outages = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._transports: set[asyncio.BaseTransport] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"gate-{name}", daemon=True)
        self._thread.start()
        self.up()

    @property
    def is_up(self) -> bool:
        return self._server is not None

    def _call(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(30)

    def up(self) -> None:
        """Listen on the gate's port again (no-op if it listens)."""
        self._call(self._open())

    def down(self) -> None:
        """Refuse new connections and reset the open ones."""
        self._call(self._close())
        self.outages += 1

    def close(self) -> None:
        """Stop the gate for good."""
        with contextlib.suppress(Exception):
            self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _open(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(
            self._relay, "127.0.0.1", self.port, reuse_address=True, backlog=512
        )

    async def _close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for transport in list(self._transports):
            with contextlib.suppress(Exception):
                transport.abort()  # type: ignore[attr-defined]
        self._transports.clear()
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if self._server is None:
            client_writer.transport.abort()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.transport.abort()
            return
        pair = {client_writer.transport, upstream_writer.transport}
        self._transports |= pair
        try:
            await asyncio.gather(_pipe(client_reader, upstream_writer), _pipe(upstream_reader, client_writer))
        finally:
            self._transports -= pair
            for writer in (client_writer, upstream_writer):
                with contextlib.suppress(Exception):
                    writer.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, asyncio.IncompleteReadError, RuntimeError):
        writer.transport.abort()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
