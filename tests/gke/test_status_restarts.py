"""How a restarting JobSet reads (JobSet v0.12): the ``RestartingJobSet`` condition, Jobs restarted
alone, slices counted as the controller counts them. Plain dicts shaped like the API objects; one
test reads a restart through the hook from the Kubernetes stand-in. Each test names the upstream
file and function (kubernetes-sigs/jobset v0.12.0) behind the rule."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_pathways.gke.objects import StatusOptions
from airflow_provider_pathways.gke.status import (
    Phase,
    job_restarts,
    judge_status,
    summarize,
    wait_is_over,
)
from airflow_provider_pathways.reattach_rules import FailureClass, Verdict

RESTART_MESSAGE = "applying RestartJobSet failure policy action (first failed job: train-worker-1)"
RESTARTING = {
    "type": "RestartingJobSet",
    "status": "True",
    "reason": "DefaultFailurePolicy",
    "message": RESTART_MESSAGE,
    "lastTransitionTime": "2026-06-01T00:01:00Z",
}
READY_AGAIN = dict(RESTARTING, status="False", reason="JobsReady", message="all jobs are ready")
STARTED = {"type": "StartupPolicyCompleted", "status": "True", "lastTransitionTime": "2026-06-01T00:00:30Z"}


def _rjob(name: str, ready: int = 0, failed: int = 0, active: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "ready": ready,
        "succeeded": 0,
        "failed": failed,
        "active": active,
        "suspended": 0,
        **extra,
    }


def _jobset(
    conditions: list[dict[str, Any]],
    head: dict[str, Any],
    worker: dict[str, Any],
    *,
    restarts: int = 1,
    replicas: int = 2,
    parallelism: int = 4,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "train", "uid": "u1", "creationTimestamp": "2026-06-01T00:00:00Z"},
        "spec": {
            "replicatedJobs": [
                {"name": "pathways-head", "replicas": 1},
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {"spec": {"parallelism": parallelism, "completions": parallelism}},
                },
            ]
        },
        "status": {"restarts": restarts, "conditions": conditions, "replicatedJobsStatus": [head, worker]},
    }


def _read(jobset: dict[str, Any]) -> Any:
    return summarize(
        name="train", namespace="ml", pathways_job=None, jobset=jobset, expect_pathways_job=False
    )


def test_a_restarting_jobset_is_active_and_the_replaced_attempt_is_not_ready() -> None:
    """failure_policy.go restartJobSetActionApplier sets RestartingJobSet True in the reconcile whose
    replicatedJobsStatus was counted before the restart (jobset_controller.go reconcile:
    calculateReplicatedJobStatuses, then executeFailurePolicy, one status update): the failed Job
    is in those counts, and every Job counted is about to be deleted."""
    jobset = _jobset(
        [STARTED, RESTARTING],
        _rjob("pathways-head", ready=1, active=1),
        _rjob("worker", 1, failed=1, active=1),
    )
    status = _read(jobset)
    assert (status.phase, status.slices_ready, status.slices_total, status.head_ready) == (
        Phase.STARTING,
        0,
        2,
        False,
    )
    assert status.failure is None and not status.terminal
    assert status.message == f"the JobSet is restarting (DefaultFailurePolicy: {RESTART_MESSAGE})"
    assert "RestartingJobSet" in status.conditions
    judgement = judge_status(status)
    assert judgement.verdict is Verdict.ACTIVE
    assert "slices ready 0/2; head not ready; restarts 1; phase starting: the JobSet is restarting" in (
        judgement.message
    )
    assert not wait_is_over(status, wait_until="ready", min_slices=1, fail_on_suspend=True)
    assert not wait_is_over(status, wait_until="finished", min_slices=None, fail_on_suspend=True)


def test_a_restarting_jobset_reads_what_its_new_attempt_has_ready() -> None:
    """jobset_controller.go getChildJobs counts only Jobs of the current restart attempt, and
    RestartingJobSet stays True until allJobsReady: slices of the new attempt read ready meanwhile."""
    jobset = _jobset(
        [STARTED, RESTARTING], _rjob("pathways-head", ready=1, active=1), _rjob("worker", 1, active=2)
    )
    status = _read(jobset)
    assert (status.phase, status.slices_ready, status.head_ready) == (Phase.STARTING, 1, True)
    assert status.ready_for(1) and not status.ready_for(2)
    assert wait_is_over(status, wait_until="ready", min_slices=1, fail_on_suspend=True)


def test_running_once_restarting_is_false_again() -> None:
    """jobset_controller.go reconcile: RestartingJobSet False, reason JobsReady, once allJobsReady
    (setRestartingConditionFalse); until then the JobSet is not running, whatever it counts."""
    head, worker = _rjob("pathways-head", ready=1, active=1), _rjob("worker", 2, active=2)
    still = _read(_jobset([STARTED, RESTARTING], head, worker))
    assert still.phase is Phase.STARTING and still.slices_ready == 2
    again = _read(_jobset([STARTED, READY_AGAIN], head, worker))
    assert (again.phase, again.slices_ready, again.message) == (Phase.RUNNING, 2, "")
    assert "RestartingJobSet" not in again.conditions


def test_a_restart_that_reached_the_limit_is_a_failure() -> None:
    """failure_policy.go setJobSetFailedCondition: Failed True, RestartingJobSet False JobSetFailed."""
    message = "jobset failed due to reaching max number of restarts (first failed job: train-worker-0)"
    failed = {"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts", "message": message}
    ended = dict(RESTARTING, status="False", reason="JobSetFailed", message="jobset failed")
    jobset = _jobset([STARTED, ended, failed], _rjob("pathways-head"), _rjob("worker", failed=1))
    jobset["status"]["terminalState"] = "Failed"
    status = _read(jobset)
    assert status.phase is Phase.FAILED and status.failure is FailureClass.MAX_RESTARTS_REACHED


def test_jobs_restarted_alone_count_as_restarts() -> None:
    """jobset_types.go ReplicatedJobStatus.jobRestarts: restarts of single Jobs by RestartJob and
    RestartJobAndIgnoreMaxRestarts (failure_policy.go failurePolicyRecreateJob), which leave
    status.restarts and the RestartingJobSet condition alone."""
    worker = _rjob("worker", 2, active=2, jobRestarts=[0, 2], jobRestartsCountTowardsMax=[0, 1])
    jobset = _jobset([STARTED], _rjob("pathways-head", ready=1, active=1), worker, restarts=1)
    assert job_restarts(jobset["status"]) == 2
    status = _read(jobset)
    assert (status.phase, status.restarts) == (Phase.RUNNING, 3)
    assert "restarts 3; phase running" in status.progress()


@pytest.mark.parametrize(("replicas", "ready", "expected"), [(2, 1, (1, 2)), (3, 3, (3, 3)), (2, 3, (2, 2))])
def test_slices_follow_the_replicas_and_the_jobs_ready_now(
    replicas: int, ready: int, expected: tuple[int, int]
) -> None:
    """jobset_controller.go calculateReplicatedJobStatuses counts a Job ready when its ready and
    succeeded pods reach min(parallelism, completions) of the Job as it is now, so a slice whose
    Job an elastic JobSet (ElasticJobSet, syncJobScaling) scaled up is not ready until its new pods
    are; slices are the worker replicated job's replicas in the spec (jobset_webhook.go
    ValidateUpdate keeps replicas immutable in v0.12), never more than that are ready."""
    head, worker = _rjob("pathways-head", ready=1, active=1), _rjob("worker", ready, active=replicas)
    jobset = _jobset([STARTED], head, worker, restarts=0, replicas=replicas, parallelism=8)
    status = _read(jobset)
    assert (status.slices_ready, status.slices_total) == expected


def test_the_hook_reads_a_restart_under_way_from_the_cluster(kube: Any) -> None:
    """jobset_controller.go: RestartingJobSet stays True while a Job of the new attempt is not
    ready (here a slice that is never scheduled); the hook reads the job as starting, the restart
    counted and named."""
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
    from tests.support.kube_jobs import CONN, new_spec, wait_for

    namespace = "restart-tests"
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    spec = new_spec(namespace, max_restarts=1, program_seconds=30, max_ready_slices=1)
    hook.create_job(spec.to_pathwaysjob(), namespace)
    try:
        wait_for(
            lambda: hook.get_status(spec.name, namespace, StatusOptions()).slices_ready == 1, what="slice 0"
        )
        kube.action(namespace, spec.name, "preempt-slice", slice=0)
        status = wait_for(
            lambda: (
                (s := hook.get_status(spec.name, namespace, StatusOptions())).restarts == 1
                and s.slices_ready == 1
                and s
            ),
            what="slice 0 up again after the restart",
        )
        assert status.phase is Phase.STARTING and status.head_ready and not status.terminal
        assert status.message == (
            "the JobSet is restarting (DefaultFailurePolicy: applying RestartJobSet failure policy action "
            f"(first failed job: {spec.name}-worker-0))"
        )
        assert judge_status(status).verdict is Verdict.ACTIVE
    finally:
        hook.delete_job(spec.name, namespace)
