"""Turn a PathwaysJob, its JobSet, Jobs, pods, events and Kueue workloads into one status summary.

This module is the single place where Kubernetes state becomes an operator outcome. It works
on plain dicts (the JSON the API server returns), so it has no client-library dependency.

Rules and where they come from:

- a JobSet labelled ``kueue.x-k8s.io/queue-name`` is suspended at creation until Kueue admits it
  (kueue ``defaults.go``): suspended and not ``Admitted`` is **queued**, never preemption; an
  ``Evicted`` Workload is requeued by Kueue and so queued again; a deactivated one
  (``spec.active: false``, ``RequeuingLimitExceeded``) is an infrastructure failure
  (kueue ``workload_types.go``);
- ``terminalState: Failed`` with no conditions and no JobSet is whatever made the JobSet create fail
  (pathways-job ``pathwaysjob_controller.go`` ``Reconcile``): a topology outside
  ``ValidTpuTopologiesMap`` or a name over 22 characters (jobset ``jobset_webhook.go``) is a refused
  spec, anything else an infrastructure failure;
- preemption evidence survives the pods: Job conditions ``FailureTarget``/``Failed`` with reason
  ``PodFailurePolicy`` (the pod's ``DisruptionTarget``), Kueue evictions, node-loss events on the
  job's pods, and a program that died with ``DATA_LOSS`` (how Pathways reports a lost slice).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

from airflow_provider_pathways.failure_class import FailureClass
from airflow_provider_pathways.gke import naming, tpu

HEAD_REPLICATED_JOB = "pathways-head"
WORKER_REPLICATED_JOB = "worker"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"

# Pod status reasons that mean the node or the scheduler took the pod away.
_DISRUPTION_POD_REASONS = frozenset(
    {"Preempting", "Evicted", "NodeLost", "Terminated", "Shutdown", "NodeShutdown"}
)
# Event reasons on a job's pods that mean its node went away or the pod was preempted, causes first.
_DISRUPTION_EVENT_ORDER = (
    "NodeNotReady",
    "NodeLost",
    "NodeShutdown",
    "Shutdown",
    "Preempted",
    "Preempting",
    "PreemptionByScheduler",
    "Evicted",
    "TaintManagerEviction",
    "DeletionByTaintManager",
    "DeletionByPodGC",
)
_DISRUPTION_EVENT_REASONS = frozenset(_DISRUPTION_EVENT_ORDER)
# How Pathways reports a slice that went away to the JAX program.
_DATA_LOSS = "DATA_LOSS"


class Phase(str, Enum):
    """Where a Pathways job stands."""

    PENDING = "pending"
    QUEUED = "queued"
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
    #: The Kueue LocalQueue (``kueue.x-k8s.io/queue-name``) when the job is queued through Kueue.
    queue: str | None = None
    #: When the job entered (or re-entered) the queue, RFC 3339; set while it is queued.
    queued_since: str | None = None

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
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PathwaysJobStatus:
        values = dict(data)
        values["phase"] = Phase(values["phase"])
        values["failure"] = FailureClass(values["failure"]) if values.get("failure") else None
        values["conditions"] = tuple(values.get("conditions") or ())
        return cls(**values)


def parse_time(stamp: object) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp as the API server writes them; None if unreadable."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``2 h 5 min``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def _condition(obj: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return condition
    return None


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
    """From batch Jobs (pods may be gone): a head failure and a preemption, if any.

    A Job whose pod had ``DisruptionTarget`` fails through its pod failure policy: ``FailureTarget``
    and ``Failed`` with reason ``PodFailurePolicy``, a message naming the condition.
    """
    head: _Diagnosis | None = None
    preempted: _Diagnosis | None = None
    for job in jobs:
        conditions = _true_conditions(job)
        name = (job.get("metadata") or {}).get("name", "?")
        for type_ in ("FailureTarget", "Failed"):
            condition = conditions.get(type_)
            if not condition:
                continue
            text = _reason_text(condition)
            if (
                condition.get("reason") == "PodFailurePolicy"
                or "DisruptionTarget" in text
                or ("preempt" in text.lower())
            ):
                preempted = preempted or _Diagnosis(FailureClass.PREEMPTED, f"job {name} failed: {text}")
                break
        else:
            failed = conditions.get("Failed")
            if failed and _labels(job).get(REPLICATED_JOB_LABEL) == head_replicated_job:
                head = head or _Diagnosis(
                    FailureClass.USER_PROGRAM_FAILED,
                    f"the head job {name} failed ({_reason_text(failed)}); its pods are gone, so the exit "
                    "code is unknown",
                )
    return head, preempted


def _event_time(event: Mapping[str, Any]) -> float | None:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        stamp = parse_time(event.get(key))
        if stamp is not None:
            return stamp
    return parse_time((event.get("metadata") or {}).get("creationTimestamp"))


def _disruption_event(
    events: Iterable[Mapping[str, Any]], prefixes: tuple[str, ...], since: float | None
) -> str | None:
    """A node-loss or preemption event on one of the job's pods in the current attempt (the earliest;
    at the same second, the node's own failure before its consequences)."""
    found: list[tuple[float, int, str]] = []
    for event in events:
        involved = event.get("involvedObject") or {}
        reason = event.get("reason")
        if involved.get("kind") != "Pod" or not str(involved.get("name", "")).startswith(prefixes):
            continue
        if reason not in _DISRUPTION_EVENT_REASONS:
            continue
        stamp = _event_time(event)
        if since is not None and stamp is not None and stamp < since:
            continue
        text = f"pod {involved.get('name')}: {reason} ({event.get('message') or 'no message'})"
        found.append((stamp or 0.0, _DISRUPTION_EVENT_ORDER.index(str(reason)), text))
    return min(found)[2] if found else None


