"""Listing a location for a cleanup: split by folder when it is long, several listings at once.

Each listing (the location, or each cache prefix) starts as one listing of every object under its
prefix. If its first answer says more pages follow, the rest is split by folder, so that folders
further on are listed at the same time, ``workers`` listings at once:

- one listing with the delimiter ``/`` (folder names only), from where the listing has got to,
  names the folders further on; the first of them becomes the *split point*;
- the first listing stops at the split point; every folder from the split point on is listed on
  its own (and split in turn when long); the objects directly under the prefix from the split
  point on are listed by a delimiter listing starting there.

So every object is listed exactly once (protected folders too: the plan counts everything the
location holds), a listing of one answer costs no extra request, and a long listing with no
folder further on costs one. Objects are grouped into cache entries per listing, in that
listing's name order: a JAX pair is always inside one folder and a split point is a folder name,
so both halves are seen by one listing (unless a folder's name sorts between the two names: then
each half is kept, as unpaired). Entries of different listings arrive interleaved; each listing
hands on what it has found before it waits for its next answer. Memory holds, per listing, one
chunk of objects and one of entries, plus a few chunks queued for the consumer, whatever the
number of objects.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from airflow_provider_pathways.cache.selection import (
    CacheEntry,
    CacheObject,
    CacheSelector,
    ListingStats,
    group_entries,
)
from airflow_provider_pathways.cache.storage import CHUNK_OBJECTS, StorageApi

FOLDER_DELIMITER = "/"
# Folder names asked per answer when splitting (what GCS answers at most).
FOLDER_PAGE_SIZE = 1000
WHOLE = "whole"  # every object under the prefix; split by folder if long
FOLDERS = "folders"  # name the folders from where a split listing has got to
DIRECT = "direct"  # objects directly under the prefix, from the split point on


class _Split:
    """Where a long listing has got to and where it stops, shared with the listings split from it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.covered: str | None = None  # the last name the listing handed on
        self.end: str | None = None  # the split point: the listing stops before it
        self.finished = False  # the listing reached its end without a split
        self.asked = False  # the folders were asked for

    def keep(self, objects: list[CacheObject]) -> tuple[list[CacheObject], bool]:
        """The objects before the split point, and whether the listing has reached it."""
        with self.lock:
            end = self.end
            if end is not None and objects and objects[-1].name >= end:
                cut = next(i for i, obj in enumerate(objects) if obj.name >= end)
                objects = objects[:cut]
                reached = True
            else:
                reached = False
            if objects:
                self.covered = objects[-1].name
            return objects, reached


class _Stopped(Exception):
    """The consumer went away: stop listing."""


@dataclass(frozen=True)
class _Task:
    kind: str
    prefix: str
    split: _Split = field(default_factory=_Split, compare=False)


class _Work:
    """Listings still to run or running; the end is reached when none is left."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._todo: collections.deque[_Task] = collections.deque()
        self._open = 0
        self._closed = False

    def add(self, task: _Task) -> None:
        with self._cond:
            self._open += 1
            self._todo.append(task)
            self._cond.notify()

    def take(self) -> _Task | None:
        """The next listing to run, or None once every listing has ended (or the work is closed)."""
        with self._cond:
            while not self._todo and self._open and not self._closed:
                self._cond.wait()
            if self._closed or not self._todo:
                return None
            return self._todo.popleft()

    def done(self) -> bool:
        """One listing ended; True if it was the last."""
        with self._cond:
            self._open -= 1
            if self._open == 0:
                self._cond.notify_all()
                return True
            return False

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class _Outbox:
    """Chunks of entries for the consumer: bounded; closed by the end, an error or the consumer."""

    def __init__(self, capacity: int) -> None:
        self._cond = threading.Condition()
        self._items: collections.deque[list[CacheEntry]] = collections.deque()
        self._capacity = capacity
        self._ended = False
        self._error: BaseException | None = None
        self._gone = False

    def put(self, chunk: list[CacheEntry]) -> None:
        with self._cond:
            while len(self._items) >= self._capacity and not self._gone and self._error is None:
                self._cond.wait()
            if self._gone or self._error is not None:
                raise _Stopped
            self._items.append(chunk)
            self._cond.notify_all()

    def get(self) -> list[CacheEntry] | None:
        """The next chunk; None at the end; raises a listing's error."""
        with self._cond:
            while not self._items and not self._ended and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise self._error
            if self._items:
                chunk = self._items.popleft()
                self._cond.notify_all()
                return chunk
            return None

    def end(self) -> None:
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()

    def leave(self) -> None:
        """The consumer stops reading."""
        with self._cond:
            self._gone = True
            self._items.clear()
            self._cond.notify_all()


