"""Slurm triggers and the readiness check on the real sandbox cluster, over REST and SSH."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import time
import uuid
from typing import Any

import pytest

from airflow_provider_pathways.hooks.slurm import SlurmHook
from airflow_provider_pathways.slurm.service import (
    ServiceProbe,
    check_pathways_service,
    service_worker_arrays,
)
from airflow_provider_pathways.triggers.slurm import PathwaysClusterEnvTrigger, SlurmJobTrigger
from sandbox.slurm.cluster import slurm_cli
from tests.support import slurm_scripts
from tests.triggers.killing import kill_as_the_triggerer_does

TRANSPORTS = ["slurm_rest", "slurm_ssh"]


def rebuild(trigger: Any) -> Any:
    path, kwargs = trigger.serialize()
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)(**kwargs)


def test_triggers_round_trip_exactly() -> None:
    job = SlurmJobTrigger(
        job_id=12, slurm_conn_id="c", poll_interval=2.5, deadline=1.9e9, cancel_on_kill=False
    )
    env = PathwaysClusterEnvTrigger(
        service_job_id=7,
        slurm_conn_id="c",
        cluster_env_path="/shared/cluster.env",
        proxy_keys=["MY_PROXY"],
        min_slices=3,
        worker_array_job_id=8,
        poll_interval=1.0,
        deadline=1.9e9,
    )
    for trigger in (job, env):
        assert rebuild(trigger).serialize() == trigger.serialize()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"job_id": 0}, "job_id"),
        ({"job_id": "12"}, "job_id"),
        ({"job_id": 3, "poll_interval": 0}, "poll_interval"),
    ],
)
def test_invalid_trigger_arguments_are_refused(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SlurmJobTrigger(slurm_conn_id="c", **kwargs)


def scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, check=True).stdout


def array_states(array_id: int) -> dict[str, str]:
    out = subprocess.run(
        ["squeue", "-h", "-r", "-j", str(array_id), "-t", "all", "-o", "%K %T"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def wait(predicate: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def start_service(
    hook: SlurmHook, slurm_cluster: dict[str, str], name: str, *, min_slices: int, max_slices: int
) -> tuple[int, str]:
    """Submit the sandbox's ``start_pathways.sh`` writing its own ``cluster.env``; (job id, its path)."""
    env_path = f"{slurm_cluster['SLURM_SANDBOX_USER_HOME']}/pathways/tests/{uuid.uuid4().hex}.env"
    service = hook.submit_job(
        script_path=slurm_cluster["SLURM_SANDBOX_START_PATHWAYS_SCRIPT"],
        job_name=name,
        environment={
            "SLICE_SHAPE": "2x4",
            "MIN_SLICES": str(min_slices),
            "MAX_SLICES": str(max_slices),
            "GCS_BUCKET": "my-bucket",
            "PATHWAYS_CLUSTER_ENV": env_path,
        },
    )
    return service, env_path


@pytest.mark.slurm
@pytest.mark.parametrize("conn", TRANSPORTS)
def test_readiness_survives_losing_a_slice_above_min_and_waits_below_it(
    slurm_cluster: dict[str, str], conn: str
) -> None:
    hook = SlurmHook(slurm_conn_id=conn)
    service, env_path = start_service(
        hook, slurm_cluster, "pathways-service-test", min_slices=2, max_slices=3
    )

    def check() -> Any:
        async def look() -> Any:
            try:
                return await check_pathways_service(
                    hook, service, ServiceProbe(cluster_env_path=env_path, min_slices=2)
                )
            finally:
                await hook.a_close()

        return asyncio.run(look())

    try:
        first = wait(lambda: (c := check()).readiness.ready and c, "readiness")
        array = first.readiness.worker_array_job_id
        assert array and first.readiness.proxy_address.startswith("grpc://127.0.0.1:")
        wait(lambda: list(array_states(array).values()).count("RUNNING") == 3, "all 3 slices running")

        scontrol("requeue", f"{array}_0")  # a slice is preempted: 2 of 3 still run
        wait(lambda: array_states(array).get("0") != "RUNNING", "slice 0 requeued")
        still = check()
        assert still.readiness.ready, still.readiness.reason
        assert still.readiness.running_slices == 2

        scontrol("requeue", f"{array}_1")  # now below MIN_SLICES: the wait goes on
        wait(lambda: array_states(array).get("1") != "RUNNING", "slice 1 requeued")
        below = check()
        assert not below.readiness.ready
        assert "1 slices running, need 2" in below.readiness.reason
        assert not below.service_ended  # the service job keeps running while slices come and go
    finally:
        hook.cancel_job(service)


