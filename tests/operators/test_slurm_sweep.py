"""The Slurm sweep (SlurmJobSweepOperator, ``airflow pathways sweep-slurm``) on the sandbox's real
Slurm: it cancels a Pathways service and its worker array once no task instance follows them, and
nothing else."""

from __future__ import annotations

import uuid

import pytest

from airflow_provider_pathways.hooks.slurm import SlurmHook
from airflow_provider_pathways.slurm.job import marked_comment, owner_words, task_instance_marker
from tests.operators.test_slurm import DAGS, _cluster_env_value, job_state, params, squeue
from tests.slurm.conftest import wait_for
from tests.support.airflow_runs import airflow_cli, load_dag, run_dag, set_task_state

pytestmark = [pytest.mark.slurm]


@pytest.mark.parametrize("conn", ["slurm_rest", "slurm_ssh"])
def test_a_sweep_cancels_a_service_marked_failed_after_it_was_ready_with_its_workers(
    slurm_cluster: dict[str, str], conn: str
) -> None:
    """The service task succeeded once its slices were up and handed the service on; a user then
    marks it failed (no try runs to be killed). A dry run (the operator, in a DAG) keeps it while the
    task instance succeeded; after the mark, the sweep (``airflow pathways sweep-slurm``) cancels the
    service job and its worker array, and leaves a job whose comment names no task instance (an
    older provider version's)."""
    env = f"{slurm_cluster['SLURM_SANDBOX_USER_HOME']}/pathways/tests/{uuid.uuid4().hex}.env"
    conf = params(slurm_cluster, conn, cluster_env=env)
    service = run_dag(load_dag(DAGS, "slurm_sweep_service"), conf)["service"]
    assert service.state == "success"
    job_id = str(service.xcom["job_id"])
    array = _cluster_env_value(env, "PATHWAYS_WORKER_ARRAY_JOB_ID")
    assert array and job_state(job_id) == "RUNNING"
    hook = SlurmHook(slurm_conn_id=conn)
    older = hook.submit_job(
        script="#!/bin/bash\nsleep 300\n",
        job_name=f"older-{uuid.uuid4().hex[:8]}",
        comment=marked_comment(task_instance_marker("slurm_sweep_service", "service", "x", -1), "job"),
    )
    try:
        dry = run_dag(load_dag(DAGS, "slurm_sweep_dry_run"), conf)["sweep"]
        rows = {row["job"]: row for row in dry.xcom["return_value"]}
        assert rows[f"Slurm job {job_id}"]["outcome"] == "kept"
        assert rows[f"Slurm job {job_id}"]["reason"] == "its task leaves it running when success"
        assert f"Slurm job {older}" not in rows

        set_task_state("slurm_sweep_service", "service", "failed", service.run_id)
        table = airflow_cli("pathways", "sweep-slurm", "--conn-id", conn, "--dag-id", "slurm_sweep_service")
        (row,) = [
            line
            for line in table.splitlines()
            if line.startswith(("ended ", "kept ", "gone ")) and f"Slurm job {job_id} " in line
        ]
        assert row.startswith("ended") and f"slurm_sweep_service.service {service.run_id}" in row
        wait_for(lambda: job_state(job_id) == "CANCELLED", f"service {job_id} to be cancelled")

        def slice_states() -> set[str]:
            return {row[0] for row in squeue("-r", "-j", str(array), "-t", "all", "-o", "%T")}

        wait_for(lambda: slice_states() == {"CANCELLED"}, "every worker slice to be cancelled")
        assert job_state(older) in ("PENDING", "RUNNING")
    finally:
        hook.cancel_job(older)
        hook.cancel_job(int(job_id))
        hook.close()


def test_a_named_deployments_sweep_cancels_only_its_own_jobs(
    slurm_cluster: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two deployments, prod and staging, share the Slurm user and the DAG: each submitted a job for
    the same task instance (same DAG, task and run id), whose state in prod's database is failed.
    prod's sweep cancels its own and keeps staging's, and keeps the service this (unnamed) test
    deployment submitted."""
    env = f"{slurm_cluster['SLURM_SANDBOX_USER_HOME']}/pathways/tests/{uuid.uuid4().hex}.env"
    service = run_dag(
        load_dag(DAGS, "slurm_sweep_service"), params(slurm_cluster, "slurm_rest", cluster_env=env)
    )["service"]
    assert service.state == "success"
    set_task_state("slurm_sweep_service", "service", "failed", service.run_id)
    hook = SlurmHook(slurm_conn_id="slurm_rest")
    submitted = {
        deployment: hook.submit_job(
            script="#!/bin/bash\nsleep 300\n",
            job_name=f"{deployment}-{uuid.uuid4().hex[:8]}",
            comment=marked_comment(
                task_instance_marker("slurm_sweep_service", "service", service.run_id, -1, deployment),
                "job",
                1,
                owner_words("slurm_sweep_service", "service", -1, (), deployment),
            ),
        )
        for deployment in ("prod", "staging")
    }
    try:
        monkeypatch.setenv("AIRFLOW__PATHWAYS__DEPLOYMENT_NAME", "prod")
        table = airflow_cli(
            "pathways", "sweep-slurm", "--conn-id", "slurm_rest", "--dag-id", "slurm_sweep_service"
        )

        def row(job_id: object) -> str:
            (line,) = [
                line
                for line in table.splitlines()
                if line.startswith(("ended ", "kept ", "gone ")) and f"Slurm job {job_id} " in line
            ]
            return line

        assert row(submitted["prod"]).startswith("ended")
        assert row(submitted["staging"]).startswith("kept")
        assert "another Airflow deployment's (staging; this one is prod)" in row(submitted["staging"])
        assert "(unnamed; this one is prod)" in row(service.xcom["job_id"])
        wait_for(lambda: job_state(submitted["prod"]) == "CANCELLED", "prod's job to be cancelled")
        assert job_state(submitted["staging"]) in ("PENDING", "RUNNING")
    finally:
        array = _cluster_env_value(env, "PATHWAYS_WORKER_ARRAY_JOB_ID")
        for job_id in (*submitted.values(), int(service.xcom["job_id"]), *([int(array)] if array else [])):
            hook.cancel_job(job_id)
        hook.close()
