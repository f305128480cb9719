"""What every Airflow the provider supports does in a real deployment: a deferred wait, a retry
after the worker's SIGKILL that follows the same job (found by its owner labels where there is no
task_state_store), a preemption retried with a fresh job, a deferred task marked failed whose job
is deleted (before 3.3 by the trigger's cleanup, which asks the execution API, or on Airflow 2 the
database), a deferred try at its execution_timeout whose job is deleted, and the compilation-cache
cleanup after training."""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta, timezone

import pytest

from sandbox.gcs.launcher import SeedObject
from tests.deployment.compat.dags.compat_gke import BUCKET
from tests.deployment.harness import ConditionTimeout, TaskOutcome, outcome, wait_for
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import REATTACHED, WAIT, gke_end_program, gke_waiting, namespace

RUN_TIMEOUT = 300
CLEANUP_TIMEOUT = 60
TEN_DAYS_AGO = datetime.now(timezone.utc) - timedelta(days=10)


def _evidence(stage: Stage, dag_id: str, run_id: str) -> TaskOutcome:
    seen = outcome(stage.airflow, dag_id, run_id)
    seen.extra["jobs"] = list(stage.kube.jobs_created(namespace(dag_id)).values())
    seen.extra["program_runs"] = stage.kube.program_runs(namespace(dag_id))
    seen.extra["leftovers"] = stage.kube.leftovers(namespace(dag_id))
    return seen


@scenario("compat_deferred")
def compat_deferred(stage: Stage, name: str) -> TaskOutcome:
    dag_id = "compat_deferred"
    run_id = stage.airflow.trigger(dag_id)
    gke_end_program(stage, dag_id, gke_waiting(stage, dag_id, run_id, "deferred"))
    stage.airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    return _evidence(stage, dag_id, run_id)


@pytest.mark.scenario("compat_deferred")
def test_a_deferred_wait_ends_in_success_and_the_job_is_deleted(seen: TaskOutcome) -> None:
    assert (seen.state, seen.try_number) == ("success", 1)
    assert seen.xcom["return_value"]["status"]["phase"] == "succeeded"
    assert len(seen.extra["jobs"]) == 1 and seen.extra["leftovers"] == {}


@scenario("compat_worker_killed")
def compat_worker_killed(stage: Stage, name: str) -> TaskOutcome:
    airflow, dag_id = stage.airflow, "compat_worker_killed"
    run_id = airflow.trigger(dag_id)
    job = gke_waiting(stage, dag_id, run_id, "polling")
    airflow.kill_process_of(dag_id, run_id, "train")
    retried = lambda t: t["try_number"] == 2 and t["state"] == "running"  # noqa: E731
    airflow.wait_ti(dag_id, run_id, "train", "try 2 running", retried, WAIT)
    wait_for(
        lambda: REATTACHED.search(airflow.task_log(dag_id, run_id, "train", 2)),
        "try 2 to follow the job",
        WAIT,
        1.0,
    )
    gke_end_program(stage, dag_id, job)
    airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    return _evidence(stage, dag_id, run_id)


@pytest.mark.scenario("compat_worker_killed")
def test_the_retry_after_a_worker_sigkill_follows_the_same_job(seen: TaskOutcome) -> None:
    assert (seen.state, seen.try_number) == ("success", 2)
    assert REATTACHED.search(seen.log(2))
    assert len(seen.extra["jobs"]) == 1 and seen.extra["program_runs"] == 1
    assert seen.extra["leftovers"] == {}


@scenario("compat_preempted")
def compat_preempted(stage: Stage, name: str) -> TaskOutcome:
    airflow, dag_id = stage.airflow, "compat_preempted"
    run_id = airflow.trigger(dag_id)
    job = gke_waiting(stage, dag_id, run_id, "deferred")
    stage.kube.action(namespace(dag_id), job, "preempt-slice", slice=0)
    fresh = gke_waiting(stage, dag_id, run_id, "deferred", try_number=2)
    gke_end_program(stage, dag_id, fresh)
    airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    return _evidence(stage, dag_id, run_id)


@pytest.mark.scenario("compat_preempted")
def test_a_preempted_try_is_retried_with_a_fresh_job(seen: TaskOutcome) -> None:
    assert (seen.state, seen.try_number) == ("success", 2)
    assert "preempt" in seen.log(1).lower()
    assert len(seen.extra["jobs"]) == 2 and seen.extra["program_runs"] == 2
    assert seen.extra["leftovers"] == {}


