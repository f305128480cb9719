"""What the hook reads from a real-shaped cluster: Kueue queueing vs preemption, JobSet-create
failures, and preemption evidence that outlives the pods. Each test names the upstream file whose
behaviour the stand-in reproduces."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from airflow_provider_pathways.failures import FailureClass
from airflow_provider_pathways.gke.objects import JobKind, StatusOptions, kueue_workload_name
from airflow_provider_pathways.gke.status import Phase
from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
from tests.support.kube_jobs import CONN, KNOB, new_spec, wait_for

pytestmark = pytest.mark.usefixtures("kube")
NS = "evidence-tests"
QUEUE = "kueue.x-k8s.io/queue-name"


@pytest.fixture
def hook() -> PathwaysJobHook:
    return PathwaysJobHook(kubernetes_conn_id=CONN)


def status_when(hook: PathwaysJobHook, name: str, check: Any, what: str, **options: Any) -> Any:
    opts = StatusOptions(**options)
    return wait_for(lambda: (s := hook.get_status(name, NS, opts)) and check(s) and s, what=what)


def queued_spec(queue: str, **knobs: Any) -> Any:
    spec = new_spec(NS, **knobs)
    spec.labels = {QUEUE: queue}
    return spec


def test_a_job_waiting_in_kueue_is_queued_not_preempted(hook: PathwaysJobHook, kube: Any) -> None:
    """kueue defaults.go: suspended at creation; workload_types.go: QuotaReserved False until admitted."""
    spec = queued_spec("multislice-queue", kueue_admit_after_seconds="never", program_seconds=0.3)
    hook.create_job(spec.to_pathwaysjob(), NS)
    status = status_when(hook, spec.name, lambda s: s.phase is Phase.QUEUED and s.queued_since, "queued")
    assert status.failure is None and not status.terminal
    assert status.queue == "multislice-queue"
    line = status.progress()
    assert "queued in LocalQueue multislice-queue for" in line and "waiting for quota" in line
    assert not status.ready_for(1)
    jobset = hook.get_object(JobKind.JOBSET.resource, spec.name, NS)
    assert jobset is not None and jobset["spec"]["suspend"] is True
    assert [w["metadata"]["name"] for w in hook.list_workloads(spec.name, NS, jobset)] == [
        kueue_workload_name(spec.name, jobset["metadata"]["uid"])
    ]
    kube.action(NS, spec.name, "admit")
    final = status_when(hook, spec.name, lambda s: s.terminal, "completion")
    assert final.phase is Phase.SUCCEEDED


def test_eviction_after_running_requeues(hook: PathwaysJobHook, kube: Any) -> None:
    """kueue workload_types.go: Evicted (Preempted, InClusterQueue) then Requeued: queued again."""
    spec = queued_spec(f"q-{uuid.uuid4().hex[:6]}", program_seconds=30)
    hook.create_job(spec.to_pathwaysjob(), NS)
    status_when(hook, spec.name, lambda s: s.slices_ready == 2, "running")
    kube.action(NS, spec.name, "evict", reason="Preempted")
    status = status_when(hook, spec.name, lambda s: s.phase is Phase.QUEUED, "requeued")
    assert status.failure is None
    assert "evicted by Kueue after it ran (Preempted" in status.message
    kube.action(NS, spec.name, "admit")
    status_when(hook, spec.name, lambda s: s.phase is Phase.RUNNING, "running again")
    hook.delete_job(spec.name, NS)


def test_deactivated_workload_is_an_infrastructure_failure(hook: PathwaysJobHook, kube: Any) -> None:
    """kueue workload_types.go WorkloadRequeuingLimitExceeded: spec.active false, never admitted again."""
    spec = queued_spec(f"q-{uuid.uuid4().hex[:6]}", program_seconds=30)
    hook.create_job(spec.to_pathwaysjob(), NS)
    status_when(hook, spec.name, lambda s: s.slices_ready == 2, "running")
    kube.action(NS, spec.name, "evict", reason="RequeuingLimitExceeded")
    final = status_when(hook, spec.name, lambda s: s.terminal, "deactivation")
    assert final.failure is FailureClass.INFRASTRUCTURE
    assert "deactivated" in final.message
    hook.delete_job(spec.name, NS)


def test_queued_status_in_the_trigger_path(hook: PathwaysJobHook) -> None:
    """The async twin reads the Workload too."""
    spec = queued_spec("multislice-queue", kueue_admit_after_seconds="never")
    hook.create_job(spec.to_pathwaysjob(), NS)
    status_when(hook, spec.name, lambda s: s.phase is Phase.QUEUED, "queued")
    status = asyncio.run(hook.a_get_status(spec.name, NS))
    assert status.phase is Phase.QUEUED and "waiting for quota" in status.message
    hook.delete_job(spec.name, NS)


def test_long_name_refused_by_jobset_is_a_refused_spec(hook: PathwaysJobHook, kube: Any) -> None:
    """pathwaysjob_controller.go Reconcile: the JobSet webhook (jobset_webhook.go) refuses the
    23-character name; terminalState Failed with no conditions; the controller keeps retrying."""
    spec = new_spec(NS)
    spec.name = f"long-{uuid.uuid4().hex[:18]}"
    assert len(spec.name) == 23
    hook.create_job(spec.to_pathwaysjob(), NS)
    final = status_when(hook, spec.name, lambda s: s.terminal, "refusal")
    assert final.failure is FailureClass.SPEC_REJECTED
    assert "23 characters" in final.message and "at most 22" in final.message
    assert kube.control("state")["jobsetCreateFailures"].get(f"{NS}/{spec.name}", 0) >= 1
    hook.delete_job(spec.name, NS)


def test_jobset_create_failure_with_a_valid_spec_is_infrastructure(hook: PathwaysJobHook) -> None:
    """pathwaysjob_controller.go Reconcile: any JobSet-create error gives terminalState Failed, no
    conditions; with a valid topology and name it is the cluster's failure, not the spec's."""
    spec = new_spec(NS)
    spec.annotations = {**(spec.annotations or {}), KNOB + "reject-jobset": "team quota policy"}
    hook.create_job(spec.to_pathwaysjob(), NS)
    final = status_when(hook, spec.name, lambda s: s.terminal, "create failure")
    assert final.failure is FailureClass.INFRASTRUCTURE
    assert "could not create the JobSet" in final.message and "topology" not in final.message
    hook.delete_job(spec.name, NS)


def test_pod_less_preemption_with_data_loss(hook: PathwaysJobHook, kube: Any) -> None:
    """A slice's node is deleted (its pods vanish, no pod failure policy on the Job), the program dies
    with DATA_LOSS: node-loss events and the program's last line say preemption, not a user failure."""
    spec = new_spec(NS, program_seconds=30)
    hook.create_job(spec.to_pathwaysjob(), NS)
    status_when(hook, spec.name, lambda s: s.slices_ready == 2, "slices ready")
    kube.action(NS, spec.name, "lose-node", slice=1, program="data-loss")
    final = status_when(hook, spec.name, lambda s: s.terminal, "failure")
    assert final.failure is FailureClass.PREEMPTED, final.message
    assert "NodeNotReady" in final.message and "DATA_LOSS" in final.message
    workers = hook.list_pods(spec.name, NS, "worker")
    assert workers == []  # nothing of the lost slice is left but events
    hook.delete_job(spec.name, NS)


