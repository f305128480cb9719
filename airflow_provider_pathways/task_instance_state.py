"""The state a task instance has now, as the metadata database holds it, and what it says of the
job its tries follow: the trigger reads it when it is cancelled, the try before it submits or defers
(a user may have marked or cleared the task instance before Airflow could kill the try)."""

from __future__ import annotations

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


def read_task_instance_state(ti: Any) -> str | None:
    """The state of ``ti`` now: None when it has none (cleared), and :data:`NOT_FOUND` when it does
    not exist. Airflow 3 asks the execution API (through the task's or the triggerer's supervisor);
    Airflow 2 reads the metadata database."""
    from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_0_PLUS

    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        map_index = getattr(ti, "map_index", -1)
        map_index = -1 if map_index is None else int(map_index)
        states = RuntimeTaskInstance.get_task_states(
            dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id], map_index=map_index
        )
        # The execution API keys a mapped task instance as "<task_id>_<map_index>".
        key = f"{ti.task_id}_{map_index}" if map_index >= 0 else ti.task_id
        run = states.get(ti.run_id) or {}
        if key not in run:
            return NOT_FOUND
        state = run[key]
    else:
        found = _state_from_database(ti)
        if found is None:
            return NOT_FOUND
        (state,) = found
    return None if state is None else str(getattr(state, "value", state))


def _state_from_database(ti: Any) -> Any:
    """Airflow 2: the row's state, or None without a row."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.execute(
            select(TaskInstance.state).where(
                TaskInstance.dag_id == ti.dag_id,
                TaskInstance.task_id == ti.task_id,
                TaskInstance.run_id == ti.run_id,
                TaskInstance.map_index == ti.map_index,
            )
        ).first()
