"""Why a Pathways job failed, read from its objects: preemption, eviction, node loss, program
failure, a refused create."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_pathways.gke import tpu
from airflow_provider_pathways.gke.objects import (
    COORDINATOR_LABEL,
    JOB_KINDS,
    MAX_JOB_NAME_LENGTH,
    MAX_LABEL_VALUE,
    PROXY_CONTAINER,
    REPLICATED_JOB_LABEL,
    RESTART_ATTEMPT_LABEL,
    RM_CONTAINER,
    coordinator_label_value,
    labels_of,
    parse_time,
    program_container,
    reason_text,
    true_conditions,
)
from airflow_provider_pathways.reattach_rules import FailureClass

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
# The kubelet's words when it evicts a pod for using more than the pod itself may (kubelet
# eviction/helpers.go): a container's or the pod's ephemeral-storage limit, an emptyDir sizeLimit
# (local storage evictions, reason Evicted and no DisruptionTarget), or, when the node runs low,
# more memory or storage than the container requested (node-pressure evictions name it).
_OWN_USAGE_EVICTION = re.compile(
    r"exceeded its local ephemeral storage limit"
    r"|ephemeral local storage usage exceeds the total limit of containers"
    r"|Usage of EmptyDir volume .* exceeds the limit"
    r"|which exceeds its request of"
)


def _own_usage(message: object) -> bool:
    """The kubelet evicted the pod for its own usage, not for the node's sake."""
    return bool(_OWN_USAGE_EVICTION.search(str(message or "")))


@dataclass(frozen=True)
class _Diagnosis:
    failure: FailureClass
    message: str
    exit_code: int | None = None


def _evicted_for_own_usage(
    pods: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
    prefixes: tuple[str, ...],
    since: float | None,
) -> str | None:
    """A pod of the job the kubelet evicted for using more than it may, from the pod (reason
    ``Evicted`` or a ``DisruptionTarget`` by the kubelet) or, once it is gone, its ``Evicted`` event
    of the current attempt."""
    for pod in pods:
        status = pod.get("status") or {}
        name = (pod.get("metadata") or {}).get("name", "?")
        disruption = true_conditions(pod).get("DisruptionTarget") or {}
        for message in (status.get("message"), disruption.get("message")):
            if (status.get("reason") == "Evicted" or disruption) and _own_usage(message):
                return f"the kubelet evicted pod {name}: {str(message).strip()}"
    for event in events:
        involved = event.get("involvedObject") or {}
        if (
            involved.get("kind") == "Pod"
            and str(involved.get("name", "")).startswith(prefixes)
            and event.get("reason") == "Evicted"
            and _own_usage(event.get("message"))
            and not (since is not None and (_event_time(event) or since) < since)
        ):
            return f"the kubelet evicted pod {involved.get('name')}: {str(event['message']).strip()}"
    return None


def _preempted_pod(pods: Iterable[Mapping[str, Any]]) -> str | None:
    for pod in pods:
        status = pod.get("status") or {}
        name = (pod.get("metadata") or {}).get("name", "?")
        disruption = true_conditions(pod).get("DisruptionTarget")
        if _own_usage(status.get("message")) or _own_usage((disruption or {}).get("message")):
            continue
        if disruption:
            return f"pod {name} was disrupted ({reason_text(disruption)})"
        if status.get("reason") in _DISRUPTION_POD_REASONS:
            return f"pod {name} was {status.get('reason')} ({status.get('message') or 'no message'})"
    return None


