"""Turn a PathwaysJob, its JobSet, Jobs, pods and Kueue workloads into one status summary.

This module is the single place where Kubernetes state becomes an operator outcome. It works
on plain dicts (the JSON the API server returns), so it has no client-library dependency.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from airflow_provider_pathways.failures import FailureClass

HEAD_REPLICATED_JOB = "pathways-head"
WORKER_REPLICATED_JOB = "worker"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"

# Pod status reasons that mean the node or the scheduler took the pod away.
_DISRUPTION_POD_REASONS = frozenset(
    {"Preempting", "Evicted", "NodeLost", "Terminated", "Shutdown", "NodeShutdown"}
)


class Phase(str, Enum):
    """Where a Pathways job stands."""

    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    SUSPENDED = "suspended"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DELETED = "deleted"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.DELETED)


@dataclass(frozen=True)
class PathwaysJobStatus:
    """What a user needs to know about a Pathways job at one moment."""

    name: str
    namespace: str
    phase: Phase
    slices_ready: int = 0
    slices_total: int = 0
    head_ready: bool = False
    restarts: int = 0
    failure: FailureClass | None = None
    message: str = ""
    exit_code: int | None = None
    conditions: tuple[str, ...] = field(default=())

    @property
    def terminal(self) -> bool:
        return self.phase.terminal

    def ready_for(self, min_slices: int) -> bool:
        """True when the head is ready and at least ``min_slices`` worker slices are ready."""
        return (
            not self.terminal
            and self.phase is not Phase.SUSPENDED
            and self.head_ready
            and self.slices_ready >= min_slices
        )

    def progress(self, min_slices: int | None = None) -> str:
        """One log line, e.g. ``slices ready 2/4, need 3; head ready; restarts 0; phase starting``."""
        need = f", need {min_slices}" if min_slices is not None else ""
        head = "head ready" if self.head_ready else "head not ready"
        line = (
            f"{self.namespace}/{self.name}: slices ready {self.slices_ready}/{self.slices_total}{need}; "
            f"{head}; restarts {self.restarts}; phase {self.phase.value}"
        )
        return f"{line}: {self.message}" if self.message else line

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form for XCom and trigger events."""
        data = asdict(self)
        data["phase"] = self.phase.value
        data["failure"] = self.failure.value if self.failure else None
        data["conditions"] = list(self.conditions)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PathwaysJobStatus:
        values = dict(data)
        values["phase"] = Phase(values["phase"])
        values["failure"] = FailureClass(values["failure"]) if values.get("failure") else None
        values["conditions"] = tuple(values.get("conditions") or ())
        return cls(**values)