def test_data_loss_with_no_slice_lost_is_the_programs_failure(hook: PathwaysJobHook, kube: Any) -> None:
    """pathwaysutils: a lost slice surfaces in the program as a JAX error containing DATA_LOSS; the
    same words with every slice and pod in place (the program's own error, or a DATA_LOSS it raised
    for its data) are no preemption, and retrying them as one would run a failing program again."""
    spec = new_spec(
        NS,
        program_exit_code=1,
        program_log="step 1\njax.errors.JaxRuntimeError: DATA_LOSS: slice 0 lost",
    )
    hook.create_job(spec.to_pathwaysjob(), NS)
    final = status_when(hook, spec.name, lambda s: s.terminal, "failure")
    assert final.failure is FailureClass.USER_PROGRAM_FAILED, final.message
    assert final.exit_code == 1
    assert "DATA_LOSS" in final.message and "no slice or pod of the job was lost" in final.message
    hook.delete_job(spec.name, NS)


def test_preemption_events_of_an_earlier_attempt_do_not_excuse_a_program_failure(
    hook: PathwaysJobHook, kube: Any
) -> None:
    """jobset_controller.go restarts the whole set; the old attempt's evidence stays with it."""
    spec = new_spec(NS, max_restarts=1, program_seconds=1.5, program_exit_code=3)
    hook.create_job(spec.to_pathwaysjob(), NS)
    status_when(hook, spec.name, lambda s: s.slices_ready == 2, "slices ready")
    kube.action(NS, spec.name, "lose-node", slice=0)
    final = wait_for(lambda: (s := hook.get_status(spec.name, NS)) and s.terminal and s, timeout=30)
    assert final.restarts == 1
    assert final.failure is FailureClass.USER_PROGRAM_FAILED, final.message
    hook.delete_job(spec.name, NS)


