"""PathwaysClusterEnvSensor pokes against the real Slurm sandbox over SSH."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_pathways.failures import PathwaysInfrastructureFailure, PathwaysUserProgramFailed
from airflow_provider_pathways.hooks.slurm import SlurmHook
from airflow_provider_pathways.sensors.slurm import PathwaysClusterEnvSensor
from tests.slurm.conftest import wait_for

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