def _data_loss(pods: Iterable[Mapping[str, Any]], log_tail: str | None, main_container: str) -> str | None:
    """The program's own report of a lost slice (``DATA_LOSS``), from its log tail or exit message."""
    for line in reversed((log_tail or "").splitlines()):
        if _DATA_LOSS in line:
            return line.strip()
    for pod in pods:
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            if container.get("name") != main_container:
                continue
            terminated = (container.get("state") or {}).get("terminated") or {}
            if _DATA_LOSS in str(terminated.get("message") or ""):
                return str(terminated["message"]).strip().splitlines()[-1]
    return None


def _evicted_workload(workloads: Iterable[Mapping[str, Any]]) -> str | None:
    for workload in workloads:
        conditions = _true_conditions(workload)
        for kind in ("Evicted", "Preempted"):
            if kind in conditions:
                name = (workload.get("metadata") or {}).get("name", "?")
                return f"Kueue workload {name} {kind.lower()} ({_reason_text(conditions[kind])})"
    return None


def _attempt_start(jobset: Mapping[str, Any]) -> float | None:
    """When the JobSet's current attempt started: its latest startup condition, else its creation."""
    stamps = [
        parse_time(c.get("lastTransitionTime"))
        for c in (jobset.get("status") or {}).get("conditions") or []
        if c.get("type") in ("StartupPolicyInProgress", "StartupPolicyCompleted")
    ]
    known = [s for s in stamps if s is not None]
    return max(known) if known else parse_time((jobset.get("metadata") or {}).get("creationTimestamp"))


