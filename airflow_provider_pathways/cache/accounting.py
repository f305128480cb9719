"""How answers to conditional deletes become the counts of a cleanup report.

The rule, per object (each delete carries ``ifGenerationMatch`` with the generation planned):

- 2xx: *deleted* by this run;
- 412: *changed* since the plan, kept;
- 404: *already gone*, unless an earlier attempt of this run for that object was sent and never
  answered (connection dropped or timed out while waiting): that attempt may have done it, so the
  object counts once, as *deleted*;
- any other status, or no answer on the last attempt: an *error*.

An attempt the server answered with a status worth a retry (``TRANSIENT_HTTP_STATUSES`` of
:mod:`airflow_provider_pathways.transient`) is taken as not carried out. An entry counts as deleted
for the run that deleted its last object (a JAX pair's ``-cache``), so concurrent cleanups of one
location add up to exactly what existed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from airflow_provider_pathways.cache.logs import Logger
from airflow_provider_pathways.cache.plan import SetDigest
from airflow_provider_pathways.cache.report import CleanupReport
from airflow_provider_pathways.cache.selection import CacheEntry, CacheObject

DELETED = "deleted"
CHANGED = "changed"
MISSING = "missing"
ERROR = "error"
MAX_ERROR_SAMPLES = 10


@dataclass(frozen=True)
class Outcome:
    """What became of one object: ``deleted``, ``changed``, ``missing`` or ``error``."""

    status: str
    http_status: int = 0
    detail: str = ""


def delete_outcome(http_status: int | None, *, unanswered_before: bool, detail: str = "") -> Outcome:
    """The outcome of a conditional delete from its final answer (``None``: no answer at all)."""
    if http_status is None:
        return Outcome(ERROR, 0, detail or "no answer")
    if 200 <= http_status < 300:
        return Outcome(DELETED, http_status)
    if http_status == 412:
        return Outcome(CHANGED, http_status)
    if http_status == 404:
        return Outcome(DELETED if unanswered_before else MISSING, http_status)
    return Outcome(ERROR, http_status, detail or f"HTTP {http_status}")


class Tally:
    """Adds entry outcomes to a report from many threads; enforces the error budget; logs progress."""

    def __init__(self, report: CleanupReport, *, max_errors: int, progress_every: int, log: Logger) -> None:
        self.report = report
        self.max_errors = max_errors
        self.progress_every = progress_every
        self.log = log
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._digest = SetDigest()
        self._processed = 0

    def retried(self) -> None:
        """Count one retried request."""
        with self._lock:
            self.report.retries += 1

    def error(self, name: str, detail: str) -> None:
        """Count one failed object (not part of an entry's outcome)."""
        with self._lock:
            self._error_locked(name, detail)

    def restored(self) -> None:
        """Count one ``-atime`` written back to keep a JAX pair whole."""
        with self._lock:
            self.report.restored_atimes += 1

    def entry(
        self, entry: CacheEntry, results: list[tuple[CacheObject, Outcome]], *, kept_whole: bool = False
    ) -> None:
        """Account for one entry: ``results`` for the objects tried (in order); ``kept_whole`` when the
        entry stays as it was (nothing of it counts as deleted)."""
        report = self.report
        with self._lock:
            if kept_whole:
                if any(o.status == CHANGED for _, o in results):
                    report.skipped_changed_entries += 1
                    report.skipped_changed_objects += len(entry.objects)
                for obj, outcome in results:
                    if outcome.status == ERROR:
                        self._error_locked(obj.name, outcome.detail)
            else:
                for obj, outcome in results:
                    if outcome.status == DELETED:
                        report.deleted_objects += 1
                        report.deleted_bytes += obj.size
                        self._digest.add(obj.name, obj.generation)
                    elif outcome.status == MISSING:
                        report.missing_objects += 1
                    elif outcome.status == CHANGED:
                        report.skipped_changed_objects += 1
                    else:
                        self._error_locked(obj.name, outcome.detail)
                last_obj, last = results[-1]
                if last_obj is entry.objects[-1] and last.status == DELETED:
                    report.deleted_entries += 1
                elif any(o.status == CHANGED for _, o in results):
                    report.skipped_changed_entries += 1
            report.deleted_digest = self._digest.hexdigest()
            before = self._processed
            self._processed += len(entry.objects)
            every = self.progress_every
            if self._processed // every > before // every:
                self.log.info(
                    "Progress: %d/%d planned objects processed, %d deleted (%d bytes), %d errors",
                    self._processed,
                    report.plan.planned_objects,
                    report.deleted_objects,
                    report.deleted_bytes,
                    report.errors,
                )

    def _error_locked(self, name: str, detail: str) -> None:
        report = self.report
        report.errors += 1
        if len(report.error_samples) < MAX_ERROR_SAMPLES:
            report.error_samples.append({"object": name, "error": detail})
        if report.errors >= self.max_errors and not self.stop.is_set():
            report.aborted = f"{report.errors} errors (max_errors={self.max_errors})"
            self.stop.set()