class LocationListing:
    """Lists what a :class:`CacheSelector` needs, ``workers`` listings at once; :meth:`entries` yields
    the cache entries found. :attr:`stats` counts everything listed (complete once the entries are).

    :param page_size: ``maxResults`` to ask per page (None: the server's own; 1000 on GCS).
    """

    def __init__(
        self,
        api: StorageApi,
        selector: CacheSelector,
        *,
        page_size: int | None,
        workers: int,
        chunk_size: int = CHUNK_OBJECTS,
    ) -> None:
        self.api = api
        self.selector = selector
        self.page_size = page_size
        self.workers = max(1, workers)
        self.chunk_size = chunk_size
        self.stats = ListingStats()
        self._stats_lock = threading.Lock()

    def first_listings(self) -> list[_Task]:
        """The explicit cache prefixes, else the location: each listed whole (split when long)."""
        return [_Task(WHOLE, prefix) for prefix in self.selector.listing_prefixes()]

    def entries(self) -> Iterator[CacheEntry]:
        work = _Work()
        outbox = _Outbox(capacity=2)
        for task in self.first_listings():
            work.add(task)
        threads = [
            threading.Thread(target=self._worker, args=(work, outbox), name=f"cache-listing-{i}", daemon=True)
            for i in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        try:
            while True:
                chunk = outbox.get()
                if chunk is None:
                    return
                yield from chunk
        finally:
            work.close()
            outbox.leave()

    def _worker(self, work: _Work, outbox: _Outbox) -> None:
        while True:
            task = work.take()
            if task is None:
                return
            try:
                if task.kind == FOLDERS:
                    self._find_folders(task, work)
                else:
                    self._list(task, work, outbox)
            except _Stopped:
                work.close()
                return
            except BaseException as err:  # handed to the consumer
                outbox.fail(err)
                work.close()
                return
            if work.done():
                outbox.end()

    def _find_folders(self, task: _Task, work: _Work) -> None:
        """Name the folders after where the split listing has got to; the first is the split point.
        Stops after an answer without folders further on (the listing is then not split)."""
        split = task.split
        with split.lock:
            if split.finished:  # the listing ended meanwhile (e.g. a single worker ran it)
                return
            start = split.covered or ""
        chunks = self.api.list_chunks(
            self.selector.location.bucket,
            task.prefix,
            FOLDER_PAGE_SIZE,
            delimiter=FOLDER_DELIMITER,
            start_offset=start,
            folders_only=True,
        )
        for chunk in chunks:
            with split.lock:
                if split.end is None:
                    if split.finished:
                        return
                    later = [f for f in chunk.prefixes if split.covered is None or f > split.covered]
                    if not later:
                        return
                    split.end = min(later)
                    work.add(_Task(DIRECT, task.prefix, split))
                end = split.end
            for folder in sorted(chunk.prefixes):
                if folder >= end:
                    work.add(_Task(WHOLE, folder))
            if not chunk.prefixes:
                return

    def _list(self, task: _Task, work: _Work, outbox: _Outbox) -> None:
        stats = ListingStats()
        found: list[CacheEntry] = []
        split = task.split

        def hand_on() -> None:
            nonlocal found
            if found:
                outbox.put(found)
                found = []

        def ask_for_folders() -> None:
            with split.lock:
                if split.asked:
                    return
                split.asked = True
            work.add(_Task(FOLDERS, task.prefix, split))

        def objects() -> Iterator[CacheObject]:
            direct = task.kind == DIRECT
            chunks = self.api.list_chunks(
                self.selector.location.bucket,
                task.prefix,
                self.page_size,
                delimiter=FOLDER_DELIMITER if direct else "",
                start_offset=(split.end or "") if direct else "",
                chunk_size=self.chunk_size,
                on_next_page=None if direct else ask_for_folders,
            )
            for chunk in chunks:
                if direct:
                    kept, reached = chunk.objects, False
                else:
                    kept, reached = split.keep(chunk.objects)
                yield from kept
                hand_on()  # what this chunk held goes on before the next one is awaited
                if reached:
                    return
            if not direct:
                with split.lock:
                    split.finished = True

        try:
            for entry in group_entries(objects(), self.selector, stats):
                found.append(entry)
                if len(found) >= self.chunk_size:
                    hand_on()
            hand_on()
        finally:
            with self._stats_lock:
                self.stats.add(stats)
