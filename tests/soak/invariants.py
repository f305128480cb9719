"""The soak's invariants, checked after each run against the stand-ins' own records."""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from tests.soak.plan import RunPlan
from tests.soak.records import (
    WORKER_ARRAYS,
    KubeRecords,
    Obj,
    SlurmJobRecord,
    SlurmRecords,
    SlurmRun,
    array_job_id,
)

#: Faults after which a program may run again (a new job, or the same job's next head pod).
RERUN_JUSTIFIED = frozenset({"preempt", "fail_program", "suspend", "evict", "clear"})
#: Slurm: how a run ended that a later run may follow without a fault to justify it (a failed or
#: cancelled program: the retry the operator's failure table allows, docs/operators/slurm_job.rst)
SLURM_FAILED_ENDS = frozenset(
    {"BOOT_FAIL", "CANCELLED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"}
)
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


def slurm_job_name(dag_id: str, run_id: str, tag: str) -> str:
    """The name of every workload job of a DAG run (``soak_slurm.JOB_NAME``)."""
    return f"{dag_id}-{run_id}-{tag}"


def check_slurm_run(
    plan: RunPlan,
    records: SlurmRecords,
    tag: str,
    final: dict[int, dict[str, Any]],
    actions: list[tuple[str, int, float]],
    verdict: Verdict,
) -> None:
    """The four guarantees of :func:`check_gke_run`, against slurmctld's own records: ``final``: map
    index -> the task instance as the run ended; ``actions``: the faults applied (monotonic time)."""
    records.poll()
    to_wall = time.time() - time.monotonic()
    name = slurm_job_name(plan.dag_id, plan.run_id, tag)
    markers = {records.marker(plan.dag_id, "train", plan.run_id, i): i for i in plan.map_indexes}
    for index in plan.map_indexes:
        ti = final.get(index) or {}
        state = str(ti.get("state"))
        label = (f"train[{index}]" if index >= 0 else "train") + f" (try {ti.get('try_number')})"
        mine = [(kind, at + to_wall) for kind, target, at in actions if target in (index, -1)]
        kinds = {kind for kind, _ in mine}
        jobs = records.jobs_of(name, records.marker(plan.dag_id, "train", plan.run_id, index))
        runs = sorted(((job, run) for job in jobs for run in job.runs), key=lambda pair: pair[1].start)

        # 1. no false success: the task succeeded only if a job of its own COMPLETED
        if state == "success" and "mark_success" not in kinds:
            verdict.check(
                any(job.state == "COMPLETED" for job in jobs),
                f"{label} succeeded but no job of its own COMPLETED ({_slurm_jobs(jobs)})",
            )

        # 2. no program run twice unless a fault (or a failed run, or the timeout) justified it
        for (before_job, before), (after_job, after) in itertools.pairwise(runs):
            overlap = before.end is None or before.end > after.start + SLACK
            verdict.check(
                not overlap,
                f"{label}: two programs at once: job {before_job.job_id} ({_run(before)}) still running "
                f"when job {after_job.job_id} started ({_run(after)})",
            )
            if overlap:
                continue
            low, high = before.start - SLACK, after.start + SLACK
            cause = [k for k, t in mine if k in RERUN_JUSTIFIED and low <= t <= high]
            ok = bool(cause) or before.how in SLURM_FAILED_ENDS or plan.variant == "timeout"
            verdict.check(
                ok,
                f"{label}: program ran again (job {after_job.job_id}, {_run(after)}) after job "
                f"{before_job.job_id} {_run(before)} with nothing to justify it",
            )

        # 3. no job left running after its task instance ended (cancel_on_kill=False: by design)
        if not slurm_kept_by_design(plan, state, kinds):
            for job in jobs:
                verdict.check(
                    not job.active,
                    f"{label} ended {state} but its job {job.job_id} is still {job.state}",
                )

        # 4. no job of one task touched by another: its comment names its own task instance only
        for job in jobs:
            verdict.check(
                all(_marker_of(c) == _marker_of(job.comments[0]) for c in job.comments),
                f"{label}: the comment of job {job.job_id} changed owner: {job.comments}",
            )
    for job in records.named(name):
        verdict.check(
            bool(job.comments) and _marker_of(job.comments[0]) in markers,
            f"job {job.job_id} of this run's name has no marker of its task instances: {job.comments}",
        )


def slurm_kept_by_design(plan: RunPlan, state: str, kinds: set[str]) -> bool:
    """A job its task leaves on purpose: ``cancel_on_kill=False`` (the ``keep`` variant) leaves the
    job of a try that was killed (marked, cleared, timed out) or gave up, to end by itself."""
    killed = {"mark_success", "clear", "mark_failed"}
    return plan.variant == "keep" and (state == "failed" or bool(kinds & killed))


def _marker_of(comment: str) -> str:
    return comment.split(" ", 1)[0]


def _run(run: SlurmRun) -> str:
    def stamp(moment: float | None) -> str:
        return time.strftime("%H:%M:%S", time.gmtime(moment)) if moment is not None else "-"

    return f"{stamp(run.start)}..{stamp(run.end)} {run.how or 'running'}"


def _slurm_jobs(jobs: list[SlurmJobRecord]) -> str:
    return ", ".join(f"{j.job_id}:{j.state}:{len(j.runs)} runs" for j in jobs) or "no job"


def pair_service_name(dag_id: str, run_id: str, tag: str) -> str:
    """The name of a two-DAG shape's service job (``soak_slurm.pair_tasks``)."""
    return f"{dag_id}-service-{run_id}-{tag}"


