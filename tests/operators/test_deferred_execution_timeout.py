"""A deferred try that reaches its ``execution_timeout`` gives up on its job by the failure policy
(``delete_on``/``cancel_on_kill``), whichever of the trigger's own timeout event and the scheduler's
trigger timeout (``__fail__``) resumes it.

Airflow 2 sets a deferral's trigger timeout to the try's start plus ``execution_timeout``: the very
moment the trigger's deadline is. Its scheduler checks trigger timeouts every 15 s, so it may resume
the try with ``__fail__`` before the trigger's timeout event arrives; and either way the try resumes
past its ``execution_timeout``, which Airflow 2 fails before the resume method runs, calling
``on_kill`` on a fresh operator that knows no job (the job was left running, also on the last try).
``dag.test()`` cannot show it (Airflow 2's sets no start date, so no deadline), so these tests run
the task instance as a worker does (``TaskInstance.run``), and run the scheduler's own
``check_trigger_timeouts``. Airflow 3 (3.0 to 3.3) sets a trigger timeout only from ``defer()``'s
``timeout``, which the operators never pass: the last test holds that.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from datetime import timedelta
from typing import Any

import pendulum
import pytest
from airflow.providers.common.compat.sdk import AirflowTaskTimeout
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_0_PLUS

from airflow_provider_pathways.gke.task_job import safe_label_value
from tests.support.airflow_runs import load_dag
from tests.support.kube_jobs import stand_in_objects

DAGS = "gke_scenarios.py"
AIRFLOW_2 = pytest.mark.skipif(AIRFLOW_V_3_0_PLUS, reason="Airflow 2's deferral and resumption")
pytestmark = pytest.mark.versioned


def _worker_run(dag_id: str, dags: str = DAGS, conf: dict[str, Any] | None = None) -> Any:
    """A run of ``dag_id`` (in ``dags``) whose ``train`` task instance a worker runs (no
    ``dag.test()``)."""
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType

    dag = load_dag(dags, dag_id)
    now = pendulum.now("UTC")
    run = dag.create_dagrun(
        run_id=f"worker__{uuid.uuid4().hex[:8]}",
        run_type=DagRunType.MANUAL,
        state=DagRunState.RUNNING,
        execution_date=now,
        data_interval=(now, now),
        start_date=now,
        conf=conf,
    )
    ti = run.get_task_instance("train")
    with create_session() as session:  # the try the scheduler queues
        ti.try_number = 1
        session.merge(ti)
    ti.task = dag.get_task("train")
    ti.dags_file = dags  # for the fresh operator of the resumed try
    return ti


def _run(ti: Any) -> None:
    """What a worker's ``airflow tasks run --raw`` does with the task instance."""
    ti.run(ignore_all_deps=True, ignore_ti_state=True)


def _defer(ti: Any) -> None:
    from airflow.utils.state import TaskInstanceState

    _run(ti)
    ti.refresh_from_db()
    assert ti.state == TaskInstanceState.DEFERRED
    # the scheduler's timeout of the deferral is the trigger's own deadline
    assert ti.trigger_timeout == ti.start_date + ti.task.execution_timeout


def _trigger_fires(ti: Any) -> None:
    """The triggerer runs the trigger to its first event (its timeout) and hands it to the task."""
    from airflow.models.dag import _run_inline_trigger
    from airflow.models.trigger import Trigger
    from airflow.utils.module_loading import import_string

    row = Trigger.bulk_fetch([ti.trigger_id])[ti.trigger_id]  # rebuilt from its row, as the triggerer does
    event = _run_inline_trigger(import_string(row.classpath)(**row.kwargs))
    assert event.payload["status"] == "timeout" and event.payload["reason"] == "execution_timeout"
    Trigger.submit_event(ti.trigger_id, event)


def _scheduler_times_out(ti: Any) -> None:
    """The scheduler's sweep sees the trigger timeout pass before any event arrived."""
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

    while pendulum.now("UTC") <= ti.trigger_timeout:
        time.sleep(0.2)
    SchedulerJobRunner(job=Job()).check_trigger_timeouts()
    ti.refresh_from_db()
    assert (ti.next_method, ti.next_kwargs) == ("__fail__", {"error": "Trigger/execution timeout"})


def _fresh_operator(ti: Any) -> None:
    """The task of the resumed try as a worker parses it: an operator that knows no job."""
    ti.task = load_dag(ti.dags_file, ti.dag_id).get_task("train")


