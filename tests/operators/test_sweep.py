"""The sweep (PathwaysJobSweepOperator, dag.test against the Kubernetes stand-in): it ends the jobs
no task instance follows any more, and only those, as a maintenance DAG would run it."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pathways.gke.task_job import (
    DEPLOYMENT_ANNOTATION,
    LEFT_RUNNING_ANNOTATION,
    TASK_INSTANCE_ANNOTATION,
    TaskIdentity,
    place_spec,
)
from tests.dags.gke_scenarios import CONN, knobs, spec
from tests.dags.gke_sweep import NAMESPACE
from tests.support.airflow_runs import airflow_cli, load_dag, run_dag, set_task_state
from tests.support.kube_jobs import stand_in_objects, wait_for

DAGS = "gke_sweep.py"
pytestmark = pytest.mark.usefixtures("kube")


def delete_run(dag_id: str, run_id: str) -> None:
    """What deleting a DAG run in the UI does: the run and its task instances are gone."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        session.delete(
            session.scalars(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)).one()
        )


def _table_row(table: str, task_instance: str) -> str:
    (row,) = [line for line in table.splitlines() if task_instance in line]
    return row


def jobs(kube: Any) -> dict[str, str]:
    """The PathwaysJobs in the sweep's namespace not being deleted: name -> uid."""
    return {
        job["metadata"]["name"]: job["metadata"]["uid"]
        for job in stand_in_objects(kube, "pathwaysjobs", NAMESPACE)
        if not job["metadata"].get("deletionTimestamp")
    }


def _running_job(task: TaskIdentity, name: str, *, names_its_task: bool, deployment: str = "") -> None:
    """A running job of ``task``, placed as the operator places one (nothing left running on
    purpose); without its task instance annotation (``names_its_task=False``) as a provider version
    before the sweep made it."""
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

    placed = place_spec(
        spec(),
        task,
        name=name,
        namespace=NAMESPACE,
        labels={},
        annotations=knobs(program_seconds=600),
        left_running=(),
        deployment=deployment,
    )
    manifest = placed.to_pathwaysjob()
    if not names_its_task:
        for annotation in (TASK_INSTANCE_ANNOTATION, LEFT_RUNNING_ANNOTATION):
            del manifest["metadata"]["annotations"][annotation]
    PathwaysJobHook(kubernetes_conn_id=CONN).create_job(manifest, NAMESPACE)


def test_a_sweep_ends_the_jobs_no_task_instance_follows_and_only_those(kube: Any) -> None:
    """Jobs handed on by tasks that succeeded once they were ready; then a user marks two of those
    task instances failed (no try runs to be killed, so nothing ends their jobs) and deletes one of
    two runs of another DAG. A dry run (the operator, in a DAG) reports what it would end; the sweep
    (the ``airflow pathways sweep-gke`` command) ends the job whose task instance was marked failed
    and the one whose run is gone, and leaves the jobs handed on, the job whose task keeps a killed
    job (``delete_on`` without ``kill``), a job that names no task instance (an older provider
    version's) and a job of a DAG with no run here (another Airflow deployment's)."""
    subjects = run_dag(load_dag(DAGS, "gke_sweep_subjects"))
    assert {task: outcome.state for task, outcome in subjects.items()} == dict.fromkeys(
        ("handed_on", "marked_failed_later", "kept_on_kill"), "success"
    )
    deleted = run_dag(load_dag(DAGS, "gke_sweep_run_deleted"))["served"]
    kept = run_dag(load_dag(DAGS, "gke_sweep_run_deleted"))["served"]
    assert deleted.state == kept.state == "success"
    _running_job(
        TaskIdentity("older_dag", "older_task", "manual__older", -1), "older-job", names_its_task=False
    )
    # another Airflow deployment's, in the same namespace: its DAG has no run here
    other = TaskIdentity("other_deployments_dag", "other_task", "manual__elsewhere", -1)
    _running_job(other, "other-deployments-job", names_its_task=True)
    set_task_state("gke_sweep_subjects", "marked_failed_later", "failed")
    set_task_state("gke_sweep_subjects", "kept_on_kill", "failed")
    delete_run("gke_sweep_run_deleted", deleted.run_id)
    before = jobs(kube)
    assert len(before) == 7

    dry = run_dag(load_dag(DAGS, "gke_sweep_dry_run"))["sweep"]
    assert dry.state == "success"
    reported = {(row["task_id"], row["run_id"]): row for row in dry.xcom["return_value"]}
    outcomes = {key: row["outcome"] for key, row in reported.items()}
    run = subjects["handed_on"].run_id
    assert outcomes == {
        ("handed_on", run): "kept",
        ("marked_failed_later", run): "would end",
        ("kept_on_kill", run): "kept",
        ("served", deleted.run_id): "would end",
        ("served", kept.run_id): "kept",
        ("other_task", "manual__elsewhere"): "kept",
    }
    assert reported[("served", deleted.run_id)]["state"] == "not found"
    assert reported[("kept_on_kill", run)]["reason"] == "its task leaves it running when failed"
    assert reported[("other_task", "manual__elsewhere")]["reason"].startswith("its DAG has no run here")
    assert jobs(kube) == before  # the dry run ended nothing

    # the sweep, as an operator runs it from the CLI (it reads the metadata database)
    table = airflow_cli("pathways", "sweep-gke", "--conn-id", CONN, "--namespace", NAMESPACE)
    assert table.splitlines()[-1] == "2 ended, 4 kept"
    assert _table_row(table, "gke_sweep_subjects.marked_failed_later").startswith("ended")
    assert _table_row(table, f"gke_sweep_run_deleted.served {deleted.run_id}").startswith("ended")
    ended = {row["job"].rsplit("/", 1)[1] for row in reported.values() if row["outcome"] == "would end"}
    wait_for(lambda: set(jobs(kube)) == set(before) - ended, timeout=30)
    assert jobs(kube) == {name: before[name] for name in set(before) - ended}  # the rest, the same objects
    for name in set(before) - ended:
        kube.request(
            "DELETE", f"/apis/pathways-job.pathways.domain/v1/namespaces/{NAMESPACE}/pathwaysjobs/{name}"
        )