def _diagnose_failure(
    failed_condition: Mapping[str, Any] | None,
    *,
    jobset: Mapping[str, Any],
    pods: list[Mapping[str, Any]],
    jobs: list[Mapping[str, Any]],
    workloads: list[Mapping[str, Any]],
    events: list[Mapping[str, Any]],
    log_tail: str | None,
    head_replicated_job: str,
    worker_replicated_job: str,
    main_container: str,
) -> _Diagnosis:
    jobset_reason = _reason_text(failed_condition or {})
    suffix = f" (JobSet: {jobset_reason})" if jobset_reason else ""
    name = (jobset.get("metadata") or {}).get("name", "")
    prefixes = (f"{name}-{worker_replicated_job}-", f"{name}-{head_replicated_job}-")
    # Preemption wins over the program's failure it causes (JAX reports DATA_LOSS), in this order:
    # evidence of the current attempt's objects, then the program's own DATA_LOSS, then a program
    # failure with a known exit code, then node-loss events (time-stamped to the second, so an
    # earlier attempt's events must not excuse a program that failed on its own).
    head_job, preempted_job = _failed_jobs(jobs, head_replicated_job)
    evidence = (
        _preempted_pod(pods)
        or (preempted_job.message if preempted_job else None)
        or _evicted_workload(workloads)
    )
    data_loss = _data_loss(pods, log_tail, main_container)
    event = _disruption_event(events, prefixes, _attempt_start(jobset))
    if evidence:
        also = f"; the program then failed with {data_loss!r}" if data_loss else ""
        return _Diagnosis(FailureClass.PREEMPTED, f"slices were preempted: {evidence}{also}{suffix}")
    if data_loss:
        seen = f" ({event})" if event else ""
        return _Diagnosis(
            FailureClass.PREEMPTED,
            f"a slice went away while the program ran{seen}: it failed with {data_loss!r}, how Pathways "
            f"reports a lost slice{suffix}",
        )
    program = _failed_main_container(pods, head_replicated_job, main_container)
    if program:
        return _Diagnosis(program.failure, program.message + suffix, program.exit_code)
    if event:
        return _Diagnosis(FailureClass.PREEMPTED, f"slices were lost with their nodes: {event}{suffix}")
    if head_job:
        return _Diagnosis(head_job.failure, head_job.message + suffix, head_job.exit_code)
    if failed_condition and failed_condition.get("reason") == "ReachedMaxRestarts":
        return _Diagnosis(FailureClass.MAX_RESTARTS_REACHED, f"the job used up its restarts{suffix}")
    return _Diagnosis(FailureClass.UNKNOWN, f"the job failed{suffix or ' for an unknown reason'}")


