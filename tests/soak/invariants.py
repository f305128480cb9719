"""The soak's invariants, checked after each run against the stand-ins' own records."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from tests.soak.plan import RunPlan
from tests.soak.records import KubeRecords, Obj

#: Faults after which a program may run again (a new job, or the same job's next head pod).
RERUN_JUSTIFIED = frozenset({"preempt", "fail_program", "suspend", "evict", "clear"})
#: seconds of slack between two records' moments (separate watches deliver them apart)
SLACK = 2.0


@dataclass
class Verdict:
    checks: int = 0
    violations: list[str] = field(default_factory=list)

    def check(self, ok: bool, message: str) -> None:
        self.checks += 1
        if not ok:
            self.violations.append(message)


def check_gke_run(
    plan: RunPlan,
    records: KubeRecords,
    final: dict[int, dict[str, Any]],
    actions: list[tuple[str, int, float]],
    verdict: Verdict,
) -> None:
    """``final``: map index -> the task instance as the run ended; ``actions``: the faults applied."""
    for index in plan.map_indexes:
        ti = final.get(index) or {}
        state = str(ti.get("state"))
        label = (f"train[{index}]" if index >= 0 else "train") + f" (try {ti.get('try_number')})"
        mine = [a for a in actions if a[1] in (index, -1)]
        jobs = records.jobs_of(plan.dag_id, plan.run_id, None if index < 0 else index)
        heads = sorted((h for job in jobs for h in records.heads_of(job)), key=lambda h: h.created)

        # 1. no false success: the task succeeded only if a job of its own did
        if state == "success" and not any(kind == "mark_success" for kind, _, _ in mine):
            if plan.wait == "finished":
                good = [h for h in heads if h.phase == "Succeeded" or h.exit_code() == 0]
                verdict.check(
                    bool(good), f"{label} succeeded but no program of its jobs succeeded ({_heads(heads)})"
                )
            elif plan.wait == "ready":
                verdict.check(
                    any(h.running is not None for h in heads),
                    f"{label} succeeded (wait_until=ready) but no head of its jobs ever ran "
                    f"({_heads(heads)})",
                )
            else:
                verdict.check(
                    bool(jobs), f"{label} succeeded (wait_until=created) but no job of its own exists"
                )

        # 2. no program run twice unless a preemption (or another cause that ends it) justified it
        for before, after in itertools.pairwise(heads):
            overlap = before.ended is None or before.ended > after.created + SLACK
            verdict.check(
                not overlap,
                f"{label}: two programs at once: {before.name} still running when {after.name} started",
            )
            if overlap:
                continue
            failed = before.phase == "Failed"
            succeeded = before.phase == "Succeeded"
            cause = [
                k
                for k, _, t in mine
                if k in RERUN_JUSTIFIED and before.created - SLACK <= t <= after.created + SLACK
            ]
            timed_out = plan.variant == "timeout"
            ok = bool(cause) or (failed and not succeeded) or timed_out
            verdict.check(
                ok,
                f"{label}: program ran again ({after.name}) after {before.name} "
                f"{'succeeded' if succeeded else 'was ended as ' + (before.phase or 'deleted')} "
                "with nothing to justify it",
            )

        # 3. no job left running after its task instance ended (wait_until created/ready: by design)
        kept = kept_by_design(plan, state)
        for job in jobs:
            if kept:
                continue
            verdict.check(
                not records.active(job),
                f"{label} ended {state} but its job {job.name} (uid {job.uid[:8]}) is still active",
            )

        # 4. no job of one task touched by another: owner labels never changed; none mislabelled
        for job in jobs:
            verdict.check(
                len(job.owner_labels) == 1,
                f"{label}: the owner labels of {job.name} changed: {job.owner_labels}",
            )


def kept_by_design(plan: RunPlan, state: str) -> bool:
    """A job its task leaves on purpose: ``wait_until`` created/ready once it succeeded; a failed
    job kept for debugging (``delete_on`` without ``failure``)."""
    return (plan.wait in ("created", "ready") and state == "success") or (
        plan.variant == "keep" and state == "failed"
    )


def _heads(heads: list[Obj]) -> str:
    return ", ".join(f"{h.name}:{h.phase or '?'}:{h.exit_code()}" for h in heads) or "no head pod"
