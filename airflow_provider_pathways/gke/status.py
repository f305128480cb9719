"""The status of a Pathways job: its phase, slices, failure class and the times it moved between
them (plain values, also what the triggers send), read from everything the cluster holds about the
job; where it stands in Kueue; what a wait on it follows; and the one judgement an operator makes
from it.

:func:`summarize` is the single place where Kubernetes state (the PathwaysJob, its JobSet, Jobs,
pods, events and Kueue Workloads, as the plain dicts the API server returns) becomes a status.
Rules and where they come from:

- a JobSet labelled ``kueue.x-k8s.io/queue-name`` is suspended at creation until Kueue admits it
  (kueue ``defaults.go``): suspended and not ``Admitted`` is **queued**, never preemption; an
  ``Evicted`` Workload is requeued by Kueue and so queued again; a deactivated one
  (``spec.active: false``, ``RequeuingLimitExceeded``) is an infrastructure failure
  (kueue ``workload_types.go``);
- an eviction for ``PodsReadyTimeout`` (Kueue's ``waitForPodsReady``, on by default since 0.19 with
  a 30-minute timeout) is Kueue giving up on a start, not a preemption nor the program's failure: a
  Workload whose every counted eviction (``status.schedulingStats.evictions``, by reason and
  underlying cause) is a ``PodsReadyTimeout`` from ``WaitForStart`` (pods not all ready since
  admission) never started, so its wait in the queue counts from its first queueing (the Workload's
  creation), its time admitted without ready pods included; any other eviction may have followed a
  run, and the wait counts from the last eviction (kueue ``workload_types.go``);
- ``terminalState: Failed`` with no conditions and no JobSet is whatever made the JobSet create fail
  (pathways-job ``pathwaysjob_controller.go`` ``Reconcile``): a topology outside
  ``ValidTpuTopologiesMap`` or a name over 22 characters (jobset ``jobset_webhook.go``) is a refused
  spec, anything else an infrastructure failure;
- preemption evidence survives the pods: Job conditions ``FailureTarget``/``Failed`` with reason
  ``PodFailurePolicy`` (the pod's ``DisruptionTarget``), Kueue evictions, node-loss events on the
  job's pods, and a program that died with ``DATA_LOSS`` (how Pathways reports a lost slice) while
  a slice or pod was lost; a pod the kubelet evicted for using more than it may (its
  ephemeral-storage limit, an emptyDir ``sizeLimit``, more than its request under node pressure) is
  the program's failure (kubelet ``eviction/helpers.go``);
- a job with ``metadata.deletionTimestamp`` is terminating, and one that is gone was deleted: by
  someone other than the task following it, an infrastructure failure;
- a JobSet whose ``RestartingJobSet`` condition is True (JobSet v0.12 ``failure_policy.go``: set by
  the ``RestartJobSet`` actions; ``jobset_controller.go``: False again once every Job is ready) is
  active: neither failed nor finished, and not running until that condition is False; the counts of
  the write that started the restart still include the failed Job and belong to the attempt being
  replaced (``calculateReplicatedJobStatuses`` runs before ``executeFailurePolicy``, one status
  update for both), so no slice reads ready then; a Job restarted alone (``RestartJob``, counted in
  ``replicatedJobsStatus[].jobRestarts``) counts as a restart; slices are the worker replicated
  job's ``replicas`` now and ``ready`` counts the Jobs ready at their current ``parallelism`` (an
  elastic JobSet's ``parallelism`` may change; its ``replicas`` may not).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from airflow_provider_pathways.gke.failure_diagnosis import (
    controller_refusal,
    create_failure_message,
    diagnose_failure,
    evicted_workload,
)
from airflow_provider_pathways.gke.objects import (
    HEAD_REPLICATED_JOB,
    JOBSET,
    MAIN_CONTAINER,
    QUEUE_NAME_LABEL,
    WORKER_REPLICATED_JOB,
    check_kind,
    find_condition,
    labels_of,
    owner_references,
    parse_time,
    reason_text,
    replicas_of,
    true_conditions,
)
from airflow_provider_pathways.reattach_rules import FailureClass, JobJudgement, known_fields
from airflow_provider_pathways.tpu_hours import Timeline


class Phase(str, Enum):
    """Where a Pathways job stands."""

    PENDING = "pending"
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    SUSPENDED = "suspended"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    #: Being deleted (``metadata.deletionTimestamp`` set): it will not run to its end.
    TERMINATING = "terminating"
    DELETED = "deleted"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.TERMINATING, Phase.DELETED)


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
    #: The Kueue LocalQueue (``kueue.x-k8s.io/queue-name``) when the job is queued through Kueue.
    queue: str | None = None
    #: When the job's wait in the queue began, RFC 3339; set while it is queued: when it entered
    #: (or, evicted after it ran, re-entered) the queue; for a job Kueue evicted before it ever
    #: started (``PodsReadyTimeout``), when it was first queued.
    queued_since: str | None = None
    #: When the job was created (its ``creationTimestamp``, RFC 3339): its submission.
    created_at: str | None = None
    #: What the JobSet's own conditions record (RFC 3339; :func:`recorded_times`): when it last
    #: began creating its Jobs (admitted, or created unsuspended), when every replicated job was
    #: last ready, and when it completed or failed.
    started_at: str | None = None
    ready_at: str | None = None
    ended_at: str | None = None

    @property
    def terminal(self) -> bool:
        return self.phase.terminal

    def ready_for(self, min_slices: int) -> bool:
        """True when the head is ready and at least ``min_slices`` worker slices are ready."""
        return (
            not self.terminal
            and self.phase not in (Phase.SUSPENDED, Phase.QUEUED)
            and self.head_ready
            and self.slices_ready >= min_slices
        )

    def queued_for(self, now: float | None = None) -> float | None:
        """Seconds the job has been queued, or None when it is not queued."""
        if self.phase is not Phase.QUEUED or not self.queued_since:
            return None
        since = parse_time(self.queued_since)
        return None if since is None else max(0.0, (time.time() if now is None else now) - since)

    def progress(self, min_slices: int | None = None, now: float | None = None) -> str:
        """One log line, e.g. ``slices ready 2/4, need 3; head ready; restarts 0; phase starting``,
        or ``queued in LocalQueue multislice-queue for 12 min; ...`` while Kueue holds the job."""
        need = f", need {min_slices}" if min_slices is not None else ""
        head = "head ready" if self.head_ready else "head not ready"
        queued = ""
        if self.phase is Phase.QUEUED:
            waited = self.queued_for(now)
            queued = f"queued in LocalQueue {self.queue or '?'}"
            queued += f" for {format_duration(waited)}; " if waited is not None else "; "
        line = (
            f"{self.namespace}/{self.name}: {queued}slices ready {self.slices_ready}/{self.slices_total}"
            f"{need}; {head}; restarts {self.restarts}; phase {self.phase.value}"
        )
        return f"{line}: {self.message}" if self.message else line

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form for XCom and trigger events."""
        data = asdict(self)
        data["phase"] = self.phase.value
        data["failure"] = self.failure.value if self.failure else None
        data["conditions"] = list(self.conditions)
        for added in ("created_at", "started_at", "ready_at", "ended_at"):
            if data[added] is None:  # added after 0.1.0: sent only when known
                del data[added]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PathwaysJobStatus:
        """Inverse of :meth:`to_dict`; keys a newer version added are ignored, and a failure class
        it added reads as ``unknown``."""
        values = known_fields(cls, data)
        values["phase"] = Phase(values["phase"])
        failure = values.get("failure")
        values["failure"] = _failure_class(failure) if failure else None
        values["conditions"] = tuple(values.get("conditions") or ())
        return cls(**values)