def _own_workload(workloads: list[Mapping[str, Any]], jobset: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JobSet's Kueue Workload (owned by it), the newest if several."""
    md = jobset.get("metadata") or {}
    owned = [
        w
        for w in workloads
        if any(
            ref.get("kind") == "JobSet"
            and ref.get("name") == md.get("name")
            and ref.get("uid") in (None, md.get("uid"))
            for ref in (w.get("metadata") or {}).get("ownerReferences") or []
        )
    ]
    owned.sort(key=lambda w: (w.get("metadata") or {}).get("creationTimestamp") or "")
    return owned[-1] if owned else None


def _deactivated(workload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Workload's deactivation (``spec.active: false``), as its ``Evicted`` condition or a stand-in."""
    evicted = _true_conditions(workload).get("Evicted")
    reason = str((evicted or {}).get("reason") or "")
    if (workload.get("spec") or {}).get("active") is False or reason.startswith(
        ("Deactivated", "InactiveWorkload")
    ):
        return evicted or {"reason": "Deactivated", "message": "spec.active is false"}
    return None


def _queued_state(jobset: Mapping[str, Any], workload: Mapping[str, Any] | None) -> tuple[str, str | None]:
    """(message, queued since) of a JobSet Kueue has not admitted (again)."""
    created = (jobset.get("metadata") or {}).get("creationTimestamp")
    if workload is None:
        return "waiting for Kueue to create its Workload", created
    reserved = _condition(workload, "QuotaReserved")
    evicted = _true_conditions(workload).get("Evicted")
    since = None
    if reserved is not None and reserved.get("status") != "True":
        since = reserved.get("lastTransitionTime")
    since = since or (workload.get("metadata") or {}).get("creationTimestamp") or created
    if evicted:
        return (
            f"evicted by Kueue after it ran ({_reason_text(evicted)}) and requeued; "
            "waiting to be admitted again",
            since,
        )
    if reserved is not None and reserved.get("status") != "True":
        return f"waiting for quota ({_reason_text(reserved)})", since
    return "waiting for Kueue to admit it", since


def _controller_refusal(pathways_job: Mapping[str, Any], name: str) -> str | None:
    """Why the PathwaysJob controller cannot create the JobSet for this spec, if the spec says so."""
    spec = pathways_job.get("spec") or {}
    workers = (spec.get("workers") or [{}])[0] or {}
    machine, topology = workers.get("type"), workers.get("topology")
    if not tpu.controller_accepts(machine, topology):
        return (
            f"the PathwaysJob controller rejected the spec: topology {topology!r} is not valid for machine "
            f"type {machine!r} (its ValidTpuTopologiesMap); no JobSet was created"
        )
    if len(name) > naming.MAX_JOB_NAME_LENGTH:
        value = naming.coordinator_label_value(name)
        return (
            f"JobSet refuses the JobSet of {name!r}: its name is {len(name)} characters, so the label "
            f"{naming.COORDINATOR_LABEL}={value!r} would be {len(value)} characters, more than "
            f"{naming.MAX_LABEL_VALUE}; the PathwaysJob controller retries in vain. Use a name of at most "
            f"{naming.MAX_JOB_NAME_LENGTH} characters"
        )
    return None


def _create_failure_message(events: list[Mapping[str, Any]], name: str) -> str:
    """The controller's or a webhook's words about the failed JobSet create, from Warning events."""
    for event in reversed(events):
        involved = event.get("involvedObject") or {}
        ours = involved.get("name") == name and involved.get("kind") in ("PathwaysJob", "JobSet")
        if ours and event.get("type") == "Warning" and event.get("message"):
            return f": {event.get('reason')}: {event['message']}"
    return ""


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
    main_container: str = "main",
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
            failure=FailureClass.UNKNOWN,
            message="the job no longer exists (deleted outside this task?)",
        )
    pwj_status = (pathways_job or {}).get("status") or {}
    pwj_spec = (pathways_job or {}).get("spec") or {}
    workers = (pwj_spec.get("workers") or [{}])[0]
    if jobset is None:
        total = int(workers.get("numSlices", 0) or 0)
        if pwj_status.get("terminalState") == "Failed":
            if pwj_status.get("conditions"):
                failure, message = FailureClass.UNKNOWN, f"the PathwaysJob failed: {pwj_status}"
            elif (refusal := _controller_refusal(pathways_job or {}, name)) is not None:
                failure, message = FailureClass.SPEC_REJECTED, refusal
            else:
                failure = FailureClass.INFRASTRUCTURE
                message = (
                    "the PathwaysJob controller could not create the JobSet (terminalState Failed, no "
                    "conditions) although the spec is valid: a webhook refused the JobSet or the API server "
                    "failed; the controller keeps retrying" + _create_failure_message(events, name)
                )
            return PathwaysJobStatus(
                **base, phase=Phase.FAILED, slices_total=total, failure=failure, message=message
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
    queue = _labels(jobset).get(QUEUE_NAME_LABEL) or None
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
        text = _reason_text(conditions.get("Completed") or {})
        return PathwaysJobStatus(**common, phase=Phase.SUCCEEDED, message=text or "completed")
    if terminal == "Failed" or "Failed" in conditions:
        diagnosis = _diagnose_failure(
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
    suspended = (jobset.get("spec") or {}).get("suspend") is True
    if queue:
        workload = _own_workload(workloads, jobset)
        deactivated = _deactivated(workload) if workload is not None else None
        if deactivated is not None:
            return PathwaysJobStatus(
                **common,
                phase=Phase.FAILED,
                failure=FailureClass.INFRASTRUCTURE,
                message=f"Kueue deactivated the workload ({_reason_text(deactivated)}); it will not be "
                "admitted again",
            )
        if suspended and "Admitted" not in _true_conditions(workload):
            message, since = _queued_state(jobset, workload)
            return PathwaysJobStatus(**common, phase=Phase.QUEUED, message=message, queued_since=since)
    elif suspended:
        evicted = _evicted_workload(workloads)
        why = evicted or _reason_text(conditions.get("Suspended") or {}) or "spec.suspend is true"
        return PathwaysJobStatus(
            **common,
            phase=Phase.SUSPENDED,
            failure=FailureClass.PREEMPTED,
            message=f"the JobSet is suspended (preempted or evicted): {why}",
        )
    if head_ready and ready >= total:
        phase = Phase.RUNNING
    elif head_ready or ready or int(worker.get("active", 0) or 0) or int(head.get("active", 0) or 0):
        phase = Phase.STARTING
    else:
        phase = Phase.PENDING
    return PathwaysJobStatus(**common, phase=phase)
