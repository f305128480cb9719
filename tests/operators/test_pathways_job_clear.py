"""PathwaysJobOperator across clears and superseded tries: real Airflow (dag.test, and a clear that
keeps the task's state as Airflow 3.3 does) against the Kubernetes stand-in."""

from __future__ import annotations

from typing import Any

import pendulum
import pytest

from airflow_provider_pathways.gke.objects import PATHWAYS_JOB, JobKind
from airflow_provider_pathways.gke.task_job import JobRef, airflow_labels
from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
from tests.operators.test_pathways_job import creates, running_jobset
from tests.support.airflow_runs import clear_and_rerun, load_dag, run_dag
from tests.support.airflow_versions import AIRFLOW_V_3_3_PLUS, TASK_LOG_IN_OUTPUT
from tests.support.kube_jobs import CONN, act_when, new_spec, stand_in_objects

DAGS = "gke_scenarios.py"
pytestmark = pytest.mark.usefixtures("kube")


def at(day: int) -> pendulum.DateTime:
    return pendulum.datetime(2026, 3, day, tz="UTC")


def test_a_cleared_task_runs_a_fresh_job_after_a_failure_it_reported_and_keeps_the_failed_one(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dag, when, namespace = load_dag(DAGS, "gke_cleared_after_kept_failure"), at(1), "kept-failure"
    first = run_dag(dag, logical_date=when)["train"]
    assert first.state == "failed"
    [kept] = stand_in_objects(kube, "pathwaysjobs", namespace)  # delete_on has no "failure"
    capfd.readouterr()

    cleared = clear_and_rerun(dag, when)["train"]
    logs = capfd.readouterr().out

    assert cleared.state == "success"  # not stuck on the first try's failure
    assert "an earlier try reported it; submitting a fresh job" in logs
    assert cleared.xcom["name"] != kept["metadata"]["name"]
    # the failed job is still there to debug, untouched; the fresh one was deleted on success
    [still_kept] = stand_in_objects(kube, "pathwaysjobs", namespace)
    assert still_kept["metadata"]["uid"] == kept["metadata"]["uid"]


def test_a_cleared_task_whose_job_succeeded_reports_the_success_again_without_running_it(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dag, when = load_dag(DAGS, "gke_cleared_after_success"), at(2)
    kube.control("requests/reset")
    first = run_dag(dag, logical_date=when)["train"]
    assert first.state == "success"
    assert stand_in_objects(kube, "pathwaysjobs", "cleared-success") == []  # deleted on success
    capfd.readouterr()

    cleared = clear_and_rerun(dag, when)["train"]
    logs = capfd.readouterr().out

    assert cleared.state == "success"
    assert "reporting it again, not running it again" in logs
    assert cleared.xcom["status"]["phase"] == "succeeded"
    assert cleared.xcom["name"] == first.xcom["name"]
    assert creates(kube) == 1
    # kept for good, not [state_store] default_retention_days (30): a task cleared later, or a job
    # that runs longer, still finds what its earlier tries kept
    assert stored_expiries(dag.dag_id) == {"pathways_job": None, "tpu_hours": None}


def stored_expiries(dag_id: str) -> dict[str, Any]:
    """Each ``task_state_store`` key of the DAG's task instances and when it expires."""
    from airflow.models.task_state_store import TaskStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(TaskStateStoreModel.key, TaskStateStoreModel.expires_at).where(
                TaskStateStoreModel.dag_id == dag_id
            )
        ).all()
    return {key: expires for key, expires in rows}


@pytest.mark.parametrize("mode", ["polling", "deferred"])
def test_clearing_a_task_whose_ready_job_still_serves_follows_the_job_without_restarting_it(
    kube: Any, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    """A clear kills only a running try; this task had succeeded (``wait_until="ready"``), so
    nothing was killed and the cleared try reports the same serving job ready again (it deleted the
    healthy job and started another). A deferrable cleared try finds the wait already over and does
    not defer (its trigger would fire at once, before Airflow 3.3's scheduler may have processed the
    deferral: apache/airflow#72716)."""
    suffix = "_deferred" if mode == "deferred" else ""
    dag, when = load_dag(DAGS, f"gke_cleared_while_serving{suffix}"), at(5)
    namespace = f"cleared-serving{suffix.replace('_', '-')}"
    kube.control("requests/reset")
    first = run_dag(dag, logical_date=when)["train"]
    assert first.state == "success"
    [serving] = stand_in_objects(kube, "pathwaysjobs", namespace)
    capfd.readouterr()
    kube.control("requests/reset")
    caplog.clear()

    cleared = clear_and_rerun(dag, when)["train"]
    logs = capfd.readouterr().out

    assert cleared.state == "success"
    assert f"Reattaching to PathwaysJob {namespace}/" in logs
    assert "Pausing task as DEFERRED" not in logs + caplog.text  # no trigger ran
    assert cleared.xcom["name"] == first.xcom["name"]
    [still] = stand_in_objects(kube, "pathwaysjobs", namespace)
    assert still["metadata"]["uid"] == serving["metadata"]["uid"] and creates(kube) == 0
    PathwaysJobHook(kubernetes_conn_id=CONN).delete_job(
        still["metadata"]["name"], namespace, JobKind.PATHWAYS_JOB
    )


def test_with_its_state_discarded_a_cleared_task_runs_a_succeeded_job_again_and_follows_a_serving_one(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """Airflow 3.4 discards a task's ``task_state_store`` when it is cleared (unless asked to keep
    it): the *state discarded* column of the clear table (docs/outcomes.rst). A succeeded job is
    run again as a fresh job; a ready job that serves on is found by its owner labels and followed,
    not restarted."""
    dag, when = load_dag(DAGS, "gke_cleared_after_success"), at(7)
    assert run_dag(dag, logical_date=when)["train"].state == "success"
    kube.control("requests/reset")
    again = clear_and_rerun(dag, when, keep_state=False)["train"]
    assert again.state == "success" and creates(kube) == 1  # nothing said it had run: run again

    dag, when = load_dag(DAGS, "gke_cleared_while_serving"), at(8)
    first = run_dag(dag, logical_date=when)["train"]
    assert first.state == "success"
    [serving] = [
        job
        for job in stand_in_objects(kube, "pathwaysjobs", "cleared-serving")
        if job["metadata"]["name"] == first.xcom["name"]
    ]
    capfd.readouterr()
    kube.control("requests/reset")
    cleared = clear_and_rerun(dag, when, keep_state=False)["train"]
    logs = capfd.readouterr().out
    assert cleared.state == "success" and creates(kube) == 0
    if TASK_LOG_IN_OUTPUT:
        assert "created by an earlier try of this task instance" in logs  # found by its owner labels
    assert cleared.xcom["name"] == first.xcom["name"]
    [still] = [
        job
        for job in stand_in_objects(kube, "pathwaysjobs", "cleared-serving")
        if job["metadata"]["name"] == first.xcom["name"]
    ]
    assert still["metadata"]["uid"] == serving["metadata"]["uid"]
    PathwaysJobHook(kubernetes_conn_id=CONN).delete_job(
        still["metadata"]["name"], "cleared-serving", JobKind.PATHWAYS_JOB
    )


@pytest.mark.skipif(not AIRFLOW_V_3_3_PLUS, reason="task_state_store arrived in Airflow 3.3")
def test_a_try_cleared_before_it_kept_its_job_id_ends_the_job_it_submitted(
    kube: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A clear that lands between the job's creation and the try keeping its id: the API server
    answers the try's ``task_state_store`` write with 404 (the try's task instance is gone; as a
    real deployment answered, ``AirflowRuntimeError`` "Task instance ... not found"). No try could
    follow the job by its id, so the failing try deletes it rather than leave it running."""
    from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
    from airflow.sdk.execution_time.comms import ErrorResponse
    from airflow.sdk.execution_time.context import TaskStateStoreAccessor

    gone = ErrorResponse(
        error=ErrorType.API_SERVER_ERROR,
        detail={"status_code": 404, "detail": {"reason": "not_found", "message": "Task instance not found"}},
    )

    def refused(self: Any, key: str, value: Any, **kwargs: Any) -> None:
        raise AirflowRuntimeError(gone)

    monkeypatch.setattr(TaskStateStoreAccessor, "set", refused)
    kube.control("requests/reset")
    outcome = run_dag(load_dag(DAGS, "gke_cleared_while_submitting"), logical_date=at(9))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "failed"
    assert creates(kube) == 1
    assert stand_in_objects(kube, "pathwaysjobs", "cleared-submitting") == []  # deleted, not orphaned
    if TASK_LOG_IN_OUTPUT:
        assert "no try could follow it, so it is ended" in logs


@pytest.mark.slow
def test_clearing_a_task_that_lost_sight_of_its_running_job_follows_it(
    kube: Any, faults: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """The try lost sight of its job in an outage and left it running (``delete_on`` without
    "failure"; the same as a try that left it for its retry): no try followed it when the task was
    cleared, so the cleared try follows it to its end instead of deleting it and starting again."""
    dag, when, namespace = load_dag(DAGS, "gke_cleared_after_lost_watch"), at(6), "cleared-lost-watch"
    kube.control("requests/reset")
    # the API server answers no read until the try has lost sight of the job (outage_tolerance 1 s)
    watcher = act_when(
        lambda: running_jobset(kube, namespace, 2), lambda _name: faults(503, count=100_000, verb="GET")
    )
    first = run_dag(dag, logical_date=when)["train"]
    watcher.join(5)
    kube.control("faults", method="POST", count=0, clear=1)  # the outage ends
    assert watcher.failures == [] and first.state == "failed"  # type: ignore[attr-defined]
    [kept] = stand_in_objects(kube, "pathwaysjobs", namespace)
    capfd.readouterr()

    cleared = clear_and_rerun(dag, when)["train"]
    logs = capfd.readouterr().out

    assert cleared.state == "success"
    job = f"PathwaysJob cleared-lost-watch/{kept['metadata']['name']}"
    # followed again, or (once it finished meanwhile) reported: neither ended nor run again
    assert f"Reattaching to {job}" in logs or f"{job} succeeded after an earlier try ended" in logs
    assert cleared.xcom["name"] == kept["metadata"]["name"] and creates(kube) == 1


def test_a_cleared_run_never_follows_or_deletes_the_job_another_run_made_under_the_same_name(
    kube: Any,
) -> None:
    dag, when, namespace = load_dag(DAGS, "gke_fixed_name"), at(3), "fixed-name"
    assert run_dag(dag, logical_date=when)["train"].state == "success"
    # another run of the DAG now runs its own job under the fixed name
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    other = new_spec(namespace, program_seconds=3)
    other.name = "shared-train"
    other.labels = airflow_labels(dag.dag_id, "train", "scheduled__2026-03-04T00:00:00+00:00", -1)
    uid = hook.create_job(other.to_pathwaysjob(), namespace)["metadata"]["uid"]

    cleared = clear_and_rerun(dag, when)["train"]

    assert cleared.state == "success"
    [survivor] = stand_in_objects(kube, "pathwaysjobs", namespace)
    assert survivor["metadata"]["uid"] == uid
    hook.delete_job("shared-train", namespace)


def test_a_job_another_run_recreates_under_the_followed_name_is_not_followed(kube: Any) -> None:
    namespace = "name-taken"
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    replacement: list[str] = []

    def another_run_takes_the_name(name: str) -> None:
        hook.delete_job("taken-train", namespace)
        hook.wait_until_deleted("taken-train", namespace, JobKind.PATHWAYS_JOB, 15)
        other = new_spec(namespace, program_seconds=1)
        other.name = "taken-train"
        other.labels = airflow_labels("gke_name_taken_while_followed", "train", "scheduled__other", -1)
        replacement.append(hook.create_job(other.to_pathwaysjob(), namespace)["metadata"]["uid"])

    watcher = act_when(lambda: running_jobset(kube, namespace, 1), another_run_takes_the_name)
    outcome = run_dag(load_dag(DAGS, "gke_name_taken_while_followed"))["train"]
    watcher.join(5)

    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "failed"  # its job is gone; the other run's success is not its own
    assert outcome.xcom["status"]["phase"] == "deleted"
    [survivor] = stand_in_objects(kube, "pathwaysjobs", namespace)  # and it was not deleted
    assert survivor["metadata"]["uid"] == replacement[0]
    hook.delete_job("taken-train", namespace)


def test_a_superseded_try_that_is_killed_leaves_the_job_a_newer_try_follows(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    namespace = "superseded"
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    followed: list[dict[str, Any]] = []

    def newer_try_reattaches(name: str) -> None:  # what the try after a partition does first
        job = hook.get_object(PATHWAYS_JOB, name, namespace)
        assert job is not None
        followed.append(job)
        hook.mark_followed(JobRef.of(job, "PathwaysJob"), try_number=2)

    watcher = act_when(lambda: running_jobset(kube, namespace, 1), newer_try_reattaches)
    outcome = run_dag(load_dag(DAGS, "gke_superseded_try"))["train"]
    watcher.join(5)
    logs = capfd.readouterr().out

    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "failed"  # try 1 ran out of time and was killed
    [job] = stand_in_objects(kube, "pathwaysjobs", namespace)
    assert job["metadata"]["uid"] == followed[0]["metadata"]["uid"]
    assert "a newer try of this task instance follows it" in logs
    hook.delete_job(job["metadata"]["name"], namespace)


def run_suspended_once(
    kube: Any, capfd: pytest.CaptureFixture[str], namespace: str, dag_id: str
) -> tuple[Any, str]:
    """Run ``dag_id`` once, suspending its job (in ``namespace``) as soon as a slice is ready, as a
    higher-priority workload would; the task's outcome and the logs."""
    kube.control("requests/reset")
    watcher = act_when(
        lambda: running_jobset(kube, namespace, 1), lambda name: kube.action(namespace, name, "suspend")
    )
    outcome = run_dag(load_dag(DAGS, dag_id))["train"]
    watcher.join(5)
    assert watcher.failures == []  # type: ignore[attr-defined]
    return outcome, capfd.readouterr().out


def test_a_job_resumed_and_done_before_the_retry_looked_is_reported_not_run_again(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """Try 1 failed on its job's suspension and kept the job for the retry; Kueue resumed it and
    it succeeded before the retry looked: the retry reports that success (a fresh job would run
    the program a second time)."""
    outcome, logs = run_suspended_once(kube, capfd, "resumed-done", "gke_resumed_and_done_before_retry")

    assert (outcome.state, outcome.try_number) == ("success", 2)
    assert creates(kube) == 1
    if TASK_LOG_IN_OUTPUT:
        assert "succeeded after an earlier try ended; reporting it, not running it again" in logs


def test_a_job_renamed_between_tries_is_followed_not_orphaned(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    namespace = "renamed"
    outcome, logs = run_suspended_once(kube, capfd, namespace, "gke_renamed_between_tries")

    assert outcome.state == "success" and outcome.try_number == 2
    assert outcome.xcom["name"] == "renamed-1"  # the job try 1 made, though try 2 names "renamed-2"
    # followed again, or (on a slow machine, once it finished meanwhile) reported: found either way
    assert "PathwaysJob renamed/renamed-1, submitted by an earlier try" in logs or (
        "PathwaysJob renamed/renamed-1 succeeded after an earlier try ended" in logs
    )
    assert creates(kube) == 1
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []
