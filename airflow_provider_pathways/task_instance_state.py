"""The state a task instance has now, as the metadata database holds it, and what it says of the
job its tries follow: the trigger reads it when it is cancelled, the try before it submits or defers
(a user may have marked or cleared the task instance before Airflow could kill the try)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: What :func:`read_task_instance_state` answers for a task instance that does not exist (any more).
NOT_FOUND = "not found"
#: Task instance states in which a try of the task instance follows the job, or will: a retry or a
#: resumed try reattaches to it, a deferred one waits on its trigger (run by another triggerer now)
#: or on a newer try's. A user's kill (mark failed, success or skipped; clear: no state) leaves none
#: of them; a trigger cancelled while its task instance is in one of them leaves the job alone.
A_TRY_FOLLOWS = frozenset(
    {
        "deferred",
        "scheduled",
        "queued",
        "running",
        "restarting",
        "up_for_retry",
        "up_for_reschedule",
        "awaiting_input",
    }
)


def ends_the_job(state: str | None) -> bool:
    """Whether a trigger cancelled while its task instance is in ``state`` (None: cleared;
    :data:`NOT_FOUND`: its run is gone) ends the job: only when no try follows it any more."""
    return state not in A_TRY_FOLLOWS


#: A task instance's key: dag id, task id, run id, map index (-1 when not mapped).
TaskInstanceKey = tuple[str, str, str, int]


def task_instance_key(ti: Any) -> TaskInstanceKey:
    """The key of ``ti`` (anything with ``dag_id``, ``task_id``, ``run_id`` and ``map_index``)."""
    map_index = getattr(ti, "map_index", -1)
    return (str(ti.dag_id), str(ti.task_id), str(ti.run_id), -1 if map_index is None else int(map_index))


def read_task_instance_state(ti: Any) -> str | None:
    """The state of ``ti`` now: None when it has none (cleared), and :data:`NOT_FOUND` when it does
    not exist. Airflow 3 asks the execution API (through the task's or the triggerer's supervisor;
    without one it raises, and the caller does not know); Airflow 2 reads the metadata database."""
    from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_0_PLUS

    key = task_instance_key(ti)
    found = _states_from_execution_api({key}) if AIRFLOW_V_3_0_PLUS else _states_from_database({key})
    return _answer(key, found)


def read_task_instance_states(keys: Iterable[TaskInstanceKey]) -> dict[TaskInstanceKey, str | None]:
    """The state of each task instance now (None: cleared; :data:`NOT_FOUND`: it does not exist).
    In an Airflow 3 task or triggerer, through the execution API (its supervisor: one request per
    DAG); elsewhere (Airflow 2, the ``airflow`` CLI), from the metadata database."""
    wanted = set(keys)
    found = _states_from_execution_api(wanted) if _has_execution_api() else _states_from_database(wanted)
    return {key: _answer(key, found) for key in wanted}


def _answer(key: TaskInstanceKey, found: dict[TaskInstanceKey, Any]) -> str | None:
    if key not in found:
        return NOT_FOUND
    return None if found[key] is None else _state_text(found[key])


def read_run_states(dag_id: str, task_id: str, map_index: int) -> dict[str, str | None]:
    """The state of the task instance ``dag_id.task_id[map_index]`` in each run that has it, by
    run id (None: cleared); through the execution API or the database as
    :func:`read_task_instance_states`."""
    if _has_execution_api():
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        name = _api_name(task_id, map_index)
        runs = RuntimeTaskInstance.get_task_states(dag_id=dag_id, task_ids=[task_id], map_index=map_index)
        found = {run_id: states[name] for run_id, states in runs.items() if name in states}
    else:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rows = session.execute(
                select(TaskInstance.run_id, TaskInstance.state).where(
                    TaskInstance.dag_id == dag_id,
                    TaskInstance.task_id == task_id,
                    TaskInstance.map_index == map_index,
                )
            )
            found = dict(rows.tuples().all())
    return {run_id: None if state is None else _state_text(state) for run_id, state in found.items()}


def dags_with_runs(dag_ids: Iterable[str]) -> set[str]:
    """Those of ``dag_ids`` that have a DAG run in this Airflow deployment (a job of a DAG with none
    may be another deployment's)."""
    wanted = sorted(set(dag_ids))
    if _has_execution_api():
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        return {dag_id for dag_id in wanted if RuntimeTaskInstance.get_dr_count(dag_id=dag_id) > 0}
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return set(session.scalars(select(DagRun.dag_id).where(DagRun.dag_id.in_(wanted)).distinct()))


def _state_text(state: Any) -> str:
    return str(getattr(state, "value", state))


def _has_execution_api() -> bool:
    """Whether this process talks to Airflow 3's execution API through a supervisor (a task's or the
    triggerer's); a CLI command or Airflow 2 reads the database."""
    from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_0_PLUS

    if not AIRFLOW_V_3_0_PLUS:
        return False
    from airflow.sdk.execution_time import task_runner

    return getattr(task_runner, "SUPERVISOR_COMMS", None) is not None


def _api_name(task_id: str, map_index: int) -> str:
    """How the execution API's task states name a task instance: ``<task_id>_<map_index>`` when
    mapped (airflow-core ``execution_api/routes/task_instances.py``, ``get_task_instance_states``)."""
    return f"{task_id}_{map_index}" if map_index >= 0 else task_id


def _states_from_execution_api(keys: set[TaskInstanceKey]) -> dict[TaskInstanceKey, Any]:
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    found: dict[TaskInstanceKey, Any] = {}
    for dag_id in sorted({key[0] for key in keys}):
        of_dag = [key for key in keys if key[0] == dag_id]
        map_indexes = {key[3] for key in of_dag}
        states = RuntimeTaskInstance.get_task_states(
            dag_id=dag_id,
            task_ids=sorted({key[1] for key in of_dag}),
            run_ids=sorted({key[2] for key in of_dag}),
            map_index=next(iter(map_indexes)) if len(map_indexes) == 1 else None,
        )
        for key in of_dag:
            _, task_id, run_id, map_index = key
            name = _api_name(task_id, map_index)
            run = states.get(run_id) or {}
            if name in run:
                found[key] = run[name]
    return found


def _states_from_database(keys: set[TaskInstanceKey]) -> dict[TaskInstanceKey, Any]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select, tuple_

    found: dict[TaskInstanceKey, Any] = {}
    ordered = sorted(keys)
    columns = (TaskInstance.dag_id, TaskInstance.task_id, TaskInstance.run_id, TaskInstance.map_index)
    with create_session() as session:
        for start in range(0, len(ordered), _DATABASE_BATCH):
            batch = ordered[start : start + _DATABASE_BATCH]
            rows = session.execute(select(*columns, TaskInstance.state).where(tuple_(*columns).in_(batch)))
            for dag_id, task_id, run_id, map_index, state in rows:
                found[(dag_id, task_id, run_id, int(map_index))] = state
    return found


#: Task instances read from the metadata database in one query.
_DATABASE_BATCH = 500
