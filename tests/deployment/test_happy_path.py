"""Runs that go well, deferrable and polling, on GKE and on Slurm over REST and SSH; 40 deferred at once."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deployment.harness import TaskOutcome, outcome, wait_for
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import gke_end_program, gke_waiting, namespace, slurm_waiting

MODES = ("deferrable", "polling")
TRANSPORTS = ("rest", "ssh")
RUN_TIMEOUT = 300
FANOUT = 40


@scenario("gke_happy[{mode}]", mode=MODES)
def gke_happy(stage: Stage, name: str, mode: str) -> TaskOutcome:
    dag_id = f"gke_happy_{mode}"
    run_id = stage.airflow.trigger(dag_id)
    gke_end_program(stage, dag_id, gke_waiting(stage, dag_id, run_id, mode))
    stage.airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    seen = outcome(stage.airflow, dag_id, run_id, xcom_keys=("status", "return_value", "name"))
    seen.extra["jobs"] = stage.kube.jobs_created(namespace(dag_id))
    seen.extra["leftovers"] = stage.kube.leftovers(namespace(dag_id))
    return seen


@pytest.mark.scenario("gke_happy[{mode}]")
@pytest.mark.parametrize("mode", MODES)
def test_gke_job_runs_to_success_and_is_deleted(seen: TaskOutcome, mode: str) -> None:
    assert (seen.state, seen.try_number) == ("success", 1)
    assert seen.xcom["status"]["phase"] == "succeeded"
    assert seen.xcom["return_value"]["name"] == seen.xcom["name"]
    assert seen.xcom["return_value"]["status"]["phase"] == "succeeded"
    log = seen.log()
    assert "Last lines of" in log  # the program's log tail
    assert "Initializing pathwaysutils" in log and "Program finished successfully" in log
    assert len(seen.extra["jobs"]) == 1
    assert seen.extra["leftovers"] == {}  # deleted on success, with its JobSet, Jobs and pods


@scenario("gke_fanout")
def gke_fanout(stage: Stage, name: str) -> dict[str, Any]:
    dag_id = "gke_fanout"
    ns = namespace(dag_id)
    run_id = stage.airflow.trigger(dag_id)
    tis = stage.airflow.wait_tis(
        dag_id,
        run_id,
        f"all {FANOUT} tasks deferred at once",
        lambda tis: len(tis) == FANOUT and all(t["state"] == "deferred" for t in tis),
        RUN_TIMEOUT,
    )
    deferred_at_once = len(tis)
    stage.airflow.wait_workers_done([str(t["id"]) for t in tis])
    for jobset in stage.kube.list(ns, "jobsets"):
        wait_for(
            lambda js=jobset: _try(lambda: stage.kube.action(ns, js["metadata"]["name"], "complete-program")),
            f"the program of {jobset['metadata']['name']} to end",
            60,
            0.5,
        )
    stage.airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    final = stage.airflow.task_instances(dag_id, run_id)
    return {
        "deferred_at_once": deferred_at_once,
        "tis": sorted((t["map_index"], t["state"], t["try_number"]) for t in final),
        "jobs": stage.kube.jobs_created(ns),
        "leftovers": stage.kube.leftovers(ns),
    }


def _try(action: Any) -> bool:
    """True once ``action()`` went through (the stand-in answers 409 until there is a program)."""
    try:
        action()
    except Exception:
        return False
    return True


@pytest.mark.scenario("gke_fanout")
def test_forty_deferred_tasks_all_succeed_with_one_job_each(seen: dict[str, Any]) -> None:
    assert seen["deferred_at_once"] == FANOUT
    assert seen["tis"] == [(i, "success", 1) for i in range(FANOUT)]
    names = list(seen["jobs"].values())
    assert len(names) == FANOUT and len(set(names)) == FANOUT  # exactly one job per task
    assert seen["leftovers"] == {}


@scenario("slurm_happy[{mode}-{transport}]", mode=MODES, transport=TRANSPORTS)
def slurm_happy(stage: Stage, name: str, mode: str, transport: str) -> TaskOutcome:
    dag_id = f"slurm_happy_{mode}_{transport}"
    run_id = stage.airflow.trigger(dag_id, stage.slurm_conf)
    slurm_waiting(stage, dag_id, run_id, mode)
    stage.slurm.release(dag_id, 0)
    stage.airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    seen = outcome(stage.airflow, dag_id, run_id, xcom_keys=("return_value", "job", "job_id"))
    seen.extra["job_ids"] = stage.slurm.job_ids(stage.slurm.job_name(dag_id))
    seen.extra["runs"] = stage.slurm.program_runs(dag_id)
    return seen


@pytest.mark.scenario("slurm_happy[{mode}-{transport}]")
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
def test_slurm_workload_runs_to_success(seen: TaskOutcome, mode: str, transport: str) -> None:
    assert (seen.state, seen.try_number) == ("success", 1)
    job_id = seen.xcom["job_id"]
    assert seen.xcom["return_value"] == {
        "job_id": job_id,
        "state": "COMPLETED",
        "exit_code": 0,
        "reason": None,
    }
    assert seen.xcom["job"]["state"] == "COMPLETED"
    log = seen.log()
    assert "step 3/3: loss=0.23" in log and "Program finished successfully" in log  # the output tail
    assert seen.extra["job_ids"] == [str(job_id)]
    assert len(seen.extra["runs"]) == 1


@scenario("service_happy[{mode}-{transport}]", mode=MODES, transport=TRANSPORTS)
def service_happy(stage: Stage, name: str, mode: str, transport: str) -> TaskOutcome:
    dag_id = f"service_happy_{mode}_{transport}"
    run_id = stage.airflow.trigger(dag_id, stage.slurm_conf)
    stage.airflow.wait_ti(
        dag_id, run_id, "service", "waiting", lambda t: t["state"] in ("running", "deferred"), 240
    )
    if mode == "deferrable":
        stage.airflow.settle_deferred(dag_id, run_id, "service")
    stage.slurm.release_service(dag_id)
    stage.airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    seen = outcome(
        stage.airflow, dag_id, run_id, "service", xcom_keys=("return_value", "job_id", "proxy_address")
    )
    stop = outcome(stage.airflow, dag_id, run_id, "stop")
    seen.extra["stop"] = (stop.state, stop.xcom["return_value"])
    job_name = stage.slurm.job_name(dag_id)
    seen.extra["job_ids"] = stage.slurm.job_ids(job_name)
    seen.extra["active"] = stage.slurm.active(job_name) + stage.slurm.active(
        f"pathways-workers-{seen.xcom['job_id']}"
    )
    return seen


@pytest.mark.scenario("service_happy[{mode}-{transport}]")
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
def test_pathways_service_becomes_ready_then_is_cancelled(
    seen: TaskOutcome, mode: str, transport: str
) -> None:
    assert (seen.state, seen.try_number) == ("success", 1)
    result = seen.xcom["return_value"]
    assert result["job_id"] == seen.xcom["job_id"]
    assert result["proxy_address"] == seen.xcom["proxy_address"]
    assert str(result["proxy_address"]).startswith("grpc://127.0.0.1:")
    assert result["running_slices"] >= 1 and result["worker_array_job_id"]
    assert seen.extra["job_ids"] == [str(seen.xcom["job_id"])]
    stop_state, stopped = seen.extra["stop"]
    assert stop_state == "success"
    assert seen.xcom["job_id"] in stopped["cancelled"]
    assert seen.extra["active"] == []  # the service and its worker array are gone
