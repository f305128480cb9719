"""A user clears a finished task through the REST API (Airflow 3.3 keeps ``task_state_store``
across a clear): a reported success is reported again, not run again; a failed job kept for
debugging never blocks the cleared try."""

from __future__ import annotations

import pytest

from tests.deployment.harness import TaskOutcome, outcome, wait_for
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import WAIT, gke_end_program, gke_waiting, namespace, task_waiting

CASES = ("success", "kept_failure")


@scenario("gke_clear[{case}]", case=CASES)
def gke_clear(stage: Stage, name: str, case: str) -> TaskOutcome:
    airflow = stage.airflow
    dag_id = f"gke_clear_{case}"
    run_id = airflow.trigger(dag_id)
    job = gke_waiting(stage, dag_id, run_id, "deferred")
    gke_end_program(stage, dag_id, job, exit_code=0 if case == "success" else 3)
    airflow.wait_run(dag_id, run_id, WAIT)
    first = airflow.task_instance(dag_id, run_id, "train")["state"]
    again = airflow.clear(dag_id, run_id, "train")
    if case == "kept_failure":  # the cleared try runs a fresh job: end its program well
        gke_end_program(stage, dag_id, gke_waiting(stage, dag_id, run_id, "deferred", again))
    airflow.wait_ti(
        dag_id,
        run_id,
        "train",
        f"try {again} to finish",
        lambda t: t["try_number"] == again and t["state"] in ("success", "failed"),
        WAIT,
    )
    airflow.wait_run(dag_id, run_id, WAIT)
    seen = outcome(airflow, dag_id, run_id, xcom_keys=("status",))
    seen.extra["first"] = first
    seen.extra["jobs"] = stage.kube.jobs_created(namespace(dag_id))
    seen.extra["program_runs"] = stage.kube.program_runs(namespace(dag_id))
    return seen


@pytest.mark.scenario("gke_clear[{case}]")
@pytest.mark.parametrize("case", CASES)
def test_a_cleared_task_reports_a_success_again_and_is_never_stuck_on_a_reported_failure(
    seen: TaskOutcome, case: str
) -> None:
    assert (seen.state, seen.try_number) == ("success", 2)
    assert seen.xcom["status"]["phase"] == "succeeded"
    log = seen.log(2)
    if case == "success":
        assert seen.extra["first"] == "success"
        assert "succeeded and an earlier try reported it; reporting it again, not running it again" in log
        assert len(seen.extra["jobs"]) == 1 and seen.extra["program_runs"] == 1  # it ran once
    else:
        assert seen.extra["first"] == "failed"
        assert "and an earlier try reported it; submitting a fresh job" in log
        assert len(seen.extra["jobs"]) == 2  # the kept failed job, and the cleared try's own
        assert seen.extra["program_runs"] == 2


MODES = ("deferred", "polling")


@scenario("gke_clear_running[{mode}]", mode=MODES)
def gke_clear_running(stage: Stage, name: str, mode: str) -> TaskOutcome:
    airflow = stage.airflow
    dag_id = f"gke_clear_running_{mode}"
    ns = namespace(dag_id)
    run_id = airflow.trigger(dag_id)
    first = stage.kube.wait_program_running(ns, WAIT)
    task_waiting(stage, dag_id, run_id, mode)
    wait_for(lambda: airflow.state_store(dag_id, run_id, "train"), f"{dag_id} to keep its job", WAIT, 1.0)
    again = airflow.clear(dag_id, run_id, "train", states=("running", "deferred"))
    second = stage.kube.wait_program_running(ns, WAIT, other_than={first["metadata"]["uid"]})
    task_waiting(stage, dag_id, run_id, mode, again)
    gke_end_program(stage, dag_id, second["metadata"]["name"])
    airflow.wait_run(dag_id, run_id, WAIT)
    seen = outcome(airflow, dag_id, run_id, xcom_keys=("status",))
    seen.extra["again"] = again
    seen.extra["jobs"] = stage.kube.jobs_created(ns)
    seen.extra["program_runs"] = stage.kube.program_runs(ns)
    seen.extra["leftovers"] = stage.kube.leftovers(ns)
    return seen


@pytest.mark.scenario("gke_clear_running[{mode}]")
@pytest.mark.parametrize("mode", MODES)
def test_a_task_cleared_while_it_runs_deletes_its_job_and_runs_a_fresh_one(
    seen: TaskOutcome, mode: str
) -> None:
    assert (seen.state, seen.try_number) == ("success", seen.extra["again"])
    # delete_on includes kill: the killed try deletes its job; a cleared deferred task can start
    # again before its trigger is killed (Airflow sets it to None at once), and then the new try
    # ends the job the same way
    killed = "Deleted" in seen.log(1) and "task killed" in seen.log(1)
    assert killed or "the task was cleared since an earlier try followed it" in seen.log(seen.extra["again"])
    assert len(seen.extra["jobs"]) == 2 and seen.extra["program_runs"] == 2
    assert seen.xcom["status"]["phase"] == "succeeded"
    assert seen.extra["leftovers"] == {}


@scenario("gke_clear_serving")
def gke_clear_serving(stage: Stage, name: str) -> TaskOutcome:
    airflow, dag_id = stage.airflow, "gke_clear_serving"
    ns = namespace(dag_id)
    run_id = airflow.trigger(dag_id)
    airflow.wait_run(dag_id, run_id, WAIT)  # ready: the task succeeds, the job serves on
    again = airflow.clear(dag_id, run_id, "train")
    airflow.wait_ti(
        dag_id,
        run_id,
        "train",
        f"try {again} to finish",
        lambda t: t["try_number"] == again and t["state"] in ("success", "failed"),
        WAIT,
    )
    airflow.wait_run(dag_id, run_id, WAIT)
    seen = outcome(airflow, dag_id, run_id, xcom_keys=("return_value",))
    seen.extra["again"] = again
    seen.extra["jobs"] = stage.kube.jobs_created(ns)
    seen.extra["program_runs"] = stage.kube.program_runs(ns)
    seen.extra["serving"] = stage.kube.leftovers(ns).get("pathwaysjobs", [])
    for job in seen.extra["serving"]:  # end the program: the run is over
        gke_end_program(stage, dag_id, job)
    return seen


@pytest.mark.scenario("gke_clear_serving")
def test_clearing_a_task_whose_ready_job_serves_on_follows_it_and_does_not_restart_it(
    seen: TaskOutcome,
) -> None:
    """The clear killed no try (the task had succeeded at ``wait_until="ready"``), so it ends no
    job: the cleared try reattaches to the serving job and reports it ready again."""
    assert (seen.state, seen.try_number) == ("success", seen.extra["again"])
    assert "Reattaching to PathwaysJob" in seen.log(seen.extra["again"])
    assert "Pausing task as DEFERRED" not in seen.log(seen.extra["again"])  # its wait was over
    assert len(seen.extra["jobs"]) == 1 and seen.extra["program_runs"] == 1
    assert seen.extra["serving"] == [seen.xcom["return_value"]["name"]]
