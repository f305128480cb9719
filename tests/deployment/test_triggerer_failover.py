"""A triggerer dies (SIGKILL) during a deferred wait: the other triggerer takes the trigger over."""

from __future__ import annotations

import time

import pytest

from tests.deployment.harness import TaskOutcome, outcome
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import gke_end_program, gke_waiting, namespace, slurm_waiting

PLATFORMS = ("gke", "slurm_rest", "slurm_ssh")
RUN_TIMEOUT = 300


@scenario("failover[{platform}]", platform=PLATFORMS)
def failover(stage: Stage, name: str, platform: str) -> TaskOutcome:
    airflow = stage.airflow
    if platform == "gke":
        dag_id = "gke_failover"
        run_id = airflow.trigger(dag_id)
        job = gke_waiting(stage, dag_id, run_id, "deferred")
    else:
        dag_id = f"slurm_failover_{platform.split('_')[1]}"
        run_id = airflow.trigger(dag_id, stage.slurm_conf)
        job = slurm_waiting(stage, dag_id, run_id, "deferred")
    killed_at = time.time()
    moved = airflow.fail_over(dag_id, run_id, "train")
    if not airflow.run_finished(dag_id, run_id):
        if platform == "gke":
            gke_end_program(stage, dag_id, job)
        else:
            stage.slurm.release(dag_id, 0)
    airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    seen = outcome(airflow, dag_id, run_id, xcom_keys=("return_value", "tpu_hours"))
    seen.extra["moved"] = moved
    seen.extra["killed_at"] = killed_at
    if platform == "gke":
        seen.extra["jobs"] = list(stage.kube.jobs_created(namespace(dag_id)).values())
        seen.extra["program_runs"] = stage.kube.program_runs(namespace(dag_id))
    else:
        seen.extra["jobs"] = stage.slurm.job_ids(stage.slurm.job_name(dag_id))
        seen.extra["program_runs"] = len(stage.slurm.program_runs(dag_id))
    return seen


@pytest.mark.scenario("failover[{platform}]")
@pytest.mark.parametrize("platform", PLATFORMS)
def test_other_triggerer_takes_over_and_the_task_completes(seen: TaskOutcome, platform: str) -> None:
    moved = seen.extra["moved"]
    assert moved["new_job"] not in (0, moved["killed_job"])  # another triggerer ran the trigger
    assert (seen.state, seen.try_number) == ("success", 1)
    assert seen.xcom["return_value"]
    assert len(seen.extra["jobs"]) == 1  # exactly one job was ever created
    assert seen.extra["program_runs"] == 1


@pytest.mark.scenario("failover[gke]")
def test_the_trigger_that_took_over_reports_the_job_as_it_ran_not_as_it_first_saw_it(
    seen: TaskOutcome,
) -> None:
    """The new trigger first looks at a job that has run, and been ready, since before the kill:
    the try's timeline and TPU-hours take the moments the JobSet recorded (StartupPolicyInProgress,
    StartupPolicyCompleted: jobset ``updateCondition``), not that first look."""
    (usage,) = seen.xcom["tpu_hours"]["tries"]
    assert usage["started"] <= usage["ready"] < seen.extra["killed_at"] < usage["ended"]
    assert usage["tpu_hours"] is not None and usage["tpu_hours"] > 0