def _failure_class(value: str) -> FailureClass:
    try:
        return FailureClass(value)
    except ValueError:
        return FailureClass.UNKNOWN


def format_duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``2 h 5 min``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def judge_status(status: PathwaysJobStatus) -> JobJudgement:
    """Succeeded, failed with its class (a terminating or deleted job is an infrastructure
    failure), or active (also suspended: it runs again once resumed, so a new try follows it
    rather than start a second one)."""
    if status.phase is Phase.SUCCEEDED:
        return JobJudgement.succeeded(status.message)
    if status.terminal:
        return JobJudgement.failed(status.failure or FailureClass.UNKNOWN, status.message)
    return JobJudgement.active(status.progress(), suspended=status.phase is Phase.SUSPENDED)


def observe_status(
    timeline: Timeline, status: PathwaysJobStatus, min_slices: int | None, now: float | None = None
) -> tuple[str, ...]:
    """Record in ``timeline`` what ``status`` shows (running: admitted and placed, no longer pending
    or queued; ready: ``min_slices``, default all, slices and the head ready; ended: terminal or
    suspended; admitted later: queued through Kueue); the milestones newly reached."""
    need = min_slices or status.slices_total
    recorded = {"running": parse_time(status.started_at), "ended": parse_time(status.ended_at)}
    if need == status.slices_total:  # the JobSet records when all were ready, not when ``need`` were
        recorded["ready"] = parse_time(status.ready_at)
    return timeline.observe(
        now=time.time() if now is None else now,
        submitted=parse_time(status.created_at),
        running=status.phase in (Phase.STARTING, Phase.RUNNING),
        ready=need > 0 and status.ready_for(need),
        ended=status.terminal or status.phase is Phase.SUSPENDED,
        admitted_later=status.queue is not None or status.phase is Phase.QUEUED,
        slices_ready=status.slices_ready,
        recorded=recorded,
        slices_total=status.slices_total,
    )