def test_a_slice_lost_before_the_controller_marked_startup_completed_is_a_preemption() -> None:
    """jobset_controller.go sets StartupPolicyCompleted a reconcile after the last slice started
    (and labels every Job with its restart-attempt): a node lost in between, its events a second
    older than the condition, still belongs to the current attempt."""
    from airflow_provider_pathways.gke.status import summarize

    jobset = _jobset(
        False,
        [
            {
                "type": "StartupPolicyCompleted",
                "status": "True",
                "lastTransitionTime": "2026-01-01T00:00:11Z",
            },
            {
                "type": "Failed",
                "status": "True",
                "reason": "FailedJobs",
                "lastTransitionTime": "2026-01-01T00:00:12Z",
            },
        ],
    )
    jobset["status"]["restarts"] = 0
    jobs = [
        {
            "metadata": {
                "name": f"train-{rjob}-0",
                "creationTimestamp": "2026-01-01T00:00:09Z",
                "labels": {
                    "jobset.sigs.k8s.io/replicatedjob-name": rjob,
                    "jobset.sigs.k8s.io/restart-attempt": "0",
                },
            },
            "status": {},
        }
        for rjob in ("pathways-head", "worker")
    ]
    events = [
        {
            "involvedObject": {"kind": "Pod", "name": "train-worker-0-0-abcde"},
            "reason": "NodeNotReady",
            "message": "Node is not ready",
            "lastTimestamp": "2026-01-01T00:00:10Z",
        }
    ]
    status = summarize(
        name="train",
        namespace=NS,
        pathways_job=None,
        jobset=jobset,
        jobs=jobs,
        events=events,
        log_tail="step 3\njax.errors.JaxRuntimeError: DATA_LOSS: slice 0 lost",
        expect_pathways_job=False,
    )
    assert status.failure is FailureClass.PREEMPTED, status.message
    assert "NodeNotReady" in status.message and "DATA_LOSS" in status.message


# ---------------------------------------------------------------------- summarize, object by object


def _pathways_job(name: str, topology: str = "4x4") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"workers": [{"type": "ct6e-standard-4t", "topology": topology, "numSlices": 2}]},
        "status": {"terminalState": "Failed"},
    }


def test_create_failure_carries_a_warning_events_words() -> None:
    """pathwaysjob_controller.go gives terminalState Failed only; a Warning event (e.g. from a
    controller that records one) supplies the reason."""
    from airflow_provider_pathways.gke.status import summarize

    event = {
        "type": "Warning",
        "reason": "FailedCreate",
        "message": 'admission webhook "x" denied the request: quota',
        "involvedObject": {"kind": "PathwaysJob", "name": "train"},
    }
    status = summarize(
        name="train", namespace=NS, pathways_job=_pathways_job("train"), jobset=None, events=[event]
    )
    assert status.failure is FailureClass.INFRASTRUCTURE
    assert status.message.endswith('FailedCreate: admission webhook "x" denied the request: quota')
    rejected = summarize(name="train", namespace=NS, pathways_job=_pathways_job("train", "3x3"), jobset=None)
    assert rejected.failure is FailureClass.SPEC_REJECTED and "'3x3'" in rejected.message


