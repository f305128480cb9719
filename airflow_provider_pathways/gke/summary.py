"""One status of a Pathways job from everything read about it: the PathwaysJob, its JobSet, Jobs,
pods, events and Kueue workloads, as the plain dicts the API server returns.

This is the single place where Kubernetes state becomes an operator outcome. Rules and where
they come from:

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
  job's pods, and a program that died with ``DATA_LOSS`` (how Pathways reports a lost slice) while
  a slice or pod was lost; a pod the kubelet evicted for using more than it may (its
  ephemeral-storage limit, an emptyDir ``sizeLimit``, more than its request under node pressure) is
  the program's failure (kubelet ``eviction/helpers.go``);
- a job with ``metadata.deletionTimestamp`` is terminating, and one that is gone was deleted: by
  someone other than the task following it, an infrastructure failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_pathways.gke.failure_diagnosis import (
    controller_refusal,
    create_failure_message,
    diagnose_failure,
    evicted_workload,
)
from airflow_provider_pathways.gke.naming import HEAD_REPLICATED_JOB, WORKER_REPLICATED_JOB
from airflow_provider_pathways.gke.object_fields import labels_of, reason_text, replicas_of, true_conditions
from airflow_provider_pathways.gke.queueing import deactivation, own_workload, queued_state
from airflow_provider_pathways.gke.status import (
    QUEUE_NAME_LABEL,
    PathwaysJobStatus,
    Phase,
)
from airflow_provider_pathways.outcomes import FailureClass


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
            failure=FailureClass.INFRASTRUCTURE,
            message="the job no longer exists: someone else deleted it before it ended",
        )
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
    restarts = int(js_status.get("restarts", 0) or 0)
    conditions = true_conditions(jobset)
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
        if deactivated is not None:
            return PathwaysJobStatus(
                **common,
                phase=Phase.FAILED,
                failure=FailureClass.INFRASTRUCTURE,
                message=f"Kueue deactivated the workload ({reason_text(deactivated)}); it will not be "
                "admitted again",
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
    if head_ready and ready >= total:
        phase = Phase.RUNNING
    elif head_ready or ready or int(worker.get("active", 0) or 0) or int(head.get("active", 0) or 0):
        phase = Phase.STARTING
    else:
        phase = Phase.PENDING
    return PathwaysJobStatus(**common, phase=phase)


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