def recorded_times(
    jobset: Mapping[str, Any] | None, pathways_job: Mapping[str, Any] | None
) -> dict[str, str]:
    """The moments the job's own conditions record, so that a watcher that started late (a
    trigger a triggerer restart moved, a retry that reattached) knows them as well as one that
    watched throughout.

    Rules (jobset ``jobset_controller.go`` ``updateCondition`` sets ``lastTransitionTime`` when a
    condition's status changes, and keeps it when the exclusive ``StartupPolicyInProgress`` /
    ``StartupPolicyCompleted`` pair flips the other one to False; the PathwaysJob controller
    (``pathwaysjob_controller.go``, which copies the JobSet's conditions with their times), xpk
    (``pathways_workload_create.yaml.j2``) and this provider render JobSets with
    ``startupPolicyOrder: InOrder``):

    - ``started_at``: ``StartupPolicyInProgress``, True or not: when the unsuspended JobSet last
      began creating its Jobs (its admission, for a JobSet Kueue held);
    - ``ready_at``: ``StartupPolicyCompleted`` while True: when every replicated job (head and all
      slices) was last ready;
    - ``ended_at``: ``Completed`` or ``Failed`` while True (from the PathwaysJob's copy once the
      JobSet is gone).

    A JobSet without an in-order startup policy records no start or readiness.
    """
    jobset_true, pathways_true = true_conditions(jobset), true_conditions(pathways_job)
    ends = [c.get(t) for c in (jobset_true, pathways_true) for t in ("Completed", "Failed")]
    moments = {
        "started_at": find_condition(jobset, "StartupPolicyInProgress"),
        "ready_at": jobset_true.get("StartupPolicyCompleted"),
        "ended_at": next((end for end in ends if end), None),
    }
    return {
        key: str(c["lastTransitionTime"]) for key, c in moments.items() if c and c.get("lastTransitionTime")
    }


