"""Runs of a DAG whose job has a fixed name (``name=``): a run started while another run's job holds
the name fails at once naming the conflict; a cleared run reports its own success again and never
touches the job a later run made under the same name."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deployment.harness import TaskOutcome, outcome
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import WAIT, gke_end_program, namespace, task_waiting

DAG_ID = "gke_fixed_name"
TAKEN = "already exists and was not created by this task instance"


@scenario("gke_fixed_name")
def gke_fixed_name(stage: Stage, name: str) -> dict[str, Any]:
    airflow, ns = stage.airflow, namespace(DAG_ID)
    first = airflow.trigger(DAG_ID)
    job1 = stage.kube.wait_program_running(ns, WAIT)
    task_waiting(stage, DAG_ID, first, "deferred")
    # A second run while the first one's job holds the name.
    blocked = airflow.trigger(DAG_ID)
    airflow.wait_run(DAG_ID, blocked, WAIT)
    job1_after_blocked = [o["metadata"]["uid"] for o in stage.kube.list(ns, "jobsets")]
    gke_end_program(stage, DAG_ID, job1["metadata"]["name"])
    airflow.wait_run(DAG_ID, first, WAIT)
    # A third run takes the name once the first one's job is deleted; the first run is cleared meanwhile.
    third = airflow.trigger(DAG_ID)
    job3 = stage.kube.wait_program_running(ns, WAIT, other_than={job1["metadata"]["uid"]})
    task_waiting(stage, DAG_ID, third, "deferred")
    again = airflow.clear(DAG_ID, first, "train")
    airflow.wait_ti(
        DAG_ID,
        first,
        "train",
        f"cleared try {again} to finish",
        lambda t: t["try_number"] == again and t["state"] in ("success", "failed"),
        WAIT,
    )
    airflow.wait_run(DAG_ID, first, WAIT)
    job3_after_clear = [o["metadata"]["uid"] for o in stage.kube.list(ns, "jobsets")]
    gke_end_program(stage, DAG_ID, job3["metadata"]["name"])
    airflow.wait_run(DAG_ID, third, WAIT)
    return {
        "first": outcome(airflow, DAG_ID, first, xcom_keys=("status",)),
        "blocked": outcome(airflow, DAG_ID, blocked),
        "third": outcome(airflow, DAG_ID, third, xcom_keys=("status",)),
        "again": again,
        "job1": job1["metadata"]["uid"],
        "job3": job3["metadata"]["uid"],
        "job1_after_blocked": job1_after_blocked,
        "job3_after_clear": job3_after_clear,
        "jobs": stage.kube.jobs_created(ns),
        "program_runs": stage.kube.program_runs(ns),
        "leftovers": stage.kube.leftovers(ns),
    }


@pytest.mark.scenario("gke_fixed_name")
def test_runs_sharing_a_fixed_job_name_never_take_each_others_job(seen: dict[str, Any]) -> None:
    blocked: TaskOutcome = seen["blocked"]
    assert (blocked.state, blocked.try_number) == ("failed", 1)
    assert TAKEN in blocked.log(1)
    assert seen["job1_after_blocked"] == [seen["job1"]]  # the blocked run left the first run's job alone

    first: TaskOutcome = seen["first"]
    assert (first.state, first.try_number) == ("success", seen["again"])
    assert "reporting it again, not running it again" in first.log(seen["again"])
    assert seen["job3_after_clear"] == [seen["job3"]]  # the cleared run left the third run's job alone

    third: TaskOutcome = seen["third"]
    assert (third.state, third.try_number) == ("success", 1)
    assert third.xcom["status"]["phase"] == "succeeded"
    assert len(seen["jobs"]) == 2  # nobody created a third job
    assert seen["program_runs"] == 2
    assert seen["leftovers"] == {}
