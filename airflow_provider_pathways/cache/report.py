"""What a cleanup did: the report pushed to XCom and the summary table for task logs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from airflow_provider_pathways.cache.plan import PlanSummary
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