def _jobset(suspend: bool, conditions: list[dict[str, str]], labels: dict[str, str] | None = None) -> Any:
    return {
        "metadata": {
            "name": "train",
            "uid": "u1",
            "labels": labels or {},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"suspend": suspend, "replicatedJobs": [{"name": "worker", "replicas": 2}]},
        "status": {"conditions": conditions},
    }


def test_suspension_is_read_from_the_spec_and_kueue_from_the_label() -> None:
    """jobset_controller.go resumeJobsIfNecessary keeps Suspended True until every job started."""
    from airflow_provider_pathways.gke.status import summarize

    suspended = [{"type": "Suspended", "status": "True", "reason": "SuspendedJobs"}]
    resuming = summarize(
        name="train",
        namespace=NS,
        pathways_job=None,
        jobset=_jobset(False, suspended),
        expect_pathways_job=False,
    )
    assert resuming.phase is Phase.PENDING and resuming.failure is None
    held = summarize(
        name="train",
        namespace=NS,
        pathways_job=None,
        jobset=_jobset(True, suspended),
        expect_pathways_job=False,
    )
    assert held.phase is Phase.SUSPENDED and held.failure is FailureClass.PREEMPTED
    queued = summarize(
        name="train",
        namespace=NS,
        pathways_job=None,
        jobset=_jobset(True, suspended, {QUEUE: "multislice-queue"}),
        expect_pathways_job=False,
    )
    assert queued.phase is Phase.QUEUED and queued.failure is None
    assert queued.queued_since == "2026-01-01T00:00:00Z"  # no Workload yet: since the JobSet's creation
    assert "queued in LocalQueue multislice-queue for" in queued.progress()


# ---------------------------------------------------------------------- deletion and evictions


def _running_jobset(**metadata: Any) -> dict[str, Any]:
    jobset = _jobset(False, [{"type": "StartupPolicyCompleted", "status": "True"}])
    jobset["metadata"].update(metadata)
    jobset["status"]["replicatedJobsStatus"] = [
        {"name": "worker", "ready": 2, "active": 2},
        {"name": "pathways-head", "ready": 1, "active": 1},
    ]
    return jobset


def test_a_job_with_a_deletion_timestamp_is_terminating_not_running() -> None:
    """jobset_controller.go does not reconcile a JobSet marked for deletion, so its status keeps
    its last ready counts; pathwaysjob_controller.go keeps a PathwaysJob's terminalState empty."""
    from airflow_provider_pathways.gke.status import judge_status, summarize
    from airflow_provider_pathways.reattach_rules import ReattachAction, reattach_action

    stamp = "2026-01-01T00:05:00Z"
    held = summarize(
        name="train",
        namespace=NS,
        pathways_job=None,
        jobset=_running_jobset(deletionTimestamp=stamp),
        expect_pathways_job=False,
    )
    assert held.phase is Phase.TERMINATING and held.terminal
    assert held.failure is FailureClass.INFRASTRUCTURE and stamp in held.message
    assert reattach_action(judge_status(held)) is ReattachAction.REPLACE
    pathways_job = _pathways_job("train") | {"status": {}}
    pathways_job["metadata"] = {"name": "train", "deletionTimestamp": stamp}
    for jobset in (None, _running_jobset()):
        status = summarize(name="train", namespace=NS, pathways_job=pathways_job, jobset=jobset)
        assert status.phase is Phase.TERMINATING, jobset
    refused = _pathways_job("train", "3x3")
    refused["metadata"]["deletionTimestamp"] = stamp
    status = summarize(name="train", namespace=NS, pathways_job=refused, jobset=None)
    assert status.failure is FailureClass.SPEC_REJECTED  # an end reached before the deletion stands
    done = _jobset(False, [{"type": "Completed", "status": "True"}])
    done["metadata"]["deletionTimestamp"] = stamp
    ended = summarize(name="train", namespace=NS, pathways_job=None, jobset=done, expect_pathways_job=False)
    assert ended.phase is Phase.SUCCEEDED  # what it did before someone deleted it stands


