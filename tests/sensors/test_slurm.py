"""PathwaysClusterEnvSensor pokes against the real Slurm sandbox over SSH."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pathways.failures import PathwaysInfrastructureFailure, PathwaysUserProgramFailed
from airflow_provider_pathways.hooks.slurm import SlurmHook
from airflow_provider_pathways.sensors.slurm import PathwaysClusterEnvSensor
from tests.slurm.conftest import wait_for
from tests.support.slurm_scripts import (
    copy_service_scripts,
    logged_array,
    proxy_banner,
    start_service,
    stop_service,
)

pytestmark = pytest.mark.slurm


def accepted_logins(settings: dict[str, str]) -> int:
    log = Path(settings["SLURM_SANDBOX_LOG_DIR"]) / "sshd.log"
    return sum(1 for line in log.read_text(errors="replace").splitlines() if "Accepted publickey" in line)


def test_pokes_reuse_one_ssh_connection(slurm_cluster: dict[str, str]) -> None:
    hook = SlurmHook(slurm_conn_id="slurm_ssh")
    service = hook.submit_job(script="#!/bin/bash\nsleep 120\n", job_name="sensor-pokes")
    hook.close()
    sensor = PathwaysClusterEnvSensor(
        task_id="ready", service_job_id=service, slurm_conn_id="slurm_ssh", cluster_env_path="~/no/such.env"
    )
    try:
        before = accepted_logins(slurm_cluster)
        for _ in range(5):
            assert sensor.poke({"ti": None}).is_done is False  # type: ignore[arg-type]
        assert accepted_logins(slurm_cluster) - before == 1
    finally:
        sensor.hook.cancel_job(service)
        sensor.hook.close()


@pytest.mark.parametrize(
    ("script", "exception"),
    [
        ("#!/bin/bash\nexit 3\n", PathwaysUserProgramFailed),
        ("#!/bin/bash\nexit 0\n", PathwaysInfrastructureFailure),  # a service that ended serves nothing
    ],
)
def test_a_service_that_ended_raises_the_failure_class(
    slurm_cluster: dict[str, str], script: str, exception: type[Exception]
) -> None:
    hook = SlurmHook(slurm_conn_id="slurm_ssh")
    service = hook.submit_job(script=script, job_name="sensor-ended")
    wait_for(lambda: (job := hook.get_job(service)) is not None and job.terminal, "the service to end")
    hook.close()
    sensor = PathwaysClusterEnvSensor(task_id="ready", service_job_id=service, slurm_conn_id="slurm_ssh")
    try:
        with pytest.raises(exception, match=f"the Pathways service job {service} ended before it was ready"):
            sensor.poke({"ti": None})  # type: ignore[arg-type]
    finally:
        sensor.hook.close()


class _TaskInstance:
    """Collects what the sensor pushes to XCom."""

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


@pytest.mark.parametrize("published", [False, True], ids=["sandbox-script", "published-script"])
@pytest.mark.parametrize("conn", ["slurm_rest", "slurm_ssh"])
def test_sensor_is_ready_with_the_service_jobs_own_worker_array(
    slurm_cluster_version: dict[str, str], conn: str, published: bool
) -> None:
    """Seed 002: the service job writes the proxy address once MIN_SLICES slices run and submits
    the worker array; with a script that says no more, the sensor finds that array in Slurm."""
    scripts = copy_service_scripts(slurm_cluster_version)
    hook = SlurmHook(slurm_conn_id=conn)
    service, path = start_service(hook, scripts, f"sensor-{uuid.uuid4().hex[:8]}", published=published)
    sensor = PathwaysClusterEnvSensor(
        task_id="ready", service_job_id=service, slurm_conn_id=conn, cluster_env_path=path, min_slices=2
    )
    ti = _TaskInstance()
    try:
        done = wait_for(lambda: (r := sensor.poke({"ti": ti})).is_done and r, "the sensor to be done", 90)  # type: ignore[arg-type]
        ready = done.xcom_value
        assert ready["worker_array_job_id"] == logged_array(scripts, service)
        assert ready["running_slices"] == 2
        assert ti.xcom["proxy_address"] == ready["proxy_address"]
        assert f"job={service} " in proxy_banner(ready["proxy_address"])
    finally:
        stop_service(hook, scripts, service)
        hook.close()
        sensor.hook.close()