def own_workload(workloads: list[Mapping[str, Any]], jobset: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JobSet's Kueue Workload (owned by it), the newest if several."""
    md = jobset.get("metadata") or {}
    owned = [
        w
        for w in workloads
        if any(
            ref.get("kind") == JOBSET.kind
            and ref.get("name") == md.get("name")
            and ref.get("uid") in (None, md.get("uid"))
            for ref in owner_references(w)
        )
    ]
    owned.sort(key=lambda w: (w.get("metadata") or {}).get("creationTimestamp") or "")
    return owned[-1] if owned else None


def deactivation(workload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Workload's deactivation (``spec.active: false``), as its ``Evicted`` condition or a stand-in."""
    evicted = true_conditions(workload).get("Evicted")
    reason = str((evicted or {}).get("reason") or "")
    if (workload.get("spec") or {}).get("active") is False or reason.startswith(
        ("Deactivated", "InactiveWorkload")
    ):
        return evicted or {"reason": "Deactivated", "message": "spec.active is false"}
    return None


# kueue workload_types.go: the Evicted reason of waitForPodsReady's timeout, the PodsReady reasons,
# and the deactivation's reason and underlying cause as evict.go counts them.
PODS_READY_TIMEOUT = "PodsReadyTimeout"
WAIT_FOR_START = "WaitForStart"
_RAN_REASONS = ("WaitForRecovery", "Started", "Recovered")
_REQUEUING_LIMIT = ("Deactivated", "RequeuingLimitExceeded")


def evictions(workload: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """The Workload's evictions as Kueue counts them (``status.schedulingStats.evictions``, by
    reason and underlying cause: kueue ``evict.go`` ``workloadEvictionStateInc``; Kueue 0.14 on)."""
    stats = ((workload.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
    counted: dict[tuple[str, str], int] = {}
    for entry in stats:
        key = (str(entry.get("reason") or ""), str(entry.get("underlyingCause") or ""))
        counted[key] = counted.get(key, 0) + int(entry.get("count") or 0)
    return counted


def never_started(workload: Mapping[str, Any]) -> bool:
    """Kueue evicted the Workload for ``PodsReadyTimeout`` before its pods were ever all ready:
    every eviction it counts is one from ``WaitForStart`` (pods not all ready since admission) or
    the deactivation that ends such a series (``RequeuingLimitExceeded``), and there was one.
    Any other eviction (a preemption, node failures, a ``WaitForRecovery`` timeout of pods that
    had been ready) may have followed a run; a Workload without the counts (Kueue before 0.14)
    shows no more than its last eviction."""
    counted = evictions(workload)
    pods_ready = find_condition(workload, "PodsReady") or {}
    if pods_ready.get("status") == "True" or pods_ready.get("reason") in _RAN_REASONS:
        return False
    return counted.get((PODS_READY_TIMEOUT, WAIT_FOR_START), 0) > 0 and all(
        key in ((PODS_READY_TIMEOUT, WAIT_FOR_START), _REQUEUING_LIMIT) for key in counted
    )


def _requeues(workload: Mapping[str, Any]) -> str:
    """``requeued N times`` from ``status.requeueState`` (with the backoff's end while it lasts)."""
    state = (workload.get("status") or {}).get("requeueState") or {}
    count = int(state.get("count") or 0)
    text = f"requeued {count} time{'' if count == 1 else 's'}" if count else "requeued"
    if state.get("requeueAt"):
        text += f" (Kueue's backoff holds it until {state['requeueAt']})"
    return text


def _never_started_text(workload: Mapping[str, Any]) -> str:
    """What a deactivated Workload's evictions say when it never started (else nothing)."""
    if not never_started(workload):
        return ""
    timeouts = evictions(workload)[(PODS_READY_TIMEOUT, WAIT_FOR_START)]
    return (
        "; the job never started: its pods were not all ready within Kueue's waitForPodsReady timeout "
        f"after any of its admissions ({timeouts} {PODS_READY_TIMEOUT} eviction"
        f"{'' if timeouts == 1 else 's'})"
    )


def queued_state(jobset: Mapping[str, Any], workload: Mapping[str, Any] | None) -> tuple[str, str | None]:
    """(message, queued since) of a JobSet Kueue has not admitted (again)."""
    created = (jobset.get("metadata") or {}).get("creationTimestamp")
    if workload is None:
        return "waiting for Kueue to create its Workload", created
    reserved = find_condition(workload, "QuotaReserved")
    evicted = true_conditions(workload).get("Evicted")
    first = (workload.get("metadata") or {}).get("creationTimestamp") or created
    since = None
    if reserved is not None and reserved.get("status") != "True":
        since = reserved.get("lastTransitionTime")
    since = since or first
    if evicted and evicted.get("reason") == PODS_READY_TIMEOUT:
        again = f"{_requeues(workload)}, waiting to be admitted again"
        if never_started(workload):  # its time admitted without ready pods was waiting too
            return (
                f"did not start within Kueue's waitForPodsReady timeout ({reason_text(evicted)}); {again}",
                first,
            )
        return (
            f"evicted by Kueue: its pods were not all ready within Kueue's waitForPodsReady timeout "
            f"({reason_text(evicted)}); {again}",
            since,
        )
    if evicted:
        return (
            f"evicted by Kueue after it ran ({reason_text(evicted)}) and requeued; "
            "waiting to be admitted again",
            since,
        )
    if reserved is not None and reserved.get("status") != "True":
        return f"waiting for quota ({reason_text(reserved)})", since
    return "waiting for Kueue to admit it", since


def queue_time_left(status: PathwaysJobStatus | None, queue_timeout: float | None) -> float | None:
    """Seconds until ``queue_timeout`` while the job is queued (0: timed out); None when it does
    not apply."""
    queued_for = status.queued_for() if status is not None else None
    if queue_timeout is None or queued_for is None:
        return None
    return max(queue_timeout - queued_for, 0.0)


class WaitUntil(str, Enum):
    """How long an operator or trigger follows a job."""

    CREATED = "created"
    READY = "ready"
    FINISHED = "finished"


def validate_wait_arguments(*, name: str, wait_until: str, min_slices: int | None, kind: str) -> None:
    """Raise ValueError naming the argument when a wait is ill-defined."""
    if not name:
        raise ValueError("name: the job name is empty; pass the name of the PathwaysJob to follow")
    if wait_until not in {w.value for w in WaitUntil}:
        raise ValueError(f"wait_until: {wait_until!r} is not one of 'created', 'ready', 'finished'")
    if min_slices is not None and (not isinstance(min_slices, int) or min_slices < 1):
        raise ValueError(f"min_slices: {min_slices!r} must be an integer >= 1")
    check_kind(kind)


def wait_is_over(
    status: PathwaysJobStatus, *, wait_until: str, min_slices: int | None, fail_on_suspend: bool
) -> bool:
    """The wait ends: the job ended, or was suspended (with ``fail_on_suspend``), or, waiting for
    ``ready``, has ``min_slices`` (default: all) slices ready."""
    if status.terminal:
        return True
    if status.phase is Phase.SUSPENDED:
        return fail_on_suspend
    need = min_slices or status.slices_total
    return wait_until == WaitUntil.READY.value and need > 0 and status.ready_for(need)


def wait_succeeded(status: PathwaysJobStatus, wait_until: str) -> bool:
    """The wait's success: waiting for the end, the job succeeded; waiting for ``ready``, it is
    alive and not suspended (one that ended, even successfully, before it was seen ready has
    nothing ready to offer); waiting for ``created``, it exists and did not fail."""
    if wait_until == WaitUntil.READY.value:
        return not status.terminal and status.phase is not Phase.SUSPENDED
    if status.phase is Phase.SUCCEEDED:
        return True
    waits_for_end = wait_until == WaitUntil.FINISHED.value
    return not waits_for_end and not status.terminal and status.phase is not Phase.SUSPENDED


def ended_before_ready(status: PathwaysJobStatus, wait_until: str) -> str | None:
    """Why a wait for ``ready`` failed although the job did not: it succeeded first."""
    if wait_until != WaitUntil.READY.value or status.phase is not Phase.SUCCEEDED:
        return None
    return (
        f"{status.namespace}/{status.name} ended (succeeded) before it was seen ready: "
        "wait_until='ready' is for a job that keeps running (a Pathways cluster for later tasks); "
        "use wait_until='finished' for a program that ends"
    )


def summarize(
    *,
    name: str,
    namespace: str,
    pathways_job: Mapping[str, Any] | None,
    jobset: Mapping[str, Any] | None,
    pods: list[Mapping[str, Any]] | None = None,
    jobs: list[Mapping[str, Any]] | None = None,
    workloads: list[Mapping[str, Any]] | None = None,
    events: list[Mapping[str, Any]] | None = None,
    log_tail: str | None = None,
    worker_replicated_job: str = WORKER_REPLICATED_JOB,
    head_replicated_job: str = HEAD_REPLICATED_JOB,
    main_container: str = MAIN_CONTAINER,
    expect_pathways_job: bool = True,
) -> PathwaysJobStatus:
    """
    Summarize a Pathways job.

    Slices are read from the JobSet (the PathwaysJob has no partial-slice state); conditions are
    looked up by type; Jobs and events stand in for pods that are gone. ``pods``, ``jobs``,
    ``workloads``, ``events`` and ``log_tail`` (the program's last lines) are only needed to
    classify a failure, a suspension or a queued job.
    """
    pods, jobs, workloads, events = pods or [], jobs or [], workloads or [], events or []
    base: dict[str, Any] = {"name": name, "namespace": namespace}
    if (pathways_job if expect_pathways_job else jobset) is None:
        return PathwaysJobStatus(
            **base,
            phase=Phase.DELETED,
            failure=FailureClass.INFRASTRUCTURE,
            message="the job no longer exists: someone else deleted it before it ended",
        )
    base["created_at"] = ((pathways_job or jobset or {}).get("metadata") or {}).get("creationTimestamp")
    base.update(recorded_times(jobset, pathways_job))
    pwj_status = (pathways_job or {}).get("status") or {}
    pwj_spec = (pathways_job or {}).get("spec") or {}
    workers = (pwj_spec.get("workers") or [{}])[0]
    deleting = _deletion(pathways_job) or _deletion(jobset)
    if jobset is None:
        total = int(workers.get("numSlices", 0) or 0)
        if pwj_status.get("terminalState") == "Completed":  # the JobSet went after the job's end
            return PathwaysJobStatus(**base, phase=Phase.SUCCEEDED, slices_total=total, message="completed")
        if pwj_status.get("terminalState") == "Failed":
            if pwj_status.get("conditions"):
                failure, message = FailureClass.UNKNOWN, f"the PathwaysJob failed: {pwj_status}"
            elif (refusal := controller_refusal(pathways_job or {}, name)) is not None:
                failure, message = FailureClass.SPEC_REJECTED, refusal
            else:
                failure = FailureClass.INFRASTRUCTURE
                message = (
                    "the PathwaysJob controller could not create the JobSet (terminalState Failed, no "
                    "conditions) although the spec is valid: a webhook refused the JobSet or the API server "
                    "failed; the controller keeps retrying" + create_failure_message(events, name)
                )
            return PathwaysJobStatus(
                **base, phase=Phase.FAILED, slices_total=total, failure=failure, message=message
            )
        if deleting:
            base["slices_total"] = total
            return PathwaysJobStatus(
                **base, phase=Phase.TERMINATING, failure=FailureClass.INFRASTRUCTURE, message=deleting
            )
        return PathwaysJobStatus(
            **base, phase=Phase.PENDING, slices_total=total, message="waiting for the controller"
        )

    js_status = jobset.get("status") or {}
    by_name = {r.get("name"): r for r in js_status.get("replicatedJobsStatus") or []}
    worker, head = by_name.get(worker_replicated_job) or {}, by_name.get(head_replicated_job) or {}
    total = replicas_of(jobset, worker_replicated_job)
    ready = min(int(worker.get("ready", 0) or 0), total)
    head_ready = int(head.get("ready", 0) or 0) >= 1
    conditions = true_conditions(jobset)
    restarting = conditions.get(RESTARTING)
    if restarting is not None and any(int(r.get("failed", 0) or 0) for r in by_name.values()):
        ready, head_ready = 0, False  # the counts of the attempt the restart replaces
    restarts = int(js_status.get("restarts", 0) or 0) + job_restarts(js_status)
    queue = labels_of(jobset).get(QUEUE_NAME_LABEL) or None
    common: dict[str, Any] = {
        **base,
        "slices_ready": ready,
        "slices_total": total,
        "head_ready": head_ready,
        "restarts": restarts,
        "conditions": tuple(sorted(conditions)),
        "queue": queue,
    }
    terminal = js_status.get("terminalState") or ""
    if terminal == "Completed" or "Completed" in conditions:
        text = reason_text(conditions.get("Completed") or {})
        return PathwaysJobStatus(**common, phase=Phase.SUCCEEDED, message=text or "completed")
    if terminal == "Failed" or "Failed" in conditions:
        diagnosis = diagnose_failure(
            conditions.get("Failed"),
            jobset=jobset,
            pods=pods,
            jobs=jobs,
            workloads=workloads,
            events=events,
            log_tail=log_tail,
            head_replicated_job=head_replicated_job,
            worker_replicated_job=worker_replicated_job,
            main_container=main_container,
        )
        return PathwaysJobStatus(
            **common,
            phase=Phase.FAILED,
            failure=diagnosis.failure,
            message=diagnosis.message,
            exit_code=diagnosis.exit_code,
        )
    if deleting:
        return PathwaysJobStatus(
            **common, phase=Phase.TERMINATING, failure=FailureClass.INFRASTRUCTURE, message=deleting
        )
    suspended = (jobset.get("spec") or {}).get("suspend") is True
    if queue:
        workload = own_workload(workloads, jobset)
        deactivated = deactivation(workload) if workload is not None else None
        if workload is not None and deactivated is not None:
            return PathwaysJobStatus(
                **common,
                phase=Phase.FAILED,
                failure=FailureClass.INFRASTRUCTURE,
                message=f"Kueue deactivated the workload ({reason_text(deactivated)})"
                f"{_never_started_text(workload)}; it will not be admitted again",
            )
        if suspended and "Admitted" not in true_conditions(workload):
            message, since = queued_state(jobset, workload)
            return PathwaysJobStatus(**common, phase=Phase.QUEUED, message=message, queued_since=since)
    elif suspended:
        evicted = evicted_workload(workloads)
        why = evicted or reason_text(conditions.get("Suspended") or {}) or "spec.suspend is true"
        return PathwaysJobStatus(
            **common,
            phase=Phase.SUSPENDED,
            failure=FailureClass.PREEMPTED,
            message=f"the JobSet is suspended (preempted or evicted): {why}",
        )
    if head_ready and ready >= total and restarting is None:
        phase = Phase.RUNNING
    elif head_ready or ready or int(worker.get("active", 0) or 0) or int(head.get("active", 0) or 0):
        phase = Phase.STARTING
    else:
        phase = Phase.PENDING
    if restarting is not None:
        return PathwaysJobStatus(
            **common, phase=phase, message=f"the JobSet is restarting ({reason_text(restarting)})"
        )
    return PathwaysJobStatus(**common, phase=phase)


#: The JobSet condition of a restart under way (jobset v0.12 ``jobset_types.go`` ``JobSetRestarting``).
RESTARTING = "RestartingJobSet"


def job_restarts(jobset_status: Mapping[str, Any]) -> int:
    """Restarts of single Jobs (``RestartJob`` and ``RestartJobAndIgnoreMaxRestarts``, jobset v0.12
    ``failure_policy.go``): the sum of every replicated job's ``jobRestarts``."""
    return sum(
        int(n or 0)
        for entry in jobset_status.get("replicatedJobsStatus") or []
        for n in entry.get("jobRestarts") or []
    )


def _deletion(obj: Mapping[str, Any] | None) -> str | None:
    """Why ``obj`` counts as terminating: its ``deletionTimestamp``, set when someone deleted it (the
    object stays while finalizers, or with foreground deletion its dependents, hold it)."""
    if obj is None:
        return None
    since = (obj.get("metadata") or {}).get("deletionTimestamp")
    if not since:
        return None
    return (
        f"{obj.get('kind') or 'the job'} is being deleted (deletionTimestamp {since}) by someone other "
        "than this task: it will not run to its end"
    )


# Lines of the program's log read when the job failed (to see a DATA_LOSS from a lost slice).
FAILURE_LOG_LINES = 50


@dataclass(frozen=True)
class DetailPlan:
    """What a status read needs beyond the job's own objects."""

    objects: bool = False  # pods, Jobs and Kueue Workloads
    events: bool = False
    log: bool = False  # the program's last lines


def details_needed(
    status: PathwaysJobStatus, *, jobset: Mapping[str, Any] | None, pathways_job: Mapping[str, Any] | None
) -> DetailPlan:
    """A failed, suspended or queued JobSet needs its pods, Jobs and Workloads (a failure also its
    events and log, to tell preemption from the program's own failure); a PathwaysJob that failed
    without a JobSet needs its events (why the controller could not create it)."""
    failed = status.phase is Phase.FAILED
    if status.phase in (Phase.FAILED, Phase.SUSPENDED, Phase.QUEUED) and jobset is not None:
        return DetailPlan(objects=True, events=failed, log=failed)
    return DetailPlan(events=failed and pathways_job is not None)