def _resume(ti: Any, resumed_by: str) -> None:
    """The try resumes at its execution_timeout: the trigger's timeout event, or the scheduler's
    trigger timeout first; a worker runs it with a fresh operator, and Airflow fails it."""
    (_trigger_fires if resumed_by == "trigger" else _scheduler_times_out)(ti)
    ti.refresh_from_db()
    _fresh_operator(ti)
    with pytest.raises(AirflowTaskTimeout, match="within the task's execution_timeout"):
        _run(ti)
    ti.refresh_from_db()


@AIRFLOW_2
@pytest.mark.parametrize("resumed_by", ["trigger", "scheduler"])
@pytest.mark.parametrize(("events", "kept"), [(("success", "failure"), False), (("kill",), True)])
def test_a_deferred_try_at_its_execution_timeout_applies_the_failure_policy_on_airflow_2(
    kube: Any, resumed_by: str, events: tuple[str, ...], kept: bool
) -> None:
    from airflow.utils.state import TaskInstanceState

    ti = _worker_run(f"gke_deferred_timeout_delete_on_{'_'.join(events)}")
    _defer(ti)
    _resume(ti, resumed_by)
    assert (ti.state, ti.try_number) == (TaskInstanceState.FAILED, 1)
    run_label = safe_label_value(ti.run_id)
    jobs = [
        job
        for job in stand_in_objects(kube, "pathwaysjobs", f"deferred-timeout-{'-'.join(events)}")
        if (job["metadata"].get("labels") or {}).get("airflow.apache.org/run_id") == run_label
    ]
    assert [job["metadata"].get("deletionTimestamp") is None for job in jobs] == ([True] if kept else [])


@AIRFLOW_2
@pytest.mark.parametrize("resumed_by", ["trigger", "scheduler"])
@pytest.mark.parametrize("conn", ["slurm_rest", "slurm_ssh"])
def test_a_deferred_slurm_job_at_its_execution_timeout_is_cancelled_on_airflow_2(
    slurm_cluster: dict[str, str], conn: str, resumed_by: str
) -> None:
    """``cancel_on_kill`` (the default): the job is cancelled. Without a ``task_state_store`` and
    with the deferral's arguments dropped (``__fail__``), the job is found by the task instance's
    marker in its comment."""
    from airflow.utils.state import TaskInstanceState

    from tests.operators.test_slurm import job_state
    from tests.slurm.conftest import wait_for

    name = f"deferred-timeout-{uuid.uuid4().hex[:8]}"
    ti = _worker_run(
        "slurm_deferred_execution_timeout", "slurm_scenarios.py", {"conn": conn, "job_name": name}
    )
    _defer(ti)
    job_id = ti.xcom_pull(task_ids="train", key="job_id")
    try:
        assert job_state(job_id) in ("PENDING", "RUNNING")
        _resume(ti, resumed_by)
        assert (ti.state, ti.try_number) == (TaskInstanceState.FAILED, 1)
        wait_for(lambda: job_state(job_id) == "CANCELLED", f"Slurm job {job_id} to be cancelled", 20)
    finally:
        subprocess.run(["scancel", str(job_id)], check=False)  # what a failure left running


def test_the_operators_defer_without_a_trigger_timeout() -> None:
    """Airflow 3 gives a deferral a trigger timeout (after which its scheduler resumes the task with
    ``__fail__``) only from ``defer(timeout=...)``; the operators' triggers keep the deadline
    themselves, so they pass none, and Airflow 3 never times their deferrals out."""
    from airflow.providers.common.compat.sdk import TaskDeferred

    from airflow_provider_pathways.operators.slurm import SlurmJobOperator

    operator = SlurmJobOperator(
        task_id="train",
        script="#!/bin/bash\ntrue\n",
        deferrable=True,
        execution_timeout=timedelta(minutes=5),
        wait_timeout=60,
    )

    class TaskInstance:
        dag_id, task_id, run_id, map_index, try_number = "d", "train", "manual__1", -1, 1
        start_date = pendulum.now("UTC")

        def xcom_push(self, key: str, value: Any) -> None:
            pass

    with pytest.raises(TaskDeferred) as deferred:
        operator.follow_job(42, {"ti": TaskInstance()})  # type: ignore[arg-type]
    assert deferred.value.timeout is None
    assert deferred.value.trigger.deadline is not None  # the trigger's own
