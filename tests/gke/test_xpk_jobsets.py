"""A JobSet xpk made (``xpk workload create-pathways``, xpk 1.13.1: a plain JobSet, no PathwaysJob)
is read right. Its shape, from xpk's ``pathways_workload_create.yaml.j2`` and
``src/xpk/commands/workload.py``: the program runs in the head pod's container named after
``--docker-name`` (``jax-tpu`` by default, ``docker_container.py``); the IFRT proxy and resource
manager are native sidecars (init containers with ``restartPolicy: Always``); the JobSet's
``failurePolicy`` has no ``maxRestarts`` (0: the first failed Job ends it); a headless workload's
head runs only the components. Plain dicts shaped like the API objects."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_pathways.gke.objects import JobKind, StatusOptions, log_pods, program_container
from airflow_provider_pathways.gke.status import summarize
from airflow_provider_pathways.reattach_rules import FailureClass

NAME = "xpk-train"
OPTIONS = StatusOptions(kind=JobKind.JOBSET)
HEAD, WORKER = "pathways-head", "worker"
SIDECARS = [
    {"name": "pathways-proxy", "restartPolicy": "Always"},
    {"name": "pathways-rm", "restartPolicy": "Always"},
]


def head_template(program: str | None = "jax-tpu") -> dict[str, Any]:
    if program is None:  # headless: the components are the pod's containers
        return {"spec": {"containers": [{"name": c["name"]} for c in SIDECARS], "restartPolicy": "Never"}}
    return {"spec": {"initContainers": SIDECARS, "containers": [{"name": program}], "restartPolicy": "Never"}}


def jobset(program: str | None = "jax-tpu", *, failed: dict[str, Any] | None = None) -> dict[str, Any]:
    conditions = [{"type": "Failed", "status": "True", **failed}] if failed else []
    return {
        "metadata": {"name": NAME, "uid": "u1", "creationTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {
            "failurePolicy": {"restartStrategy": "Recreate"},  # no maxRestarts, as xpk renders it
            "replicatedJobs": [
                {"name": HEAD, "replicas": 1, "template": {"spec": {"template": head_template(program)}}},
                {"name": WORKER, "replicas": 2, "template": {"spec": {"parallelism": 1, "completions": 1}}},
            ],
        },
        "status": {"restarts": 0, "conditions": conditions},
    }


def running(name: str) -> dict[str, Any]:
    return {"name": name, "restartCount": 0, "state": {"running": {"startedAt": "2026-12-01T00:01:00Z"}}}


def ended(name: str, code: int, at: str, reason: str = "Error", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "state": {"terminated": {"exitCode": code, "reason": reason, "finishedAt": at}},
        **extra,
    }


def head_pod(
    containers: list[dict[str, Any]], init: list[dict[str, Any]], program: str = "jax-tpu"
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{NAME}-{HEAD}-0-0-abcde",
            "labels": {"jobset.sigs.k8s.io/replicatedjob-name": HEAD},
            "creationTimestamp": "2026-12-01T00:00:30Z",
        },
        "spec": {"initContainers": SIDECARS, "containers": [{"name": program}]},
        "status": {"phase": "Failed", "containerStatuses": containers, "initContainerStatuses": init},
    }


FAILED = {"reason": "FailedJobs", "message": f"jobset {NAME} failed (first failed job: {NAME}-{HEAD}-0)"}


def read(obj: dict[str, Any], **details: Any) -> Any:
    return summarize(
        name=NAME, namespace="ml", pathways_job=None, jobset=obj, expect_pathways_job=False, **details
    )


def test_the_program_container_is_the_head_pods_one_that_is_no_pathways_component() -> None:
    pod = head_pod([], [])
    assert program_container(pod, "main") == "jax-tpu"  # xpk's default --docker-name
    assert program_container(pod, "jax-tpu") == "jax-tpu"
    assert log_pods([pod], "main") == [(f"{NAME}-{HEAD}-0-0-abcde", "jax-tpu")]
    worker = {"spec": {"containers": [{"name": "pathways-worker"}]}}
    assert program_container(worker, "main") is None and log_pods([worker], "main") == []


def test_a_failing_program_in_xpks_container_is_the_users_with_its_exit_code() -> None:
    """Sidecars the kubelet stopped after the program ended (SIGTERM, 143, the same second or later)
    are no failure of theirs."""
    pod = head_pod(
        [ended("jax-tpu", 1, "2026-12-01T00:05:00Z")],
        [
            ended("pathways-proxy", 143, "2026-12-01T00:05:01Z"),
            ended("pathways-rm", 143, "2026-12-01T00:05:00Z"),
        ],
    )
    status = read(jobset(failed=FAILED), pods=[pod], log_tail="ValueError: bad config")
    assert status.failure is FailureClass.USER_PROGRAM_FAILED and status.exit_code == 1
    assert "the user program (container 'jax-tpu') exited with code 1" in status.message


def test_a_sidecar_that_crashed_while_serving_is_an_infrastructure_failure() -> None:
    """The proxy, OOMKilled and restarted by the kubelet (native sidecar: only its
    initContainerStatuses say so); the program then lost its backend and failed."""
    proxy = {**running("pathways-proxy"), "restartCount": 1}
    proxy["lastState"] = {
        "terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-12-01T00:04:00Z"}
    }
    pod = head_pod([ended("jax-tpu", 1, "2026-12-01T00:04:02Z")], [proxy, running("pathways-rm")])
    status = read(jobset(failed=FAILED), pods=[pod])
    assert status.failure is FailureClass.INFRASTRUCTURE
    assert "the Pathways IFRT proxy (container 'pathways-proxy'" in status.message
    assert "exit code 137 (OOMKilled); raise its memory limit" in status.message
    assert (
        "the program then failed: the user program (container 'jax-tpu') exited with code 1" in status.message
    )
    # a resource manager that ended with an error before the program did
    early = head_pod(
        [ended("jax-tpu", 1, "2026-12-01T00:04:09Z")],
        [running("pathways-proxy"), ended("pathways-rm", 1, "2026-12-01T00:04:00Z")],
    )
    assert "the Pathways resource manager" in read(jobset(failed=FAILED), pods=[early]).message


def test_a_headless_heads_failure_is_the_components_not_a_program() -> None:
    head_job = {
        "metadata": {"name": f"{NAME}-{HEAD}-0", "labels": {"jobset.sigs.k8s.io/replicatedjob-name": HEAD}},
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]},
    }
    status = read(jobset(program=None, failed=FAILED), jobs=[head_job])
    assert status.failure is FailureClass.INFRASTRUCTURE
    assert "headless job (only the Pathways components) failed (BackoffLimitExceeded)" in status.message
    with_program = read(jobset(failed=FAILED), jobs=[head_job])
    assert with_program.failure is FailureClass.USER_PROGRAM_FAILED  # its pods are gone: the program's


def test_a_worker_failure_without_restarts_allowed_is_infrastructure_not_used_up_restarts() -> None:
    """xpk's JobSet has no maxRestarts: JobSet fails it at the first failed Job with
    ``ReachedMaxRestarts`` (failure_policy.go restartJobSetActionApplier), though no restart was
    used; a slice's workers failing past their backoffLimit is the cluster's trouble, retried."""
    worker_job = {
        "metadata": {
            "name": f"{NAME}-{WORKER}-1",
            "labels": {"jobset.sigs.k8s.io/replicatedjob-name": WORKER},
        },
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ]
        },
    }
    reached = {
        "reason": "ReachedMaxRestarts",
        "message": f"jobset failed (first failed job: {NAME}-{WORKER}-1)",
    }
    status = read(jobset(failed=reached), jobs=[worker_job])
    assert status.failure is FailureClass.INFRASTRUCTURE and status.failure.retryable
    assert f"worker job {NAME}-{WORKER}-1 failed (BackoffLimitExceeded" in status.message
    assert "allows no restarts" in status.message
    used_up = jobset(failed=reached)
    used_up["spec"]["failurePolicy"]["maxRestarts"] = 3
    assert read(used_up, jobs=[worker_job]).failure is FailureClass.MAX_RESTARTS_REACHED


def as_xpk_made(jobset_object: dict[str, Any]) -> dict[str, Any]:
    """A JobSet reshaped as xpk 1.13.1 renders one (see the module's docstring): the program's
    container ``jax-tpu``, no ``maxRestarts``, the queue and workload labels on the JobSet."""
    made = dict(jobset_object)
    made["metadata"] = {
        **made["metadata"],
        "labels": {"xpk.google.com/workload": made["metadata"]["name"]},
    }
    spec = made["spec"]
    spec["failurePolicy"] = {"restartStrategy": "Recreate"}
    for replicated in spec["replicatedJobs"]:
        pod = replicated["template"]["spec"]["template"]["spec"]
        for container in pod.get("containers") or []:
            if container["name"] == "main":
                container["name"] = "jax-tpu"
    return made


@pytest.mark.usefixtures("kube")
def test_a_sensor_reads_a_failing_program_of_an_xpk_jobset_in_the_stand_in() -> None:
    """Against the Kubernetes stand-in, whose kubelet runs the program in the head pod's container
    that is no Pathways component: the sensor's failure names xpk's container, the exit code and the
    program's last log line (before, neither was found: "the exit code is unknown")."""
    from airflow_provider_pathways.failures import PathwaysUserProgramFailed
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
    from airflow_provider_pathways.sensors.pathways_job import PathwaysJobReadySensor
    from tests.support.kube_jobs import CONN, new_spec, wait_for

    namespace = "xpk-made"
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    spec = new_spec(namespace, program_exit_code=3, program_seconds=0.2)
    hook.create_job(as_xpk_made(spec.to_jobset()), namespace)
    wait_for(
        lambda: hook.get_status(spec.name, namespace, OPTIONS).terminal, what="the job to fail", timeout=30
    )
    sensor = PathwaysJobReadySensor(
        task_id="ready", job_name=spec.name, namespace=namespace, kind="JobSet", kubernetes_conn_id=CONN
    )
    with pytest.raises(PathwaysUserProgramFailed) as failed:
        sensor.poke({})  # type: ignore[arg-type]
    text = str(failed.value)
    assert "the user program (container 'jax-tpu') exited with code 3" in text
    assert "the program failed with exit code 3" in hook.read_main_container_log(
        spec.name, namespace, options=OPTIONS
    )
    hook.delete_job(spec.name, namespace, JobKind.JOBSET)
