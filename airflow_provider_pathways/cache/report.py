"""What a cleanup did: the report pushed to XCom, the summary table for task logs, and how answers to
conditional deletes become the report's counts.

The counting rule, per object (each delete carries ``ifGenerationMatch`` with the generation planned):

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
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from airflow_provider_pathways.cache.plan import PlanSummary, SetDigest
from airflow_provider_pathways.cache.selection import CacheEntry, CacheObject
from airflow_provider_pathways.cache.values import format_bytes


@dataclass
class CleanupReport:
    """What a cleanup did (or, for a dry run, would do).

    Counts are exact for what this run did: ``deleted_*`` only what this run's requests removed
    (a JAX pair counts as a deleted entry for the run that deleted its ``-cache`` object),
    ``missing_objects`` what was already gone when this run asked, so concurrent cleanups of the
    same location add up to what existed.
    """

    plan: PlanSummary
    dry_run: bool
    deleted_entries: int = 0
    deleted_objects: int = 0
    deleted_bytes: int = 0
    skipped_changed_entries: int = 0
    skipped_changed_objects: int = 0
    missing_objects: int = 0
    restored_atimes: int = 0
    errors: int = 0
    error_samples: list[dict[str, Any]] = field(default_factory=list)
    retries: int = 0
    aborted: str | None = None
    duration_seconds: float = 0.0
    deleted_digest: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-serialisable dict (what the operator pushes to XCom)."""
        data = dict(vars(self.plan))
        data["kept_cache_bytes"] = self.plan.kept_cache_bytes
        data.update({k: v for k, v in vars(self).items() if k != "plan"})
        return data

    def summary_table(self) -> str:
        """A short table for task logs: entries (what is deleted together), objects and bytes."""
        plan = self.plan
        title = f"Compilation cache cleanup of {plan.location}" + (
            " (DRY RUN: nothing deleted)" if self.dry_run else ""
        )
        rows: list[tuple[str, str, str, str]] = [
            ("listed under location", "", f"{plan.listed_objects}", format_bytes(plan.listed_bytes)),
            ("cache", f"{plan.cache_entries}", f"{plan.cache_objects}", format_bytes(plan.cache_bytes)),
            (
                "planned to delete",
                f"{plan.planned_entries}",
                f"{plan.planned_objects}",
                format_bytes(plan.planned_bytes),
            ),
        ]
        if not self.dry_run:
            rows += [
                (
                    "deleted",
                    f"{self.deleted_entries}",
                    f"{self.deleted_objects}",
                    format_bytes(self.deleted_bytes),
                ),
                (
                    "kept: changed since plan",
                    f"{self.skipped_changed_entries}",
                    f"{self.skipped_changed_objects}",
                    "",
                ),
                ("already gone", "", f"{self.missing_objects}", ""),
                ("errors", "", f"{self.errors}", ""),
            ]
        kept = plan.cache_bytes - (plan.planned_bytes if self.dry_run else self.deleted_bytes)
        rows.append(("cache left", "", "", format_bytes(kept)))
        header = ("", "entries", "objects", "bytes")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
        line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

        def fmt(row: tuple[str, str, str, str]) -> str:
            cells = [row[0].ljust(widths[0])] + [row[i].rjust(widths[i]) for i in range(1, 4)]
            return "| " + " | ".join(cells) + " |"

        out = [title, line, fmt(header), line, *(fmt(r) for r in rows), line]
        criteria = []
        if plan.older_than_seconds is not None:
            criteria.append(f"older than {timedelta(seconds=plan.older_than_seconds)} (before {plan.cutoff})")
        if plan.max_cache_bytes is not None:
            criteria.append(f"budget {format_bytes(plan.max_cache_bytes)}")
        out.append("criteria: " + ", ".join(criteria))
        if plan.unpaired_jax_objects:
            out.append(
                f"kept {plan.unpaired_jax_objects} JAX cache objects whose -cache/-atime partner is missing"
            )
        if plan.over_budget_bytes:
            out.append(
                f"still {format_bytes(plan.over_budget_bytes)} over budget: the rest is newer than min_age "
                f"({timedelta(seconds=plan.min_age_seconds)})"
            )
        if self.retries:
            out.append(f"retried requests: {self.retries}")
        if self.aborted:
            out.append(f"stopped early: {self.aborted}")
        return "\n".join(out)


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


class Logger(Protocol):
    """Anything with ``info(message, *args)``."""

    def info(self, msg: str, /, *args: Any) -> Any: ...
