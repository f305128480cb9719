"""One concurrent delete pass over planned entries: bounded queue, worker threads, JAX pair protocol.

The caller's thread walks the entries (which may drive the listing) and hands them out in groups
of ``batch_size``; worker threads delete each group, in one JSON batch request per step when
``batch_size`` > 1 and the server takes batches (then ``workers // 4`` requests at once, at least
one), else one request per object (``workers`` requests at once). Memory holds at most the
queued and in-flight groups, whatever the number of entries.

Per group: every entry's first object goes (a JAX pair's ``-atime``); then the ``-cache`` of each
pair whose ``-atime`` went or was already gone; if a ``-cache`` then refuses to go (changed or
failed), its ``-atime`` is written back, so a pair is never left split.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from airflow_provider_pathways.cache.location import GcsLocation
from airflow_provider_pathways.cache.report import (
    CHANGED,
    DELETED,
    ERROR,
    MISSING,
    Logger,
    Outcome,
    Tally,
    delete_outcome,
)
from airflow_provider_pathways.cache.selection import CacheEntry, CacheObject
from airflow_provider_pathways.cache.storage import BatchUnsupported, DeleteResult, StorageApi


class DeleteRun:
    """Delete ``entries`` under ``location`` through ``api``; counts go to ``tally``."""

    def __init__(
        self,
        api: StorageApi,
        location: GcsLocation,
        entries: Iterator[CacheEntry],
        tally: Tally,
        *,
        workers: int,
        batch_size: int,
        cancelled: Callable[[], bool],
        log: Logger,
    ) -> None:
        self.api = api
        self.location = location
        self.entries = entries
        self.tally = tally
        self.workers = workers
        self.batch_size = batch_size
        self.cancelled = cancelled
        self.log = log
        self._batches = batch_size > 1
        self._queue: queue.Queue[list[CacheEntry] | None] = queue.Queue(
            maxsize=max(2, (4 * workers) // batch_size)
        )
        # Requests in flight: ``workers``, or a quarter as many batch requests (each up to 100 deletes).
        self._slots = threading.Semaphore(max(1, workers // 4) if self._batches else workers)
        self._fallback = threading.Lock()

    def _stopping(self) -> bool:
        return self.tally.stop.is_set() or self.cancelled()

    def execute(self) -> None:
        """Feed every entry to the workers and wait for them; sets the report's duration and digest."""
        report = self.tally.report
        started = time.monotonic()
        threads = [
            threading.Thread(target=self._worker, name=f"cache-cleanup-{i}", daemon=True)
            for i in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        try:
            group: list[CacheEntry] = []
            for entry in self.entries:
                if self._stopping():
                    break
                outside = [o.name for o in entry.objects if not o.name.startswith(self.location.prefix)]
                if outside:  # never outside the location, whatever the plan says
                    self.tally.error(outside[0], f"refusing to delete: outside {self.location.url}")
                    continue
                group.append(entry)
                if len(group) >= self.batch_size:
                    self._put(group)
                    group = []
            if group and not self._stopping():
                self._put(group)
        finally:
            for _ in threads:
                self._put(None, force=True)
            for thread in threads:
                thread.join()
            self.api.close()
        if self.cancelled() and not report.aborted:
            report.aborted = "cancelled"
        report.duration_seconds = round(time.monotonic() - started, 3)
        self.log.info(
            "Deleted %d objects (%d bytes) in %.1fs; kept %d changed since planning; %d already gone; "
            "%d errors",
            report.deleted_objects,
            report.deleted_bytes,
            report.duration_seconds,
            report.skipped_changed_objects,
            report.missing_objects,
            report.errors,
        )

    def _put(self, item: list[CacheEntry] | None, force: bool = False) -> None:
        while True:
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                if not force and self._stopping():
                    return

    def _worker(self) -> None:
        while True:
            with self._slots:
                group = self._queue.get()
                if group is None:
                    return
                if self._stopping():
                    continue
                try:
                    self._delete_group(group)
                except Exception as err:  # a bug must not hang the feeder: count it and go on
                    for entry in group:
                        self.tally.error(entry.objects[0].name, f"{type(err).__name__}: {err}"[:200])

    def _delete_many(self, objects: Sequence[CacheObject]) -> list[Outcome]:
        results: list[DeleteResult] | None = None
        if self._batches and len(objects) > 1:
            try:
                results = self.api.delete_batch(self.location.bucket, objects)
            except BatchUnsupported as err:
                with self._fallback:
                    if self._batches:
                        self._batches = False
                        self._slots.release(self.workers)  # one request per object: all workers at once
                        self.log.info("The server takes no batch requests (%s): deleting one by one", err)
        if results is None:
            results = [self.api.delete(self.location.bucket, obj) for obj in objects]
        return [
            delete_outcome(r.status, unanswered_before=r.unanswered_before, detail=r.detail) for r in results
        ]

    def _delete_group(self, group: list[CacheEntry]) -> None:
        firsts = self._delete_many([entry.objects[0] for entry in group])
        pairs = [
            i for i, entry in enumerate(group) if entry.is_jax_pair and firsts[i].status in (DELETED, MISSING)
        ]
        seconds = dict(zip(pairs, self._delete_many([group[i].objects[1] for i in pairs]), strict=True))
        for i, entry in enumerate(group):
            first, outcome = entry.objects[0], firsts[i]
            if not entry.is_jax_pair:
                self.tally.entry(entry, [(first, outcome)])
            elif outcome.status in (CHANGED, ERROR):
                self.tally.entry(entry, [(first, outcome)], kept_whole=True)
            else:
                self._finish_pair(entry, outcome, seconds[i])

    def _finish_pair(self, entry: CacheEntry, first_outcome: Outcome, second_outcome: Outcome) -> None:
        atime, cache = entry.objects
        if second_outcome.status in (CHANGED, ERROR) and first_outcome.status == DELETED:
            stamp = time.time_ns().to_bytes(8, "little")
            if self.api.create_if_absent(self.location.bucket, atime.name, stamp):
                self.tally.restored()
                self.tally.entry(entry, [(cache, second_outcome)], kept_whole=True)
                return
            self.tally.error(atime.name, "JAX pair split: -atime deleted, -cache kept")
        self.tally.entry(entry, [(atime, first_outcome), (cache, second_outcome)])
