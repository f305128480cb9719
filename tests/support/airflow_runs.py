"""Run DAGs from the test DAGs folder with ``dag.test()`` and read back what a user would see."""

from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any


@dataclass
class TaskOutcome:
    """Final state of one task instance and what it pushed to XCom."""

    state: str
    try_number: int
    xcom: dict[str, Any] = field(default_factory=dict)
    run_id: str = ""


@cache
def _module(filename: str) -> Any:
    path = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / filename
    spec = importlib.util.spec_from_file_location(f"test_dag_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_dag(filename: str, dag_id: str) -> Any:
    """The DAG ``dag_id`` defined in ``filename`` of the DAGs folder."""
    from airflow.providers.common.compat.sdk import DAG

    for value in vars(_module(filename)).values():
        if isinstance(value, DAG) and value.dag_id == dag_id:
            return value
    raise LookupError(f"{dag_id} not in {filename}")


def run_dag(dag: Any, conf: dict[str, Any] | None = None, **test_args: Any) -> dict[str, TaskOutcome]:
    """Run ``dag`` once with ``dag.test()`` (``test_args``: e.g. ``logical_date`` and ``run_after``,
    which fix the run id); outcomes by task id (``task_id[i]`` for mapped tasks)."""
    run = dag.test(run_conf=conf, **test_args)
    return outcomes_of(dag, run.run_id)


def clear_and_rerun(dag: Any, logical_date: datetime, *, keep_state: bool = True) -> dict[str, TaskOutcome]:
    """Clear the run of ``dag`` at ``logical_date`` the way the UI's *Clear* does (Airflow 3.3
    keeps each task's ``task_state_store``; ``keep_state=False``: its rows are deleted, as Airflow
    3.4 does on a clear unless asked to keep them), then run it again the way ``dag.test()`` runs one."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    scheduler_dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    with create_session() as session:
        run = session.scalar(
            select(DagRun).where(DagRun.dag_id == dag.dag_id, DagRun.logical_date == logical_date)
        )
        assert run is not None, f"no run of {dag.dag_id} at {logical_date}"
        tis = list(
            session.scalars(
                select(TaskInstance).where(
                    TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == run.run_id
                )
            )
        )
        clear_task_instances(tis, session, dag_run_state=DagRunState.RUNNING)
        run_id = run.run_id
        if not keep_state:
            from airflow.models.task_state_store import TaskStateStoreModel
            from sqlalchemy import delete

            session.execute(
                delete(TaskStateStoreModel).where(
                    TaskStateStoreModel.dag_id == dag.dag_id, TaskStateStoreModel.run_id == run_id
                )
            )
    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag.dag_id, DagRun.run_id == run_id))
        run.dag = scheduler_dag
        while run.state == DagRunState.RUNNING:
            session.expire_all()
            schedulable, _ = run.update_state(session=session)
            for ti in schedulable:
                ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            scheduled = [
                ti
                for ti in run.get_task_instances(session=session)
                if ti.state == TaskInstanceState.SCHEDULED
            ]
            for ti in scheduled:
                _run_task(ti=ti, task=dag.task_dict[ti.task_id], run_triggerer=True)
            if not scheduled:  # waiting for a retry delay: dag.test() waits the same way
                time.sleep(0.5)
    return outcomes_of(dag, run_id)


def outcomes_of(dag: Any, run_id: str) -> dict[str, TaskOutcome]:
    """What each task instance of run ``run_id`` ended as, and its XComs."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    try:
        from airflow.models.xcom import XComModel

        def value_of(row: Any) -> Any:
            return XComModel.deserialize_value(row)
    except ImportError:  # Airflow 2: the ORM class is XCom, whose rows load their value deserialized
        from airflow.models.xcom import XCom as XComModel

        def value_of(row: Any) -> Any:
            return row.value

    outcomes: dict[str, TaskOutcome] = {}
    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == run_id)
        ).all()
        for ti in tis:
            key = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
            outcomes[key] = TaskOutcome(
                state=str(getattr(ti.state, "value", ti.state)), try_number=ti.try_number, run_id=run_id
            )
        rows = session.scalars(
            select(XComModel).where(XComModel.dag_id == dag.dag_id, XComModel.run_id == run_id)
        ).all()
        for row in rows:
            key = row.task_id if row.map_index < 0 else f"{row.task_id}[{row.map_index}]"
            if key in outcomes:
                outcomes[key].xcom[row.key] = value_of(row)
    return outcomes


def set_task_state(dag_id: str, task_id: str, state: str, run_id: str | None = None) -> None:
    """What the UI's *Mark failed* (or *success*) does to task instances that are no longer running:
    their rows' state changes, and no try runs to be killed."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import update

    chosen = update(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id)
    if run_id is not None:
        chosen = chosen.where(TaskInstance.run_id == run_id)
    with create_session() as session:
        session.execute(chosen.values(state=state))


def airflow_cli(*args: str) -> str:
    """``airflow <args>`` as an operator runs it beside the deployment (same home, connections): its
    output; fails the test when the command fails."""
    import subprocess
    import sys

    done = subprocess.run(
        [str(Path(sys.executable).with_name("airflow")), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
