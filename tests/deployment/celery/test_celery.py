"""The CeleryExecutor deployment: a lost worker's retry runs on the other worker and follows the
same job; 40 deferred waits spread over both triggerers survive one triggerer's death and resume on
either worker."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.airflow.deployment import AirflowDeployment
from tests.deployment.celery.conftest import CELERY_WORKERS
from tests.deployment.harness import TaskOutcome, outcome, wait_for
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import REATTACHED, WAIT, gke_end_program, gke_waiting, namespace

RUN_TIMEOUT = 300
FANOUT = 40
WORKERS = {AirflowDeployment.celery_hostname(n): n for n in range(1, CELERY_WORKERS + 1)}


@scenario("celery_worker_lost")
def celery_worker_lost(stage: Stage, name: str) -> TaskOutcome:
    airflow, dag_id = stage.airflow, "celery_worker_lost"
    stage.after(("celery_fanout",))  # the fanout's tries run on both workers: none of them is killed
    run_id = airflow.trigger(dag_id)
    job = gke_waiting(stage, dag_id, run_id, "polling")
    wait_for(lambda: airflow.state_store(dag_id, run_id, "train"), "the job kept in the state store", WAIT, 1)
    first_host = airflow.task_instance(dag_id, run_id, "train")["hostname"]
    lost = WORKERS[first_host]
    airflow.deployment.kill_celery_worker(lost)
    retried = lambda t: t["try_number"] == 2 and t["state"] == "running"  # noqa: E731
    airflow.wait_ti(dag_id, run_id, "train", "try 2 running", retried, WAIT)
    airflow.deployment.start_celery_worker(lost)  # the machine comes back
    wait_for(
        lambda: any(
            (o["metadata"].get("annotations") or {}).get("airflow.apache.org/followed-by-try") == "2"
            for o in stage.kube.list(namespace(dag_id), "pathwaysjobs")
        ),
        "try 2 to follow the job",
        WAIT,
        1.0,
    )
    gke_end_program(stage, dag_id, job)
    airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    seen = outcome(airflow, dag_id, run_id)
    seen.extra["hosts"] = {n: t.get("hostname") for n, t in airflow.tries(dag_id, run_id, "train").items()}
    seen.extra["lost"] = first_host
    seen.extra["jobs"] = list(stage.kube.jobs_created(namespace(dag_id)).values())
    seen.extra["program_runs"] = stage.kube.program_runs(namespace(dag_id))
    return seen


@pytest.mark.scenario("celery_worker_lost")
def test_a_lost_workers_retry_runs_on_the_other_worker_and_follows_the_same_job(seen: TaskOutcome) -> None:
    hosts = seen.extra["hosts"]
    assert (seen.state, seen.try_number) == ("success", 2)
    assert hosts[1] == seen.extra["lost"] and hosts[2] in WORKERS and hosts[2] != hosts[1]
    assert REATTACHED.search(seen.log(2)), seen.log(2)[-3000:]
    assert len(seen.extra["jobs"]) == 1  # the retry made no job of its own
    assert seen.extra["program_runs"] == 1


@scenario("celery_fanout")
def celery_fanout(stage: Stage, name: str) -> dict[str, Any]:
    airflow, dag_id = stage.airflow, "celery_fanout"
    ns = namespace(dag_id)
    run_id = airflow.trigger(dag_id)
    tis = airflow.wait_tis(
        dag_id,
        run_id,
        f"all {FANOUT} tasks deferred on a triggerer",
        lambda tis: (
            len(tis) == FANOUT
            and all(t["state"] == "deferred" and (t.get("triggerer_job") or {}).get("id") for t in tis)
        ),
        RUN_TIMEOUT,
    )
    airflow.wait_workers_done([str(t["id"]) for t in tis])
    started_on = {t["map_index"]: t["hostname"] for t in tis}
    by_triggerer: dict[int, int] = {}
    for t in tis:
        job_id = int(t["triggerer_job"]["id"])
        by_triggerer[job_id] = by_triggerer.get(job_id, 0) + 1
    killed = max(by_triggerer, key=lambda j: by_triggerer[j])  # the busier one
    airflow.kill_triggerer(airflow.deployment.triggerer_number(killed) or 0)
    taken = airflow.wait_tis(
        dag_id,
        run_id,
        f"the triggers of the killed triggerer job {killed} taken over",
        lambda tis: all((t.get("triggerer_job") or {}).get("id") not in (None, killed) for t in tis),
        RUN_TIMEOUT,
    )
    after_kill = sorted({int(t["triggerer_job"]["id"]) for t in taken})
    for jobset in stage.kube.list(ns, "jobsets"):
        gke_end_program(stage, dag_id, jobset["metadata"]["name"])
    airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    final = airflow.task_instances(dag_id, run_id)
    return {
        "by_triggerer": by_triggerer,
        "killed": killed,
        "after_kill": after_kill,
        "started_on": started_on,
        "resumed_on": {t["map_index"]: t["hostname"] for t in final},
        "tis": sorted((t["map_index"], t["state"], t["try_number"]) for t in final),
        "jobs": stage.kube.jobs_created(ns),
        "leftovers": stage.kube.leftovers(ns),
    }


@pytest.mark.scenario("celery_fanout")
def test_forty_deferred_waits_survive_a_triggerer_and_resume_on_either_worker(seen: dict[str, Any]) -> None:
    assert len(seen["by_triggerer"]) == 2, seen["by_triggerer"]  # the waits were spread over both
    assert seen["after_kill"] and seen["killed"] not in seen["after_kill"]
    assert seen["tis"] == [(i, "success", 1) for i in range(FANOUT)]
    assert set(seen["started_on"].values()) == set(WORKERS)
    assert set(seen["resumed_on"].values()) == set(WORKERS)
    names = list(seen["jobs"].values())
    assert len(names) == FANOUT and len(set(names)) == FANOUT  # exactly one job per task
    assert seen["leftovers"] == {}
