"""An event loop on a daemon thread, owned by a hook, that runs its async methods for sync callers.

The hooks' ``a_*`` methods are their only implementation: a sync method submits the same coroutine
to the hook's private loop and waits (:func:`blocking`), so it also works where the calling thread
already runs an event loop, and what the sync calls open (an HTTP session, an SSH connection, an
API client) is kept on that loop for the next call. After a fork the thread is gone: the next call
starts a new loop, and what the old one held is not used again.

:class:`LoopShared` is the other half: what the hooks on one event loop share (a triggerer runs
hundreds of triggers on one connection: one API client or HTTP session serves them all).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

T = TypeVar("T")
P = ParamSpec("P")
V = TypeVar("V")


class LoopThread:
    """An event loop on a daemon thread; sync callers submit coroutines to it and wait."""

    def __init__(self, name: str) -> None:
        self.name = name
        # reentrant: a kill's signal handler (on_kill) may call run() while the interrupted call holds it
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closers: list[Callable[[], Awaitable[Any]]] = []

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop (started on first use) and return its result."""
        with self._lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                self._loop = asyncio.new_event_loop()
                self._closers = []  # what an earlier loop (before a fork) held is not ours
                self._thread = threading.Thread(target=self._loop.run_forever, name=self.name, daemon=True)
                self._thread.start()
            loop = self._loop
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(f"a sync method was called from its own event loop thread ({self.name})")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def owns(self, loop: asyncio.AbstractEventLoop) -> bool:
        """True if ``loop`` is this thread's (running) loop."""
        return loop is self._loop and self._thread is not None and self._thread.is_alive()

    def at_stop(self, close: Callable[[], Awaitable[Any]]) -> None:
        """Have :meth:`stop` await ``close()`` on the loop first (for what a sync call opened there)."""
        self._closers.append(close)

    def stop(self) -> None:
        """Close what was registered with :meth:`at_stop`, then stop the loop and its thread."""
        with self._lock:
            loop, thread, closers = self._loop, self._thread, self._closers
            self._loop = self._thread = None
            self._closers = []
        if loop is None or thread is None or not thread.is_alive():
            return
        if threading.current_thread() is thread:  # a garbage collection in the loop's own thread
            loop.call_soon(_close_then_stop, loop, closers)
            return
        for close in reversed(closers):
            with contextlib.suppress(Exception):  # best effort: at garbage collection or exit
                asyncio.run_coroutine_threadsafe(_awaited(close), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()


async def _awaited(close: Callable[[], Awaitable[Any]]) -> None:
    await close()


def _close_then_stop(loop: asyncio.AbstractEventLoop, closers: list[Callable[[], Awaitable[Any]]]) -> None:
    """Stop from within the loop: await the closers in a task, then stop (the thread then ends)."""

    async def close_all() -> None:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                await close()
        loop.stop()

    task = loop.create_task(close_all())
    _STOPPING.add(task)  # the loop keeps only a weak reference to its tasks
    task.add_done_callback(_STOPPING.discard)


_STOPPING: set[asyncio.Task[None]] = set()


class HasLoopThread(Protocol):
    runner: LoopThread


H = TypeVar("H", bound=HasLoopThread)


def blocking(method: Callable[Concatenate[H, P], Coroutine[Any, Any, T]]) -> Callable[Concatenate[H, P], T]:
    """The sync method of an async one: runs it on the instance's private loop (``self.runner``)."""

    @functools.wraps(method)
    def run(self: H, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.runner.run(method(self, *args, **kwargs))

    run.__name__ = method.__name__.removeprefix("a_")
    run.__qualname__ = method.__qualname__.replace(method.__name__, run.__name__)
    described = inspect.cleandoc(method.__doc__ or "")
    run.__doc__ = f"Blocks until :meth:`{method.__name__}` is done.\n\n{described}"
    return run


class LoopShared(Generic[V]):
    """One resource per key and event loop, shared by the hooks running on that loop and counted
    by its users; the last user's :meth:`release` closes it (``close``)."""

    def __init__(self, close: Callable[[V], Awaitable[Any]]) -> None:
        self._close = close
        self._shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, list[Any]]] = (
            weakref.WeakKeyDictionary()
        )
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    async def acquire(self, key: Hashable, make: Callable[[], Awaitable[V]]) -> V:
        """The running loop's resource for ``key``, made (``make``) by its first user."""
        loop = asyncio.get_running_loop()
        async with self._locks.setdefault(loop, asyncio.Lock()):
            entries = self._shared.setdefault(loop, {})
            entry = entries.get(key)
            if entry is None:
                entry = entries[key] = [await make(), 0]
            entry[1] += 1
            return entry[0]  # type: ignore[no-any-return]

    async def release(self, key: Hashable, value: V, loop: asyncio.AbstractEventLoop | None = None) -> bool:
        """Give ``value`` back (acquired on ``loop``, default the running one); closed with its last
        user. False when it is not shared there: the caller closes it."""
        entries = self._shared.get(loop or asyncio.get_running_loop()) or {}
        entry = entries.get(key)
        if entry is None or entry[0] is not value:
            return False
        entry[1] -= 1
        if entry[1] == 0:
            del entries[key]
            await self._close(value)
        return True