def test_a_named_deployments_sweep_ends_only_its_own_jobs(kube: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Airflow deployments (``[pathways] deployment_name`` prod and staging) share a namespace and
    DAG ids: the run ids of scheduled runs are the same in both, so a task instance's name alone
    cannot tell whose job it is. prod's sweep ends its own job whose run is gone here and keeps
    staging's job of the same task instance, whatever prod's database says of it."""
    served = run_dag(load_dag(DAGS, "gke_sweep_run_deleted"))["served"]
    gone = TaskIdentity("gke_sweep_run_deleted", "served", "scheduled__2026-12-01T00:00:00+00:00", -1)
    _running_job(gone, "prods-job", names_its_task=True, deployment="prod")
    _running_job(gone, "stagings-job", names_its_task=True, deployment="staging")
    monkeypatch.setenv("AIRFLOW__PATHWAYS__DEPLOYMENT_NAME", "prod")
    table = airflow_cli("pathways", "sweep-gke", "--conn-id", CONN, "--namespace", NAMESPACE)
    rows = [line for line in table.splitlines() if "scheduled__2026-12-01" in line]
    assert len(rows) == 2 and table.splitlines()[-1] == "1 ended, 2 kept"
    (ended,) = [row for row in rows if row.startswith("ended")]
    (kept,) = [row for row in rows if row.startswith("kept")]
    assert "prods-job" in ended and "stagings-job" in kept
    assert "another Airflow deployment's (staging; this one is prod)" in kept
    wait_for(lambda: "prods-job" not in jobs(kube), timeout=30)
    assert "stagings-job" in jobs(kube)  # the same object
    monkeypatch.setenv("AIRFLOW__PATHWAYS__DEPLOYMENT_NAME", "prod staging")
    failed = subprocess.run(
        [str(Path(sys.executable).with_name("airflow")), "pathways", "sweep-gke", "--conn-id", CONN],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert failed.returncode != 0
    assert "[pathways] deployment_name: 'prod staging' is not one word" in failed.stderr
    for name in jobs(kube):
        kube.request(
            "DELETE", f"/apis/pathways-job.pathways.domain/v1/namespaces/{NAMESPACE}/pathwaysjobs/{name}"
        )
    assert served.state == "success"


def test_deployments_sharing_a_namespace_and_dag_ids_each_run_their_own_job(
    kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prod and staging (``[pathways] deployment_name``) share a namespace and DAG ids, so a run of
    the same logical date has the same run id in both. staging's task, whose run prod's database
    never saw and vice versa, creates a job of its own beside prod's instead of taking prod's (same
    default name, same owner labels: it was created once and followed by both), and each is marked
    with its deployment, so each deployment's sweep ends only its own."""
    dag = load_dag(DAGS, "gke_sweep_run_deleted")
    when = datetime(2026, 12, 1, tzinfo=timezone.utc)
    made = {}
    for name in ("prod", "staging"):
        monkeypatch.setenv("AIRFLOW__PATHWAYS__DEPLOYMENT_NAME", name)
        served = run_dag(dag, logical_date=when, run_after=when)["served"]
        assert served.state == "success", name
        made[name] = (served.run_id, served.xcom["name"])
        delete_run(dag.dag_id, served.run_id)  # the other deployment's database has no such run
    assert made["prod"][0] == made["staging"][0]  # one run id
    placed = {
        job["metadata"]["annotations"].get(DEPLOYMENT_ANNOTATION): job["metadata"]["name"]
        for job in stand_in_objects(kube, "pathwaysjobs", NAMESPACE)
    }
    assert placed == {name: job for name, (_, job) in made.items()}
    assert placed["prod"] != placed["staging"]
    for job in placed.values():
        kube.request(
            "DELETE", f"/apis/pathways-job.pathways.domain/v1/namespaces/{NAMESPACE}/pathwaysjobs/{job}"
        )