def _true_conditions(obj: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """Conditions with status True, looked up by type (never by position)."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return {c.get("type", ""): c for c in conditions if str(c.get("status")) == "True"}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _replicas(jobset: Mapping[str, Any], replicated_job: str) -> int:
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if rjob.get("name") == replicated_job:
            return int(rjob.get("replicas", 1))
    return 0


def _reason_text(condition: Mapping[str, Any]) -> str:
    reason = condition.get("reason") or ""
    message = condition.get("message") or ""
    return f"{reason}: {message}" if reason and message else reason or message


@dataclass(frozen=True)
class _Diagnosis:
    failure: FailureClass
    message: str
    exit_code: int | None = None


def _preempted_pod(pods: Iterable[Mapping[str, Any]]) -> str | None:
    for pod in pods:
        status = pod.get("status") or {}
        name = (pod.get("metadata") or {}).get("name", "?")
        disruption = _true_conditions(pod).get("DisruptionTarget")
        if disruption:
            return f"pod {name} was disrupted ({_reason_text(disruption)})"
        if status.get("reason") in _DISRUPTION_POD_REASONS:
            return f"pod {name} was {status.get('reason')} ({status.get('message') or 'no message'})"
    return None


def _failed_main_container(
    pods: Iterable[Mapping[str, Any]], head_replicated_job: str, main_container: str
) -> _Diagnosis | None:
    for pod in pods:
        if _labels(pod).get(REPLICATED_JOB_LABEL) != head_replicated_job:
            continue
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            if container.get("name") != main_container:
                continue
            terminated = (container.get("state") or {}).get("terminated") or (
                container.get("lastState") or {}
            ).get("terminated")
            if terminated and int(terminated.get("exitCode", 0)) != 0:
                code = int(terminated["exitCode"])
                detail = terminated.get("message") or terminated.get("reason") or ""
                text = f"the user program (container {main_container!r}) exited with code {code}"
                return _Diagnosis(
                    FailureClass.USER_PROGRAM_FAILED, f"{text}: {detail}" if detail else text, code
                )
    return None


def _failed_jobs(
    jobs: Iterable[Mapping[str, Any]], head_replicated_job: str
) -> tuple[_Diagnosis | None, _Diagnosis | None]:
    """From batch Jobs (pods may be gone): a head failure and a preemption, if any."""
    head: _Diagnosis | None = None
    preempted: _Diagnosis | None = None
    for job in jobs:
        failed = _true_conditions(job).get("Failed")
        if not failed:
            continue
        name = (job.get("metadata") or {}).get("name", "?")
        text = _reason_text(failed)
        if "DisruptionTarget" in text or "preempt" in text.lower():
            preempted = preempted or _Diagnosis(FailureClass.PREEMPTED, f"job {name} failed: {text}")
            continue
        if _labels(job).get(REPLICATED_JOB_LABEL) == head_replicated_job:
            head = head or _Diagnosis(
                FailureClass.USER_PROGRAM_FAILED,
                f"the head job {name} failed ({text}); its pods are gone, so the exit code is unknown",
            )
    return head, preempted


def _evicted_workload(workloads: Iterable[Mapping[str, Any]]) -> str | None:
    for workload in workloads:
        conditions = _true_conditions(workload)
        for kind in ("Evicted", "Preempted"):
            if kind in conditions:
                name = (workload.get("metadata") or {}).get("name", "?")
                return f"Kueue workload {name} {kind.lower()} ({_reason_text(conditions[kind])})"
    return None


def _diagnose_failure(
    failed_condition: Mapping[str, Any] | None,
    *,
    pods: list[Mapping[str, Any]],
    jobs: list[Mapping[str, Any]],
    workloads: list[Mapping[str, Any]],
    head_replicated_job: str,
    main_container: str,
) -> _Diagnosis:
    jobset_reason = _reason_text(failed_condition or {})
    suffix = f" (JobSet: {jobset_reason})" if jobset_reason else ""
    # Preemption wins: a lost slice also makes the program fail (JAX reports DATA_LOSS).
    evidence = _preempted_pod(pods) or _evicted_workload(workloads)
    head_job, preempted_job = _failed_jobs(jobs, head_replicated_job)
    if evidence:
        return _Diagnosis(FailureClass.PREEMPTED, f"slices were preempted: {evidence}{suffix}")
    if preempted_job:
        return _Diagnosis(FailureClass.PREEMPTED, f"slices were preempted: {preempted_job.message}{suffix}")
    program = _failed_main_container(pods, head_replicated_job, main_container) or head_job
    if program:
        return _Diagnosis(program.failure, program.message + suffix, program.exit_code)
    if failed_condition and failed_condition.get("reason") == "ReachedMaxRestarts":
        return _Diagnosis(FailureClass.MAX_RESTARTS_REACHED, f"the job used up its restarts{suffix}")
    return _Diagnosis(FailureClass.UNKNOWN, f"the job failed{suffix or ' for an unknown reason'}")


def summarize(
    *,
    name: str,
    namespace: str,
    pathways_job: Mapping[str, Any] | None,
    jobset: Mapping[str, Any] | None,
    pods: list[Mapping[str, Any]] | None = None,
    jobs: list[Mapping[str, Any]] | None = None,
    workloads: list[Mapping[str, Any]] | None = None,
    worker_replicated_job: str = WORKER_REPLICATED_JOB,
    head_replicated_job: str = HEAD_REPLICATED_JOB,
    main_container: str = "main",
    expect_pathways_job: bool = True,
) -> PathwaysJobStatus:
    """
    Summarize a Pathways job.

    Slices are read from the JobSet (the PathwaysJob has no partial-slice state); conditions are
    looked up by type; ``terminalState: Failed`` with no conditions and no JobSet is a spec the
    controller rejected; Jobs stand in for pods that are gone. ``pods``, ``jobs`` and
    ``workloads`` are only needed to classify a failure or a suspension.
    """
    pods, jobs, workloads = pods or [], jobs or [], workloads or []
    base: dict[str, Any] = {"name": name, "namespace": namespace}
    if (pathways_job if expect_pathways_job else jobset) is None:
        return PathwaysJobStatus(
            **base,
            phase=Phase.DELETED,
            failure=FailureClass.UNKNOWN,
            message="the job no longer exists (deleted outside this task?)",
        )
    pwj_status = (pathways_job or {}).get("status") or {}
    pwj_spec = (pathways_job or {}).get("spec") or {}
    workers = (pwj_spec.get("workers") or [{}])[0]
    if jobset is None:
        total = int(workers.get("numSlices", 0) or 0)
        if pwj_status.get("terminalState") == "Failed":
            rejected = not pwj_status.get("conditions")
            topology, machine = workers.get("topology"), workers.get("type")
            message = (
                f"the PathwaysJob controller rejected the spec: topology {topology!r} is not valid for "
                f"machine type {machine!r} (or another field is invalid); no JobSet was created"
                if rejected
                else f"the PathwaysJob failed: {pwj_status}"
            )
            return PathwaysJobStatus(
                **base,
                phase=Phase.FAILED,
                slices_total=total,
                failure=FailureClass.SPEC_REJECTED if rejected else FailureClass.UNKNOWN,
                message=message,
            )
        return PathwaysJobStatus(
            **base, phase=Phase.PENDING, slices_total=total, message="waiting for the controller"
        )

    js_status = jobset.get("status") or {}
    by_name = {r.get("name"): r for r in js_status.get("replicatedJobsStatus") or []}
    worker, head = by_name.get(worker_replicated_job) or {}, by_name.get(head_replicated_job) or {}
    total = _replicas(jobset, worker_replicated_job)
    ready = min(int(worker.get("ready", 0) or 0), total)
    head_ready = int(head.get("ready", 0) or 0) >= 1
    restarts = int(js_status.get("restarts", 0) or 0)
    conditions = _true_conditions(jobset)
    common: dict[str, Any] = {
        **base,
        "slices_ready": ready,
        "slices_total": total,
        "head_ready": head_ready,
        "restarts": restarts,
        "conditions": tuple(sorted(conditions)),
    }
    terminal = js_status.get("terminalState") or ""
    if terminal == "Completed" or "Completed" in conditions:
        text = _reason_text(conditions.get("Completed") or {})
        return PathwaysJobStatus(**common, phase=Phase.SUCCEEDED, message=text or "completed")
    if terminal == "Failed" or "Failed" in conditions:
        diagnosis = _diagnose_failure(
            conditions.get("Failed"),
            pods=pods,
            jobs=jobs,
            workloads=workloads,
            head_replicated_job=head_replicated_job,
            main_container=main_container,
        )
        return PathwaysJobStatus(
            **common,
            phase=Phase.FAILED,
            failure=diagnosis.failure,
            message=diagnosis.message,
            exit_code=diagnosis.exit_code,
        )
    evicted = _evicted_workload(workloads)
    if "Suspended" in conditions or (jobset.get("spec") or {}).get("suspend") or evicted:
        why = evicted or _reason_text(conditions.get("Suspended") or {}) or "spec.suspend is true"
        return PathwaysJobStatus(
            **common,
            phase=Phase.SUSPENDED,
            failure=FailureClass.PREEMPTED,
            message=f"the JobSet is suspended (preempted or evicted by the queue): {why}",
        )
    if head_ready and ready >= total:
        phase = Phase.RUNNING
    elif head_ready or ready or int(worker.get("active", 0) or 0) or int(head.get("active", 0) or 0):
        phase = Phase.STARTING
    else:
        phase = Phase.PENDING
    return PathwaysJobStatus(**common, phase=phase)
