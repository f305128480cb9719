"""A deferred task killed by its user ends its job on every Airflow (triggers/killable.py).

From Airflow 3.3 the triggerer calls ``on_kill`` (tested in test_pathways_job.py and the deployment
suite); ``cleanup``, which runs on every exit of a trigger, must then leave the job alone. Before
3.3 only ``cleanup`` runs, also when a triggerer stops or hands the trigger over: it ends the job
only when the task instance is no longer deferred. On Airflow 2 the trigger reads that state from
the metadata database (as cncf-kubernetes' pod trigger does), which this test sets up for real."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pendulum
import pytest
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_0_PLUS

from airflow_provider_pathways.airflow_features import TRIGGER_ON_KILL
from airflow_provider_pathways.gke.status import Phase
from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
from airflow_provider_pathways.triggers.pathways_job import PathwaysJobTrigger
from tests.support.kube_jobs import CONN, new_spec

NS = "legacy-kill"
pytestmark = pytest.mark.usefixtures("kube")


async def started_job() -> tuple[PathwaysJobHook, str]:
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    spec = new_spec(NS, headless=True, max_ready_slices=0)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    return hook, spec.name


async def job_exists(hook: PathwaysJobHook, name: str) -> bool:
    """Not deleted, nor being deleted."""
    status = await asyncio.to_thread(hook.get_status, name, NS)
    return status.phase not in (Phase.DELETED, Phase.TERMINATING)


@pytest.mark.skipif(not TRIGGER_ON_KILL, reason="Airflow 3.3's triggerer calls on_kill")
async def test_from_airflow_3_3_cleanup_leaves_the_job_to_on_kill() -> None:
    hook, name = await started_job()
    trigger = PathwaysJobTrigger(name=name, namespace=NS, kubernetes_conn_id=CONN)
    await trigger.cleanup()  # a triggerer that stops or hands the trigger over
    assert await job_exists(hook, name)
    await hook.a_delete_job(name, NS)


def task_instance_in(state: str) -> Any:
    """A task instance of a real DAG run in Airflow 2's metadata database, in ``state``."""
    from airflow.models.dag import DAG
    from airflow.operators.empty import EmptyOperator
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunType

    dag = DAG(f"legacy_kill_{uuid.uuid4().hex[:8]}", schedule=None, start_date=pendulum.datetime(2026, 1, 1))
    EmptyOperator(task_id="train", dag=dag)
    dag.sync_to_db()
    when = pendulum.now("UTC")
    run = dag.create_dagrun(
        run_id=f"manual__{when.isoformat()}",
        state="running",
        execution_date=when,
        data_interval=(when, when),
        run_type=DagRunType.MANUAL,
    )
    with create_session() as session:
        ti = run.get_task_instance("train", session=session)
        ti.state = state
        session.merge(ti)
    return ti


@pytest.mark.skipif(
    AIRFLOW_V_3_0_PLUS, reason="Airflow 2: the trigger reads the task's state from the database"
)
@pytest.mark.parametrize(("state", "ends_job"), [("failed", True), ("success", True), ("deferred", False)])
async def test_before_airflow_3_3_cleanup_ends_the_job_only_once_the_task_is_no_longer_deferred(
    state: str, ends_job: bool
) -> None:
    hook, name = await started_job()
    trigger = PathwaysJobTrigger(name=name, namespace=NS, kubernetes_conn_id=CONN)
    trigger.task_instance = await asyncio.to_thread(task_instance_in, state)
    await trigger.cleanup()
    assert await job_exists(hook, name) is not ends_job
    if not ends_job:
        await hook.a_delete_job(name, NS)
