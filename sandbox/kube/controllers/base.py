"""Work-queue controller base: deduplicated keys, delayed requeues, synchronous reconcile."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Hashable

from sandbox.kube.store import Store

log = logging.getLogger(__name__)


class Controller:
    """Runs ``reconcile(key)`` for queued keys, one at a time, on the event loop.

    Keys are deduplicated while waiting. ``reconcile`` is synchronous and acts only through the
    store, so each reconcile is atomic with respect to API requests.
    """

    name = "controller"

    def __init__(self, store: Store):
        self.store = store
        self._queue: asyncio.Queue[Hashable] | None = None
        self._pending: set[Hashable] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self._task: asyncio.Task[None] | None = None

    # -- queueing ---------------------------------------------------------------------------------
    def enqueue(self, key: Hashable) -> None:
        """Reconcile ``key`` soon (no-op while it is already waiting)."""
        if self._queue is None or key in self._pending:
            return
        self._pending.add(key)
        self._queue.put_nowait(key)

    def enqueue_after(self, delay: float, key: Hashable) -> None:
        """Reconcile ``key`` after ``delay`` seconds."""
        if self._queue is None:
            return
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            self.enqueue(key)

        handle = loop.call_later(max(0.0, delay), fire)
        self._timers.add(handle)

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"sandbox-{self.name}")

    async def stop(self) -> None:
        self.cancel_timers()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def cancel_timers(self) -> None:
        for handle in list(self._timers):
            handle.cancel()
        self._timers.clear()

    def reset(self) -> None:
        """Forget queued work and timers (used by ``/sandbox/reset``)."""
        self.cancel_timers()
        if self._queue is not None:
            while not self._queue.empty():
                self._queue.get_nowait()
        self._pending.clear()

    async def _run(self) -> None:
        assert self._queue is not None
        while True:
            key = await self._queue.get()
            self._pending.discard(key)
            try:
                self.reconcile(key)
            except Exception:
                log.exception("%s: reconcile of %r failed; retrying", self.name, key)
                self.enqueue_after(0.2, key)
            # Let API requests interleave with bursts of reconciles.
            await asyncio.sleep(0)

    def reconcile(self, key: Hashable) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
