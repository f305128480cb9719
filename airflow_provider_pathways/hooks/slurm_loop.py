"""The Slurm hook's private event loop for sync callers, and the REST transports shared per event loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from airflow_provider_pathways.slurm.transport import SlurmTransport

T = TypeVar("T")


class LoopThread:
    """An event loop on a daemon thread; sync callers submit coroutines to it and wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="slurm-hook-loop", daemon=True
                )
                self._thread.start()
            loop = self._loop
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("SlurmHook sync method called from its own event loop thread")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def owns(self, loop: asyncio.AbstractEventLoop) -> bool:
        """True if ``loop`` is this runner's (running) loop."""
        return loop is self._loop and self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            if not thread.is_alive():
                loop.close()


def shutdown_loop(runner: LoopThread, holder: dict[str, Any]) -> None:
    transport = holder.pop("transport", None)
    if transport is not None:
        with contextlib.suppress(Exception):  # best effort at garbage collection / exit
            runner.run(transport.close())
    runner.stop()


class TransportPool:
    """The REST transports of one event loop, one per connection id, counted by the hooks using
    them (a triggerer runs hundreds of Slurm triggers on one connection)."""

    def __init__(self) -> None:
        self.transports: dict[str, list[Any]] = {}

    def acquire(self, conn_id: str, make: Callable[[], SlurmTransport]) -> SlurmTransport:
        entry = self.transports.get(conn_id)
        if entry is None:
            entry = self.transports[conn_id] = [make(), 0]
        entry[1] += 1
        return entry[0]

    def release(self, conn_id: str, transport: SlurmTransport) -> bool:
        """Give a shared transport back; True if it was shared and others still use it."""
        entry = self.transports.get(conn_id)
        if entry is None or entry[0] is not transport:
            return False
        entry[1] -= 1
        if entry[1] > 0:
            return True
        del self.transports[conn_id]
        return False


REST_TRANSPORTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TransportPool] = (
    weakref.WeakKeyDictionary()
)
