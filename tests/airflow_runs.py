"""Run DAGs from the test DAGs folder with ``dag.test()`` and read back what a user would see."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any


@dataclass
class TaskOutcome:
    """Final state of one task instance and what it pushed to XCom."""

    state: str
    try_number: int
    xcom: dict[str, Any] = field(default_factory=dict)


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
    from airflow.sdk import DAG

    for value in vars(_module(filename)).values():
        if isinstance(value, DAG) and value.dag_id == dag_id:
            return value
    raise LookupError(f"{dag_id} not in {filename}")


def run_dag(dag: Any, conf: dict[str, Any] | None = None, **test_args: Any) -> dict[str, TaskOutcome]:
    """Run ``dag`` once with ``dag.test()`` (``test_args``: e.g. ``logical_date`` and ``run_after``,
    which fix the run id); outcomes by task id (``task_id[i]`` for mapped tasks)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    run = dag.test(run_conf=conf, **test_args)
    outcomes: dict[str, TaskOutcome] = {}
    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == run.run_id)
        ).all()
        for ti in tis:
            key = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
            outcomes[key] = TaskOutcome(
                state=str(getattr(ti.state, "value", ti.state)), try_number=ti.try_number
            )
        rows = session.scalars(
            select(XComModel).where(XComModel.dag_id == dag.dag_id, XComModel.run_id == run.run_id)
        ).all()
        for row in rows:
            key = row.task_id if row.map_index < 0 else f"{row.task_id}[{row.map_index}]"
            if key in outcomes:
                outcomes[key].xcom[row.key] = XComModel.deserialize_value(row)
    return outcomes