def test_a_deleted_job_is_an_infrastructure_failure() -> None:
    from airflow_provider_pathways.gke.status import summarize

    gone = summarize(name="train", namespace=NS, pathways_job=None, jobset=None)
    assert gone.phase is Phase.DELETED and gone.failure is FailureClass.INFRASTRUCTURE
    assert "someone else deleted it" in gone.message


def test_a_completed_pathways_job_whose_jobset_is_gone_succeeded() -> None:
    """pathwaysjob_controller.go mirrors Completed into terminalState; without the JobSet the job
    is not pending (a wait on it would never end)."""
    from airflow_provider_pathways.gke.status import summarize

    pathways_job = _pathways_job("train") | {"status": {"terminalState": "Completed"}}
    status = summarize(name="train", namespace=NS, pathways_job=pathways_job, jobset=None)
    assert status.phase is Phase.SUCCEEDED
    # its end, as the controller copied the JobSet's Completed condition (makeCompletedCondition
    # keeps LastTransitionTime): a watcher that first looks now still knows when it ended
    completed = {"type": "Completed", "status": "True", "lastTransitionTime": "2026-12-01T10:00:05Z"}
    pathways_job["status"]["conditions"] = [completed]
    status = summarize(name="train", namespace=NS, pathways_job=pathways_job, jobset=None)
    assert (status.ended_at, status.ready_at, status.started_at) == ("2026-12-01T10:00:05Z", None, None)


def _failed_with(pods: list[dict[str, Any]], events: list[dict[str, Any]] | None = None) -> Any:
    from airflow_provider_pathways.gke.status import summarize

    jobset = _jobset(False, [{"type": "Failed", "status": "True", "reason": "FailedJobs"}])
    return summarize(
        name="train",
        namespace=NS,
        pathways_job=None,
        jobset=jobset,
        pods=pods,
        events=events or [],
        expect_pathways_job=False,
    )