def pair_jobs(
    plan: RunPlan, records: SlurmRecords, tag: str, dag_id: str
) -> tuple[list[SlurmJobRecord], list[SlurmJobRecord]]:
    """The service jobs of one DAG of a two-DAG shape (by name: the sandbox's start_pathways.sh
    sets its own job's comment to ``pathways-workers=<array job id>``, over the provider's marker)
    and the worker array tasks they submitted (``pathways-workers-<service job id>``,
    sandbox/slurm/README.md)."""
    services = records.named(pair_service_name(dag_id, plan.run_id, tag))
    arrays = [a for s in services for a in records.named(f"{WORKER_ARRAYS}{s.job_id}")]
    return services, arrays


def check_slurm_pair(
    plan: RunPlan,
    records: SlurmRecords,
    tag: str,
    tis: dict[str, list[dict[str, Any]]],
    xcoms: dict[str, dict[str, Any]],
    actions: list[tuple[str, int, float]],
    verdict: Verdict,
) -> None:
    """Two DAGs whose services share one Slurm user, run together. ``tis``: each DAG's task
    instances as its run ended; ``xcoms``: what each DAG's service reported (``job_id``,
    ``worker_array_job_id``) and its teardown returned (``stop``: cancelled and already ended ids).

    No service task cancels or reports the other's service job or worker array (docs/sensors/
    cluster_env.rst, Whose file, which worker array); no service job or worker array task is left
    running once both runs ended; each workload as :func:`check_slurm_run`."""
    records.poll()
    own: dict[str, tuple[list[SlurmJobRecord], list[SlurmJobRecord]]] = {
        dag: pair_jobs(plan, records, tag, dag) for dag in plan.pair
    }
    for dag in plan.pair:
        services, arrays = own[dag]
        service_ids = {s.job_id for s in services}
        array_ids = {array_job_id(a.job_id) for a in arrays}
        reported = xcoms.get(dag) or {}

        # what the service task reported is its own service job and worker array
        job_id = reported.get("job_id")
        if job_id not in (None, "", "None"):
            verdict.check(
                str(job_id) in service_ids,
                f"{dag}.service reported job {job_id}, not a service job of its own ({sorted(service_ids)})",
            )
        array = reported.get("worker_array_job_id")
        if array not in (None, "", "None"):
            verdict.check(
                str(array) in array_ids,
                f"{dag}.service reported worker array {array}, not one of its own service's "
                f"({sorted(array_ids)})",
            )
        # what its teardown cancelled (or found ended) is its own service job and worker arrays
        stop = reported.get("stop") or {}
        touched = [str(j) for j in (stop.get("cancelled") or []) + (stop.get("already_ended") or [])]
        verdict.check(
            all(j in service_ids | array_ids for j in touched),
            f"{dag}.stop cancelled or reported jobs not of its own service: {touched} "
            f"(its service jobs {sorted(service_ids)}, arrays {sorted(array_ids)})",
        )
        # a worker array task is cancelled with its service, never while its service still runs
        # (start_pathways.sh cancels it when it exits; the provider cancels the service job and then
        # the arrays it can tell as its own)
        by_id = {s.job_id: s for s in services}
        for task in arrays:
            if task.state != "CANCELLED":
                continue
            service = by_id.get(task.name.removeprefix(WORKER_ARRAYS))
            service_end = service.end if service is not None else None
            verdict.check(
                service_end is not None and task.end is not None and task.end >= service_end - SLACK,
                f"worker array task {task.job_id} of {dag}'s service was cancelled "
                f"({_stamp(task.end)}) while its service job {task.name.removeprefix(WORKER_ARRAYS)} "
                f"ran (it ended {_stamp(service_end)}, {service.state if service else '?'})",
            )
        # nothing of either service left running once both runs ended, unless no teardown ran after
        # the service's last try succeeded: a clear of the service alone through the REST API
        # (``dag.clear`` with its task id, airflow-core ``post_clear_task_instances``) clears no
        # teardown, and a service that succeeded runs until its teardown, by design
        if not teardown_pending(tis.get(dag, [])):
            for job in services + arrays:
                verdict.check(not job.active, f"{dag}: job {job.job_id} ({job.name}) is still {job.state}")

        # the workload of each DAG, as a run of its own
        side = dataclasses.replace(plan, dag_id=dag, pair=[], variant="plain", mapped=False)
        suffix = f"@{dag}.train"
        mine = [(k.removesuffix(suffix), i, t) for k, i, t in actions if k.endswith(suffix)]
        final = {int(ti["map_index"]): ti for ti in tis.get(dag, []) if ti["task_id"] == "train"}
        check_slurm_run(side, records, tag, final, mine, verdict)


def teardown_pending(tis: list[dict[str, Any]]) -> bool:
    """Whether the two-DAG shape's service task succeeded and its teardown (``stop``) did not run
    after it (it never ran again after a clear of the service alone). A teardown that ran after it,
    and failed, is no excuse."""
    by_task = {ti["task_id"]: ti for ti in tis}
    service, stop = by_task.get("service") or {}, by_task.get("stop") or {}
    if service.get("state") != "success":
        return False
    if stop.get("state") in (None, "none", "skipped", "upstream_failed", "removed"):
        return True
    return str(stop.get("end_date") or "") < str(service.get("end_date") or "")


def _stamp(moment: float | None) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(moment)) if moment is not None else "-"
