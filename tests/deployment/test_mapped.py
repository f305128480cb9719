"""A mapped task of 3 indexes, deferred and polling, on GKE and Slurm: each index follows, judges
and reports its own job (the ids travel in the trigger event, not through an XCom pull that would
read every index's value)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deployment.harness import FINISHED_TI_STATES, TaskOutcome, outcome, wait_for
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import WAIT, namespace

PLATFORMS = ("gke", "slurm")
MODES = ("deferred", "polling")
INDEXES = 3
WAITING = {"deferred": "deferred", "polling": "running"}


def _all_waiting(stage: Stage, dag_id: str, run_id: str, mode: str) -> list[dict[str, Any]]:
    tis = stage.airflow.wait_tis(
        dag_id,
        run_id,
        f"all {INDEXES} indexes {WAITING[mode]}",
        lambda tis: len(tis) == INDEXES and all(t["state"] == WAITING[mode] for t in tis),
        WAIT,
    )
    if mode == "deferred":
        stage.airflow.wait_workers_done([str(t["id"]) for t in tis])
    return tis


@scenario("mapped[{platform}-{mode}]", platform=PLATFORMS, mode=MODES)
def mapped(stage: Stage, name: str, platform: str, mode: str) -> list[TaskOutcome]:
    dag_id = f"{platform}_mapped_{mode}"
    airflow = stage.airflow
    if platform == "gke":
        ns = namespace(dag_id)
        run_id = airflow.trigger(dag_id)
        wait_for(
            lambda: len(stage.kube.list(ns, "jobsets")) == INDEXES,
            f"{INDEXES} JobSets in {ns}",
            WAIT,
            0.5,
        )
        _all_waiting(stage, dag_id, run_id, mode)
        done: set[str] = set()
        for _ in range(INDEXES):
            job = stage.kube.wait_program_running(ns, WAIT, other_than=done)
            stage.kube.action(ns, job["metadata"]["name"], "complete-program")
            done.add(job["metadata"]["uid"])
    else:
        run_id = airflow.trigger(dag_id, stage.slurm_conf)
        wait_for(
            lambda: len(stage.slurm.program_runs(dag_id)) >= INDEXES,
            f"the {INDEXES} programs of {dag_id} to start",
            WAIT,
            0.3,
        )
        _all_waiting(stage, dag_id, run_id, mode)
        stage.slurm.release(dag_id, 0)
    airflow.wait_run(dag_id, run_id, WAIT)
    keys = ("return_value", "status") if platform == "gke" else ("return_value", "job_id")
    seen = [outcome(airflow, dag_id, run_id, xcom_keys=keys, map_index=i) for i in range(INDEXES)]
    if platform == "gke":
        seen[0].extra["jobs"] = stage.kube.jobs_created(namespace(dag_id))
        seen[0].extra["leftovers"] = stage.kube.leftovers(namespace(dag_id))
    else:
        name_ = stage.slurm.job_name(dag_id)
        seen[0].extra["jobs"] = stage.slurm.job_ids(name_)
        seen[0].extra["leftovers"] = stage.slurm.active(name_)
    return seen


@pytest.mark.scenario("mapped[{platform}-{mode}]")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("platform", PLATFORMS)
def test_each_index_of_a_mapped_task_reports_its_own_job(
    seen: list[TaskOutcome], platform: str, mode: str
) -> None:
    assert [(s.map_index, s.state, s.try_number) for s in seen] == [(i, "success", 1) for i in range(INDEXES)]
    assert all(s.state in FINISHED_TI_STATES for s in seen)
    jobs = seen[0].extra["jobs"]
    assert len(jobs) == INDEXES and not seen[0].extra["leftovers"]
    if platform == "gke":
        names = [s.xcom["return_value"]["name"] for s in seen]
        assert sorted(names) == sorted(jobs.values())  # each index its own job
        assert all(s.xcom["status"]["phase"] == "succeeded" for s in seen)
    else:
        ids = [str(s.xcom["job_id"]) for s in seen]
        assert sorted(ids, key=int) == jobs  # each index its own job
        assert all(s.xcom["return_value"]["state"] == "COMPLETED" for s in seen)
        assert all(str(s.xcom["return_value"]["job_id"]) == i for s, i in zip(seen, ids, strict=True))


BUDGET_CASES = ("budget", "retries")


@scenario("mapped_retry[{case}]", case=BUDGET_CASES)
def mapped_retry(stage: Stage, name: str, case: str) -> list[TaskOutcome]:
    """Index 0 of a mapped GKE task is preempted (no ``retries`` in the DAG) or its program fails
    (``retries=2``, no ``retry_policy``); index 1 ends well."""
    dag_id = f"gke_mapped_{case}"
    airflow, ns = stage.airflow, namespace(dag_id)
    run_id = airflow.trigger(dag_id)
    wait_for(lambda: len(stage.kube.list(ns, "jobsets")) == 2, f"2 JobSets in {ns}", WAIT, 0.5)
    first = stage.kube.wait_program_running(ns, WAIT)
    second = stage.kube.wait_program_running(ns, WAIT, other_than={first["metadata"]["uid"]})
    if case == "budget":  # deferred: both tries' workers gone first (a trigger that fires before
        # the scheduler processed the deferral's exit gets its task failed by Airflow 3.3,
        # apache/airflow#72716)
        tis = airflow.wait_tis(
            dag_id,
            run_id,
            "both indexes deferred",
            lambda tis: len(tis) == 2 and all(t["state"] == "deferred" for t in tis),
            WAIT,
        )
        airflow.wait_workers_done([str(t["id"]) for t in tis])
    by_shard = {job["metadata"]["labels"]["shard"]: job["metadata"]["name"] for job in (first, second)}
    stage.kube.action(ns, by_shard["1"], "complete-program")
    if case == "budget":
        stage.kube.action(ns, by_shard["0"], "preempt-slice", slice=0)
        retry = airflow.wait_ti(
            dag_id,
            run_id,
            "train",
            "index 0's try 2 deferred",
            lambda t: t["try_number"] == 2 and t["state"] == "deferred",
            WAIT,
            map_index=0,
        )
        airflow.wait_workers_done([str(retry["id"])])
        done = {first["metadata"]["uid"], second["metadata"]["uid"]}
        stage.kube.action(ns, stage.kube.wait_program_running(ns, WAIT, other_than=done)["metadata"]["name"],
                          "complete-program")  # fmt: skip
    else:
        stage.kube.action(ns, by_shard["0"], "fail-program", exit_code=3)
    airflow.wait_run(dag_id, run_id, WAIT)
    seen = [outcome(airflow, dag_id, run_id, map_index=i) for i in range(2)]
    seen[0].extra["program_runs"] = stage.kube.program_runs(ns)
    return seen


@pytest.mark.scenario("mapped_retry[budget]")
def test_a_preempted_index_of_a_mapped_task_is_retried_without_retries_in_the_dag(
    seen: list[TaskOutcome],
) -> None:
    """``partial()`` fills ``retries=0`` and no policy before the operator is built: the mapped task
    still gets ``preemption_retries``, as an unmapped one does."""
    assert [(s.map_index, s.state, s.try_number) for s in seen] == [(0, "success", 2), (1, "success", 1)]
    assert "preemption, retrying with backoff" in seen[0].log(1)
    assert seen[0].extra["program_runs"] == 3


@pytest.mark.scenario("mapped_retry[retries]")
def test_a_failing_program_of_a_mapped_task_is_not_run_again_with_retries_set(
    seen: list[TaskOutcome],
) -> None:
    """With ``retries=2`` and no ``retry_policy``, the mapped task gets ``PathwaysRetryPolicy`` as an
    unmapped one does: a failing program fails at once, its retries left unspent."""
    assert [(s.map_index, s.state, s.try_number) for s in seen] == [(0, "failed", 1), (1, "success", 1)]
    assert "user program failed" in seen[0].log(1)
    assert seen[0].extra["program_runs"] == 2