def _evicted_pod(message: str, *, disruption: bool) -> dict[str, Any]:
    conditions = (
        [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": message}]
        if disruption
        else []
    )
    return {
        "metadata": {"name": "train-worker-0-0-abcde"},
        "status": {"phase": "Failed", "reason": "Evicted", "message": message, "conditions": conditions},
    }


@pytest.mark.parametrize(
    ("message", "disruption", "failure"),
    [
        # kubelet eviction/helpers.go: local storage evictions (no DisruptionTarget)
        ('Container main exceeded its local ephemeral storage limit "1Gi". ', False, "user_program_failed"),
        (
            "Pod ephemeral local storage usage exceeds the total limit of containers 2Gi. ",
            False,
            "user_program_failed",
        ),
        ('Usage of EmptyDir volume "scratch" exceeds the limit "1Gi". ', False, "user_program_failed"),
        # node-pressure evictions (DisruptionTarget TerminationByKubelet): the pod's own overuse ...
        (
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container "
            "pathways-worker was using 90Gi, which exceeds its request of 64Gi. ",
            True,
            "user_program_failed",
        ),
        # ... or the node's trouble
        ("The node had condition: [DiskPressure]. ", True, "preempted"),
    ],
)
def test_a_kubelet_eviction_for_the_pods_own_usage_is_the_programs_failure(
    message: str, disruption: bool, failure: str
) -> None:
    status = _failed_with([_evicted_pod(message, disruption=disruption)])
    assert status.failure is FailureClass(failure), status.message
    gone = _failed_with(
        [],
        [
            {
                "reason": "Evicted",
                "type": "Warning",
                "message": message,
                "involvedObject": {"kind": "Pod", "name": "train-worker-0-0-abcde"},
                "lastTimestamp": "2026-01-01T00:01:00Z",
            }
        ],
    )
    assert gone.failure is FailureClass(failure), gone.message  # the pod is gone, its event is left


def test_a_ready_wait_fails_for_a_job_that_ended_first() -> None:
    from airflow_provider_pathways.gke.status import PathwaysJobStatus, ended_before_ready, wait_succeeded

    done = PathwaysJobStatus(name="train", namespace=NS, phase=Phase.SUCCEEDED)
    assert not wait_succeeded(done, "ready") and "before it was seen ready" in str(
        ended_before_ready(done, "ready")
    )
    assert wait_succeeded(done, "finished") and ended_before_ready(done, "finished") is None
    running = PathwaysJobStatus(name="train", namespace=NS, phase=Phase.RUNNING, head_ready=True)
    assert wait_succeeded(running, "ready") and not wait_succeeded(running, "finished")


# ---------------------------------------------------------------- Kueue's waitForPodsReady timeout
# Workloads shaped as Kueue writes them (kueue workload_types.go: the Evicted, Requeued, PodsReady
# and QuotaReserved conditions, status.requeueState, status.schedulingStats.evictions by reason and
# underlyingCause).


def _stamp(seconds_ago: float) -> str:
    from datetime import datetime, timedelta, timezone

    moment = datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _kueue_workload(
    evicted_reason: str,
    evictions: list[tuple[str, str, int]] | None,
    *,
    created: str,
    evicted_at: str,
    requeues: int = 0,
    requeue_at: str | None = None,
    active: bool = True,
) -> dict[str, Any]:
    message = {
        "PodsReadyTimeout": f"Exceeded the PodsReady timeout {NS}/jobset-train-1a2b3",
        "Preempted": "Preempted to accommodate a workload (UID: x, JobUID: y) due to prioritization in "
        "the ClusterQueue",
        "DeactivatedDueToRequeuingLimitExceeded": "The workload is deactivated due to exceeding the "
        "maximum number of re-queuing retries",
    }[evicted_reason]

    def cond(type_: str, status: str, reason: str, text: str, when: str = evicted_at) -> dict[str, Any]:
        return {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": text,
            "lastTransitionTime": when,
        }

    status: dict[str, Any] = {
        "conditions": [
            cond("QuotaReserved", "False", "Pending", message),
            cond("Admitted", "False", "NoReservation", "The workload has no reservation"),
            cond("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded", created),
            cond("Evicted", "True", evicted_reason, message),
            cond("Requeued", "False" if evicted_reason != "Preempted" else "True", evicted_reason, message),
        ]
    }
    if requeues:
        status["requeueState"] = {"count": requeues, **({"requeueAt": requeue_at} if requeue_at else {})}
    if evictions is not None:
        status["schedulingStats"] = {
            "evictions": [{"reason": r, "underlyingCause": c, "count": n} for r, c, n in evictions]
        }
    return {
        "metadata": {
            "name": "jobset-train-1a2b3",
            "creationTimestamp": created,
            "ownerReferences": [{"kind": "JobSet", "name": "train", "uid": "u1"}],
        },
        "spec": {"active": active, "queueName": "multislice-queue"},
        "status": status,
    }


def _queued_with(workload: dict[str, Any]) -> Any:
    from airflow_provider_pathways.gke.status import summarize

    jobset = _jobset(True, [{"type": "Suspended", "status": "True"}], {QUEUE: "multislice-queue"})
    return summarize(
        name="train",
        namespace=NS,
        pathways_job=None,
        jobset=jobset,
        workloads=[workload],
        expect_pathways_job=False,
    )


def test_a_job_evicted_before_it_ever_started_is_queued_since_its_first_queueing() -> None:
    """Kueue 0.19's waitForPodsReady: an admitted Workload whose pods are not all ready in time is
    evicted (workload_types.go WorkloadEvictedByPodsReadyTimeout, from WaitForStart) and requeued
    with backoff (RequeueState). It never ran: not a preemption, not the program's failure; its
    time admitted without ready pods was waiting, so queue_timeout counts from its first queueing."""
    from airflow_provider_pathways.gke.status import judge_status, queue_time_left
    from airflow_provider_pathways.reattach_rules import Verdict

    created, evicted_at = _stamp(3600), _stamp(30)
    workload = _kueue_workload(
        "PodsReadyTimeout",
        [("PodsReadyTimeout", "WaitForStart", 2)],
        created=created,
        evicted_at=evicted_at,
        requeues=2,
        requeue_at=_stamp(-90),
    )
    status = _queued_with(workload)
    assert status.phase is Phase.QUEUED and status.failure is None and not status.terminal
    assert status.message.startswith(
        "did not start within Kueue's waitForPodsReady timeout (PodsReadyTimeout: Exceeded the PodsReady "
        f"timeout {NS}/jobset-train-1a2b3); requeued 2 times (Kueue's backoff holds it until "
    )
    assert status.message.endswith("), waiting to be admitted again")
    assert "after it ran" not in status.message and "preempt" not in status.message
    assert status.queued_since == created  # the Workload's creation, not the last eviction
    assert queue_time_left(status, 1800) == 0  # an hour since the first queueing; 30 s since eviction
    assert judge_status(status).verdict is Verdict.ACTIVE and not judge_status(status).suspended
    assert "queued in LocalQueue multislice-queue for 1 h 0 min" in status.progress()
    # once the backoff is over (requeueAt cleared), still counted from the first queueing
    del workload["status"]["requeueState"]["requeueAt"]
    again = _queued_with(workload)
    assert again.queued_since == created
    assert "requeued 2 times, waiting to be admitted again" in again.message


@pytest.mark.parametrize(
    ("evicted_reason", "evictions", "says"),
    [
        # preempted after it ran: the clock starts at that eviction, as before
        ("Preempted", [("Preempted", "", 1)], "evicted by Kueue after it ran (Preempted: "),
        # it had run (a pod failed and the pods did not recover in time: WaitForRecovery)
        (
            "PodsReadyTimeout",
            [("PodsReadyTimeout", "WaitForRecovery", 1)],
            "evicted by Kueue: its pods were not all ready within Kueue's waitForPodsReady timeout",
        ),
        # evicted for PodsReadyTimeout after an earlier preemption: it may have run
        (
            "PodsReadyTimeout",
            [("Preempted", "", 1), ("PodsReadyTimeout", "WaitForStart", 1)],
            "evicted by Kueue: its pods were not all ready",
        ),
        # Kueue before 0.14 counts no evictions: nothing says it never ran
        ("PodsReadyTimeout", None, "evicted by Kueue: its pods were not all ready"),
    ],
)
def test_a_job_that_may_have_run_is_queued_since_its_last_eviction(
    evicted_reason: str, evictions: list[tuple[str, str, int]] | None, says: str
) -> None:
    """workload_types.go: only PodsReadyTimeout evictions from WaitForStart (pods not all ready since
    admission) say the job never ran; after any other, queue_timeout counts from the last eviction
    (QuotaReserved False's lastTransitionTime)."""
    from airflow_provider_pathways.gke.status import queue_time_left

    evicted_at = _stamp(30)
    status = _queued_with(
        _kueue_workload(evicted_reason, evictions, created=_stamp(3600), evicted_at=evicted_at, requeues=1)
    )
    assert status.phase is Phase.QUEUED and status.failure is None
    assert says in status.message, status.message
    assert status.queued_since == evicted_at
    assert queue_time_left(status, 1800) > 1700


def test_a_deactivation_after_pods_ready_timeouts_says_the_job_never_started() -> None:
    """workload_types.go WorkloadRequeuingLimitExceeded: after backoffLimitCount requeues Kueue
    deactivates the Workload (spec.active false, Evicted DeactivatedDueToRequeuingLimitExceeded,
    requeueState cleared): an infrastructure failure (retried with a fresh job)."""
    from airflow_provider_pathways.gke.status import judge_status
    from airflow_provider_pathways.reattach_rules import Verdict

    never = _kueue_workload(
        "DeactivatedDueToRequeuingLimitExceeded",
        [("PodsReadyTimeout", "WaitForStart", 3), ("Deactivated", "RequeuingLimitExceeded", 1)],
        created=_stamp(7200),
        evicted_at=_stamp(10),
        active=False,
    )
    status = _queued_with(never)
    assert status.phase is Phase.FAILED and status.failure is FailureClass.INFRASTRUCTURE
    assert "Kueue deactivated the workload (DeactivatedDueToRequeuingLimitExceeded: " in status.message
    assert "the job never started: its pods were not all ready within Kueue's waitForPodsReady timeout" in (
        status.message
    )
    assert "(3 PodsReadyTimeout evictions)" in status.message
    assert judge_status(status).verdict is Verdict.FAILED
    ran = _kueue_workload(
        "DeactivatedDueToRequeuingLimitExceeded",
        [("PodsReadyTimeout", "WaitForRecovery", 3), ("Deactivated", "RequeuingLimitExceeded", 1)],
        created=_stamp(7200),
        evicted_at=_stamp(10),
        active=False,
    )
    status = _queued_with(ran)
    assert status.failure is FailureClass.INFRASTRUCTURE and "never started" not in status.message


def test_a_pods_ready_timeout_is_no_preemption_evidence() -> None:
    """A failed JobSet whose Workload Kueue evicted for PodsReadyTimeout was not preempted by it
    (workload_types.go: WorkloadEvictedByPodsReadyTimeout is waitForPodsReady giving up on a start);
    a preemption eviction is evidence."""
    from airflow_provider_pathways.gke.status import summarize

    def failed(workload: dict[str, Any]) -> Any:
        jobset = _jobset(False, [{"type": "Failed", "status": "True", "reason": "FailedJobs"}])
        return summarize(
            name="train",
            namespace=NS,
            pathways_job=None,
            jobset=jobset,
            workloads=[workload],
            expect_pathways_job=False,
        )

    timed_out = _kueue_workload(
        "PodsReadyTimeout",
        [("PodsReadyTimeout", "WaitForStart", 1)],
        created=_stamp(60),
        evicted_at=_stamp(5),
    )
    assert failed(timed_out).failure is not FailureClass.PREEMPTED
    preempted = _kueue_workload("Preempted", [("Preempted", "", 1)], created=_stamp(60), evicted_at=_stamp(5))
    assert failed(preempted).failure is FailureClass.PREEMPTED


def test_a_job_whose_pods_never_become_ready_is_requeued_not_failed(hook: PathwaysJobHook) -> None:
    """The stand-in's Kueue runs waitForPodsReady (here with a 0.5 s timeout): the job is admitted,
    its workers never become ready (max-ready-slices 0), Kueue evicts it for PodsReadyTimeout
    (workload_types.go) and requeues it: queued, since the Workload's creation."""
    spec = queued_spec(
        f"q-{uuid.uuid4().hex[:6]}",
        max_ready_slices=0,
        kueue_pods_ready_timeout_seconds=0.5,
        kueue_backoff_base_seconds=30,
    )
    hook.create_job(spec.to_pathwaysjob(), NS)
    status = status_when(
        hook, spec.name, lambda s: s.phase is Phase.QUEUED and "PodsReadyTimeout" in s.message, "eviction"
    )
    assert status.failure is None and not status.terminal
    assert status.message.startswith(
        "did not start within Kueue's waitForPodsReady timeout (PodsReadyTimeout"
    )
    assert "requeued 1 time (Kueue's backoff holds it until " in status.message
    jobset = hook.get_object(JobKind.JOBSET.resource, spec.name, NS)
    assert jobset is not None
    (workload,) = hook.list_workloads(spec.name, NS, jobset)
    assert status.queued_since == workload["metadata"]["creationTimestamp"]
    hook.delete_job(spec.name, NS)