@pytest.mark.slurm
@pytest.mark.parametrize("conn", TRANSPORTS)
async def test_job_trigger_fires_at_the_end_and_on_kill_cancels_once(
    slurm_cluster: dict[str, str], conn: str
) -> None:
    hook = SlurmHook(slurm_conn_id=conn)
    quick = await hook.a_submit_job(script="#!/bin/bash\necho hi\n", job_name="trigger-test")
    events = [e async for e in SlurmJobTrigger(job_id=quick, slurm_conn_id=conn, poll_interval=0.2).run()]
    assert events[0].payload["status"] == "done"
    assert events[0].payload["job"]["state"] == "COMPLETED"

    slow = await hook.a_submit_job(script="#!/bin/bash\nsleep 300\n", job_name="trigger-kill")
    trigger = SlurmJobTrigger(job_id=slow, slurm_conn_id=conn, poll_interval=0.2)
    await kill_as_the_triggerer_does(trigger)  # cancelled again and again while on_kill runs
    await trigger.on_kill()  # already cancelled: harmless

    async def cancelled() -> bool:
        job = await hook.a_get_job(slow)
        return job is not None and job.state == "CANCELLED"

    deadline = time.monotonic() + 30
    while not await cancelled():
        assert time.monotonic() < deadline, "the job was not cancelled"
        await asyncio.sleep(0.1)
    await hook.a_close()


@pytest.mark.slurm
@pytest.mark.parametrize("conn", TRANSPORTS)
def test_killing_a_deferred_service_wait_cancels_the_service_and_its_worker_array(
    slurm_cluster: dict[str, str], conn: str
) -> None:
    hook = SlurmHook(slurm_conn_id=conn)
    service, env_path = start_service(
        hook, slurm_cluster, "pathways-service-kill", min_slices=3, max_slices=3
    )
    try:

        def array_running() -> int | None:
            check = hook.run_on_private_loop(
                lambda: check_pathways_service(
                    hook, service, ServiceProbe(cluster_env_path=env_path, min_slices=3)
                )
            )
            return check.readiness.worker_array_job_id if check.readiness.ready else None

        array = wait(array_running, "the worker array to run")
        kwargs: dict[str, Any] = {
            "service_job_id": service,
            "slurm_conn_id": conn,
            "cluster_env_path": env_path,
        }
        asyncio.run(PathwaysClusterEnvTrigger(**kwargs).on_kill())  # cancel_on_kill is off by default
        assert scontrol("show", "job", str(service)).count("JobState=RUNNING") == 1

        killed = PathwaysClusterEnvTrigger(cancel_on_kill=True, **kwargs)
        asyncio.run(killed.on_kill())
        asyncio.run(killed.on_kill())  # already cancelled: harmless
        wait(
            lambda: "JobState=CANCELLED" in scontrol("show", "job", str(service)),
            "the service to be cancelled",
        )
        wait(
            lambda: set(array_states(array).values()) <= {"CANCELLED"},
            "every worker slice to be cancelled",
        )
    finally:
        hook.cancel_job(service)
        hook.close()


@pytest.mark.slurm
@pytest.mark.parametrize("published", [False, True], ids=["sandbox-script", "published-script"])
@pytest.mark.parametrize("conn", TRANSPORTS)
def test_readiness_trigger_fires_ready_and_kill_cancels_the_array_it_found(
    slurm_cluster_version: dict[str, str], conn: str, published: bool
) -> None:
    """Seed 002: the address once MIN_SLICES slices run, the workers as a job array; the trigger
    reports that array, and killing the wait cancels it with the service job even when cluster.env
    does not name it."""
    scripts = slurm_scripts.copy_service_scripts(slurm_cluster_version)
    hook = SlurmHook(slurm_conn_id=conn)
    name = f"trigger-{uuid.uuid4().hex[:8]}"
    service, path = slurm_scripts.start_service(hook, scripts, name, published=published)
    kwargs: dict[str, Any] = {
        "service_job_id": service,
        "slurm_conn_id": conn,
        "cluster_env_path": path,
        "min_slices": 2,
        "poll_interval": 0.5,
        "deadline": time.time() + 90,
    }

    async def first_event() -> dict[str, Any]:
        async for event in PathwaysClusterEnvTrigger(**kwargs).run():
            return event.payload
        raise AssertionError("the trigger fired nothing")

    try:
        event = asyncio.run(first_event())
        assert event["status"] == "ready", event
        array = event["readiness"]["worker_array_job_id"]
        assert array == slurm_scripts.logged_array(scripts, service)
        assert event["readiness"]["running_slices"] == 2

        killed = PathwaysClusterEnvTrigger(cancel_on_kill=True, **kwargs)
        found = hook.run_on_private_loop(lambda: service_worker_arrays(hook, [service], killed.probe))
        assert found == [array]  # what on_kill cancels after the service job
        asyncio.run(killed.on_kill())
        cli = slurm_cli(slurm_cluster_version)

        def states(job: int) -> set[str]:
            command = [*cli, "squeue", "-h", "-r", "-t", "all", "-j", str(job), "-o", "%T"]
            return set(subprocess.run(command, capture_output=True, text=True, check=False).stdout.split())

        wait(lambda: states(service) == {"CANCELLED"}, "the service to be cancelled")
        wait(lambda: states(array) == {"CANCELLED"}, "every worker slice to be cancelled")
    finally:
        slurm_scripts.stop_service(hook, scripts, service)
        hook.close()