def _terminated(container: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A container status's end with a non-zero exit code (now, or before its last restart)."""
    for key in ("state", "lastState"):
        terminated = (container.get(key) or {}).get("terminated")
        if terminated and int(terminated.get("exitCode", 0)) != 0:
            return terminated  # type: ignore[no-any-return]
    return None


def _failed_main_container(
    pods: Iterable[Mapping[str, Any]], head_replicated_job: str, main_container: str
) -> _Diagnosis | None:
    for pod in pods:
        program = program_container(pod, main_container)
        if labels_of(pod).get(REPLICATED_JOB_LABEL) != head_replicated_job or program is None:
            continue
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = _terminated(container) if container.get("name") == program else None
            if terminated:
                code = int(terminated["exitCode"])
                detail = terminated.get("message") or terminated.get("reason") or ""
                text = f"the user program (container {program!r}) exited with code {code}"
                return _Diagnosis(
                    FailureClass.USER_PROGRAM_FAILED, f"{text}: {detail}" if detail else text, code
                )
    return None


def _failed_component(
    pods: Iterable[Mapping[str, Any]], head_replicated_job: str, main_container: str
) -> _Diagnosis | None:
    """A Pathways component of the head pod (the proxy or the resource manager) that failed while it
    served: it ended with an error or was killed (``OOMKilled``) and the kubelet restarted it (its
    ``lastState``: as native sidecars, init containers with ``restartPolicy: Always`` as xpk and the
    controller render them, only ``initContainerStatuses`` tell), or it ended so before the program
    did. The kubelet stops the sidecars after the program ends (SIGTERM: exit code 143), which is no
    failure; the program's failure that follows a component's is not the program's own."""
    for pod in pods:
        if labels_of(pod).get(REPLICATED_JOB_LABEL) != head_replicated_job:
            continue
        status = pod.get("status") or {}
        name = (pod.get("metadata") or {}).get("name", "?")
        statuses = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
        program = program_container(pod, main_container)
        program_end = next(
            (
                parse_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
                for c in statuses
                if program is not None and c.get("name") == program
            ),
            None,
        )
        for container in statuses:
            component = container.get("name")
            if component not in (PROXY_CONTAINER, RM_CONTAINER):
                continue
            crashed = (
                (container.get("lastState") or {}).get("terminated")
                if container.get("restartCount")
                else None
            )
            ended = (container.get("state") or {}).get("terminated")
            if ended and program_end is not None:
                end = parse_time(ended.get("finishedAt"))
                ended = ended if end is not None and end < program_end else None
            for terminated in (crashed, ended):
                if terminated and int(terminated.get("exitCode", 0)) != 0:
                    role = "IFRT proxy" if component == PROXY_CONTAINER else "resource manager"
                    reason = terminated.get("reason") or "Error"
                    advice = "; raise its memory limit" if reason == "OOMKilled" else ""
                    return _Diagnosis(
                        FailureClass.INFRASTRUCTURE,
                        f"the Pathways {role} (container {component!r} of pod {name}) ended with exit "
                        f"code {terminated['exitCode']} ({reason}){advice}",
                    )
    return None


def _runs_a_program(jobset: Mapping[str, Any], head_replicated_job: str, main_container: str) -> bool:
    """The JobSet's head pods run a program (else it is headless: only the Pathways components)."""
    for replicated in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if replicated.get("name") == head_replicated_job:
            pod = ((replicated.get("template") or {}).get("spec") or {}).get("template") or {}
            return program_container(pod, main_container) is not None
    return True  # no spec to read: as before, a program


def _failed_worker_job(jobs: Iterable[Mapping[str, Any]], worker_replicated_job: str) -> str | None:
    """A worker Job whose pods failed more often than its ``backoffLimit`` allows."""
    for job in jobs:
        failed = true_conditions(job).get("Failed")
        if failed and labels_of(job).get(REPLICATED_JOB_LABEL) == worker_replicated_job:
            return f"worker job {(job.get('metadata') or {}).get('name', '?')} failed ({reason_text(failed)})"
    return None


def _failed_jobs(
    jobs: Iterable[Mapping[str, Any]], head_replicated_job: str, headless: bool = False
) -> tuple[_Diagnosis | None, _Diagnosis | None]:
    """From batch Jobs (pods may be gone): a head failure and a preemption, if any. The head of a
    headless job runs only the Pathways components: its failure is theirs, not a program's.

    A Job whose pod had ``DisruptionTarget`` fails through its pod failure policy: ``FailureTarget``
    and ``Failed`` with reason ``PodFailurePolicy``, a message naming the condition.
    """
    head: _Diagnosis | None = None
    preempted: _Diagnosis | None = None
    for job in jobs:
        conditions = true_conditions(job)
        name = (job.get("metadata") or {}).get("name", "?")
        for type_ in ("FailureTarget", "Failed"):
            condition = conditions.get(type_)
            if not condition:
                continue
            text = reason_text(condition)
            if (
                condition.get("reason") == "PodFailurePolicy"
                or "DisruptionTarget" in text
                or ("preempt" in text.lower())
            ):
                preempted = preempted or _Diagnosis(FailureClass.PREEMPTED, f"job {name} failed: {text}")
                break
        else:
            failed = conditions.get("Failed")
            if failed and labels_of(job).get(REPLICATED_JOB_LABEL) == head_replicated_job:
                head = head or (
                    _Diagnosis(
                        FailureClass.INFRASTRUCTURE,
                        f"the head job {name} of a headless job (only the Pathways components) failed "
                        f"({reason_text(failed)})",
                    )
                    if headless
                    else _Diagnosis(
                        FailureClass.USER_PROGRAM_FAILED,
                        f"the head job {name} failed ({reason_text(failed)}); its pods are gone, so the "
                        "exit code is unknown",
                    )
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
        if reason not in _DISRUPTION_EVENT_REASONS or _own_usage(event.get("message")):
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
        program = program_container(pod, main_container)
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            if program is None or container.get("name") != program:
                continue
            terminated = (container.get("state") or {}).get("terminated") or {}
            if _DATA_LOSS in str(terminated.get("message") or ""):
                return str(terminated["message"]).strip().splitlines()[-1]
    return None


def evicted_workload(workloads: Iterable[Mapping[str, Any]]) -> str | None:
    """A Kueue eviction or preemption of the job's Workload, as preemption evidence. An eviction
    for ``PodsReadyTimeout`` is not: it is Kueue's ``waitForPodsReady`` giving up on pods that did
    not all become ready in time (kueue ``workload_types.go`` ``WorkloadEvictedByPodsReadyTimeout``),
    nobody taking the job's capacity away."""
    for workload in workloads:
        conditions = true_conditions(workload)
        for kind in ("Evicted", "Preempted"):
            if kind == "Evicted" and (conditions.get(kind) or {}).get("reason") == "PodsReadyTimeout":
                continue
            if kind in conditions:
                name = (workload.get("metadata") or {}).get("name", "?")
                return f"Kueue workload {name} {kind.lower()} ({reason_text(conditions[kind])})"
    return None


def _attempt_start(jobset: Mapping[str, Any], jobs: Iterable[Mapping[str, Any]]) -> float | None:
    """When the JobSet's current attempt started: the creation of its first Job of that attempt
    (label ``restart-attempt`` equal to ``status.restarts``, jobset_controller.go), else its latest
    startup condition, else its creation. Not the startup conditions first: the controller marks
    startup completed a reconcile after the last slice became ready, and a slice lost in between
    belongs to this attempt."""
    attempt = str((jobset.get("status") or {}).get("restarts", 0) or 0)
    created = [
        parse_time((job.get("metadata") or {}).get("creationTimestamp"))
        for job in jobs
        if labels_of(job).get(RESTART_ATTEMPT_LABEL) == attempt
    ]
    if known_jobs := [s for s in created if s is not None]:
        return min(known_jobs)
    stamps = [
        parse_time(c.get("lastTransitionTime"))
        for c in (jobset.get("status") or {}).get("conditions") or []
        if c.get("type") in ("StartupPolicyInProgress", "StartupPolicyCompleted")
    ]
    known = [s for s in stamps if s is not None]
    return max(known) if known else parse_time((jobset.get("metadata") or {}).get("creationTimestamp"))


def diagnose_failure(
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
    jobset_reason = reason_text(failed_condition or {})
    suffix = f" (JobSet: {jobset_reason})" if jobset_reason else ""
    name = (jobset.get("metadata") or {}).get("name", "")
    prefixes = (f"{name}-{worker_replicated_job}-", f"{name}-{head_replicated_job}-")
    # A pod evicted for its own usage is the program's doing, whatever failed after it (its Job may
    # read like a disruption). Then preemption wins over the program's failure it causes (JAX
    # reports DATA_LOSS), in this order: evidence of the current attempt's objects, then the
    # program's own DATA_LOSS with a node-loss event of the current attempt behind it, then a program
    # failure with a known exit code, then node-loss events (time-stamped to the second, so an
    # earlier attempt's events must not excuse a program that failed on its own). A DATA_LOSS with no
    # lost slice or pod behind it is the program's own failure.
    since = _attempt_start(jobset, jobs)
    overuse = _evicted_for_own_usage(pods, events, prefixes, since)
    program = _failed_main_container(pods, head_replicated_job, main_container)
    if overuse:
        return _Diagnosis(
            FailureClass.USER_PROGRAM_FAILED,
            f"the job used more than its pods may: {overuse}; raise the limit or request, or use less"
            f"{suffix}",
            program.exit_code if program else None,
        )
    headless = not _runs_a_program(jobset, head_replicated_job, main_container)
    head_job, preempted_job = _failed_jobs(jobs, head_replicated_job, headless)
    evidence = (
        _preempted_pod(pods)
        or (preempted_job.message if preempted_job else None)
        or evicted_workload(workloads)
    )
    data_loss = _data_loss(pods, log_tail, main_container)
    event = _disruption_event(events, prefixes, since)
    if evidence:
        also = f"; the program then failed with {data_loss!r}" if data_loss else ""
        return _Diagnosis(FailureClass.PREEMPTED, f"slices were preempted: {evidence}{also}{suffix}")
    if data_loss and event:
        return _Diagnosis(
            FailureClass.PREEMPTED,
            f"a slice went away while the program ran ({event}): it failed with {data_loss!r}, how "
            f"Pathways reports a lost slice{suffix}",
        )
    component = _failed_component(pods, head_replicated_job, main_container)
    if component:
        also = f"; the program then failed: {program.message}" if program else ""
        return _Diagnosis(
            component.failure, component.message + also + suffix, program.exit_code if program else None
        )
    unlost = (
        f"; it reported {data_loss!r}, but no slice or pod of the job was lost, so this is not a preemption"
        if data_loss
        else ""
    )
    if program:
        return _Diagnosis(program.failure, program.message + unlost + suffix, program.exit_code)
    if event:
        return _Diagnosis(FailureClass.PREEMPTED, f"slices were lost with their nodes: {event}{suffix}")
    if data_loss:
        return _Diagnosis(
            FailureClass.USER_PROGRAM_FAILED,
            f"the user program failed with {data_loss!r}, but no slice or pod of the job was lost, so "
            f"this is not a preemption{suffix}",
        )
    if head_job:
        return _Diagnosis(head_job.failure, head_job.message + suffix, head_job.exit_code)
    if failed_condition and failed_condition.get("reason") == "ReachedMaxRestarts":
        max_restarts = ((jobset.get("spec") or {}).get("failurePolicy") or {}).get("maxRestarts") or 0
        worker = _failed_worker_job(jobs, worker_replicated_job)
        if not max_restarts and worker:  # xpk renders no maxRestarts: the first failed Job ends it
            return _Diagnosis(
                FailureClass.INFRASTRUCTURE,
                f"{worker}: a slice's Pathways workers kept failing, and the JobSet allows no restarts "
                f"(failurePolicy.maxRestarts 0){suffix}",
            )
        return _Diagnosis(FailureClass.MAX_RESTARTS_REACHED, f"the job used up its restarts{suffix}")
    return _Diagnosis(FailureClass.UNKNOWN, f"the job failed{suffix or ' for an unknown reason'}")


def controller_refusal(pathways_job: Mapping[str, Any], name: str) -> str | None:
    """Why the PathwaysJob controller cannot create the JobSet for this spec, if the spec says so."""
    spec = pathways_job.get("spec") or {}
    workers = (spec.get("workers") or [{}])[0] or {}
    machine, topology = workers.get("type"), workers.get("topology")
    if not tpu.controller_accepts(machine, topology):
        return (
            f"the PathwaysJob controller rejected the spec: topology {topology!r} is not valid for machine "
            f"type {machine!r} (its ValidTpuTopologiesMap); no JobSet was created"
        )
    if len(name) > MAX_JOB_NAME_LENGTH:
        value = coordinator_label_value(name)
        return (
            f"JobSet refuses the JobSet of {name!r}: its name is {len(name)} characters, so the label "
            f"{COORDINATOR_LABEL}={value!r} would be {len(value)} characters, more than "
            f"{MAX_LABEL_VALUE}; the PathwaysJob controller retries in vain. Use a name of at most "
            f"{MAX_JOB_NAME_LENGTH} characters"
        )
    return None


def create_failure_message(events: list[Mapping[str, Any]], name: str) -> str:
    """The controller's or a webhook's words about the failed JobSet create, from Warning events."""
    for event in reversed(events):
        involved = event.get("involvedObject") or {}
        ours = involved.get("name") == name and involved.get("kind") in JOB_KINDS
        if ours and event.get("type") == "Warning" and event.get("message"):
            return f": {event.get('reason')}: {event['message']}"
    return ""
