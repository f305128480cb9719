"""A triggerer dies (SIGKILL) during a deferred wait: the other triggerer takes the trigger over. Or
it stalls (SIGSTOP) until the other one has taken the trigger over, then goes on (SIGCONT)."""

from __future__ import annotations

import re
import time

import pytest

from tests.deployment.harness import USER_CANCELLED, TaskOutcome, outcome
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


STALL_PLATFORMS = ("gke", "slurm_rest")
#: Airflow's own lines when a trigger's coroutine starts and once it has ended
#: (``TriggerRunner.run_trigger``).
TRIGGER_STARTING = re.compile(r"^trigger \S+ \(ID \d+\) starting\b", re.MULTILINE)
TRIGGER_COMPLETED = re.compile(r"^trigger completed\b", re.MULTILINE)


@scenario("stalled_triggerer[{platform}]", platform=STALL_PLATFORMS)
def stalled_triggerer(stage: Stage, name: str, platform: str) -> TaskOutcome:
    """The triggerer of a deferred wait stalls until the other one has taken its trigger over, then
    goes on: Airflow 3.3's stalled triggerer cancels the trigger it no longer owns with the message
    of a user's kill (``TriggerRunnerSupervisor.update_triggers`` puts every trigger missing from
    its assignment in ``cancelling_triggers``; ``TriggerRunner.cancel_triggers`` cancels them with
    ``_USER_ACTION_CANCEL_MSG``; ``run_trigger`` then awaits ``on_kill``). The job must live on."""
    airflow = stage.airflow
    if platform == "gke":
        dag_id = "gke_stalled_triggerer"
        run_id = airflow.trigger(dag_id)
        job = gke_waiting(stage, dag_id, run_id, "deferred")
    else:
        dag_id = f"slurm_stalled_triggerer_{platform.split('_')[1]}"
        run_id = airflow.trigger(dag_id, stage.slurm_conf)
        job = slurm_waiting(stage, dag_id, run_id, "deferred")
    airflow.wait_log(dag_id, run_id, "train", 1, TRIGGER_STARTING, RUN_TIMEOUT, until_finished=False)
    # The stalled copy of the trigger is cancelled as a user's kill, and ends; the stalled
    # triggerer's copies of other scenarios' triggers end with it. No triggerers_stay block (an
    # outage scenario's) starts before: a copy cancelled in the middle of its outage would take
    # the outage with it.
    with airflow.user_acting():
        moved = airflow.stall_triggerer(dag_id, run_id, "train")
        log = airflow.wait_log(dag_id, run_id, "train", 1, TRIGGER_COMPLETED, 120, until_finished=False)
    if platform == "gke":
        alive = [
            j["metadata"]["name"]
            for j in stage.kube.list(namespace(dag_id), "pathwaysjobs")
            if not j["metadata"].get("deletionTimestamp")
        ]
        job_alive = job in alive
    else:
        job_alive = stage.slurm.state(job) == "RUNNING"
    if not airflow.run_finished(dag_id, run_id):
        if platform == "gke":
            gke_end_program(stage, dag_id, job)
        else:
            stage.slurm.release(dag_id, 0)
    airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    seen = outcome(airflow, dag_id, run_id)
    seen.extra.update(moved=moved, cancelled=USER_CANCELLED in log, job_alive=job_alive)
    if platform == "gke":
        seen.extra["jobs"] = list(stage.kube.jobs_created(namespace(dag_id)).values())
        seen.extra["program_runs"] = stage.kube.program_runs(namespace(dag_id))
    else:
        seen.extra["jobs"] = stage.slurm.job_ids(stage.slurm.job_name(dag_id))
        seen.extra["program_runs"] = len(stage.slurm.program_runs(dag_id))
    return seen


@pytest.mark.scenario("stalled_triggerer[{platform}]")
@pytest.mark.parametrize("platform", STALL_PLATFORMS)
def test_a_stalled_triggerer_that_goes_on_leaves_the_job_to_the_triggerer_that_took_it_over(
    seen: TaskOutcome, platform: str
) -> None:
    """The stalled triggerer's cancellation is not a user's kill: the task instance is still deferred
    (on the same trigger, now run by the other triggerer), so the job is neither deleted nor
    cancelled; the task ends with the job's real outcome, and the program ran once."""
    moved = seen.extra["moved"]
    assert moved["new_job"] not in (0, moved["stalled_job"])  # another triggerer ran the trigger
    assert seen.extra["cancelled"]  # the stalled triggerer did cancel its copy as a user's kill
    assert seen.extra["job_alive"]  # ... and the job lived on
    assert (seen.state, seen.try_number) == ("success", 1)
    assert len(seen.extra["jobs"]) == 1
    assert seen.extra["program_runs"] == 1