@scenario("compat_killed_deferred")
def compat_killed_deferred(stage: Stage, name: str) -> TaskOutcome:
    airflow, dag_id = stage.airflow, "compat_killed_deferred"
    run_id = airflow.trigger(dag_id)
    gke_waiting(stage, dag_id, run_id, "deferred")
    with airflow.user_acting():
        airflow.mark_task_failed(dag_id, run_id, "train")
        airflow.wait_run(dag_id, run_id, WAIT)
        seen = _evidence(stage, dag_id, run_id)
        with contextlib.suppress(ConditionTimeout):
            wait_for(
                lambda: not stage.kube.leftovers(namespace(dag_id)), "the job to go", CLEANUP_TIMEOUT, 0.5
            )
        seen.extra["leftovers"] = stage.kube.leftovers(namespace(dag_id))
    return seen


@pytest.mark.scenario("compat_killed_deferred")
def test_a_deferred_task_marked_failed_has_its_job_deleted(seen: TaskOutcome) -> None:
    assert (seen.state, seen.try_number) == ("failed", 1)
    assert seen.extra["leftovers"] == {}  # no PathwaysJob, JobSet or pod left


@scenario("compat_deferred_execution_timeout")
def compat_deferred_execution_timeout(stage: Stage, name: str) -> TaskOutcome:
    airflow, dag_id = stage.airflow, "compat_deferred_execution_timeout"
    run_id = airflow.trigger(dag_id)
    gke_waiting(stage, dag_id, run_id, "deferred")
    airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    seen = _evidence(stage, dag_id, run_id)
    with contextlib.suppress(ConditionTimeout):
        wait_for(lambda: not stage.kube.leftovers(namespace(dag_id)), "the job to go", CLEANUP_TIMEOUT, 0.5)
    seen.extra["leftovers"] = stage.kube.leftovers(namespace(dag_id))
    return seen


@pytest.mark.scenario("compat_deferred_execution_timeout")
def test_a_deferred_try_at_its_execution_timeout_deletes_its_job(seen: TaskOutcome) -> None:
    """Before the fix, Airflow 2 left the job running: it fails a try resumed past its
    execution_timeout before the operator's resume method runs."""
    assert (seen.state, seen.try_number) == ("failed", 1)
    assert "within the task's execution_timeout" in seen.log(1)
    assert len(seen.extra["jobs"]) == 1 and seen.extra["leftovers"] == {}


STALE = {f"compat_cache_cleanup/compilation_cache/default/e{i}.binarypb": 100 for i in range(5)}
KEPT = {"compat_cache_cleanup/checkpoints/step_10/state": 5000}


@scenario("compat_cache_cleanup")
def compat_cache_cleanup(stage: Stage, name: str) -> TaskOutcome:
    dag_id, gcs = "compat_cache_cleanup", stage.gcs
    assert gcs is not None
    gcs.create_bucket(BUCKET)
    gcs.seed_objects(BUCKET, [SeedObject(n, size, TEN_DAYS_AGO) for n, size in {**STALE, **KEPT}.items()])
    gcs.upload(BUCKET, "compat_cache_cleanup/compilation_cache/default/fresh.binarypb", b"new")
    run_id = stage.airflow.trigger(dag_id)
    gke_end_program(stage, dag_id, gke_waiting(stage, dag_id, run_id, "deferred"))
    stage.airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    seen = outcome(stage.airflow, dag_id, run_id, "cleanup_cache")
    seen.extra["objects"] = set(gcs.list_objects(BUCKET, "compat_cache_cleanup/"))
    return seen


@pytest.mark.scenario("compat_cache_cleanup")
def test_the_cleanup_after_training_deletes_the_stale_cache_entries_only(seen: TaskOutcome) -> None:
    assert (seen.run_state, seen.state) == ("success", "success")
    report = seen.xcom["return_value"]
    assert (report["deleted_objects"], report["deleted_bytes"], report["errors"]) == (5, 500, 0)
    assert report["location"] == f"gs://{BUCKET}/compat_cache_cleanup/"
    assert seen.extra["objects"] == {*KEPT, "compat_cache_cleanup/compilation_cache/default/fresh.binarypb"}
