"""A trigger that ends its job when the user kills the deferred task, on every Airflow version."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from airflow.triggers.base import BaseTrigger

from airflow_provider_pathways.airflow_features import TRIGGER_ON_KILL

#: Airflow's default of ``[triggerer] on_kill_timeout``: how long the triggerer waits for ``on_kill``.
TRIGGERER_ON_KILL_TIMEOUT = 30.0
#: Ending the job on kill must be done this long before the triggerer's ``on_kill_timeout``.
KILL_MARGIN = 2.0


class KillableTrigger(BaseTrigger):
    """
    Base of the triggers whose ``on_kill`` deletes or cancels the job they follow.

    From Airflow 3.3 the triggerer calls ``on_kill`` when a user kills the deferred task (mark
    failed or success, clear). Before, it only cancels the trigger and calls ``cleanup``, also when
    the triggerer stops or hands the trigger to another triggerer, where the job must live on: so
    ``cleanup`` asks for the task instance's state, as cncf-kubernetes' pod trigger does, and ends the
    job only when the task is no longer deferred (a user acted). The trigger sets ``_fired`` once it
    sent its event: the task then owns the job's end.

    Airflow 3.3's triggerer cancels the trigger again on every loop until it has finished, also while
    ``on_kill`` runs (the supervisor sends the cancelled trigger in ``to_cancel`` of each state sync
    until the runner reports it finished): :meth:`end_job_on_kill` runs to its end through those
    cancellations, within the triggerer's ``on_kill_timeout``.
    """

    _fired: bool = False

    async def on_kill(self) -> None:
        """End the job per the task's kill policy; harmless if it already ended."""
        if self._fired:
            return
        limit = kill_time_limit()
        if not await run_through_cancellation(self.end_job_on_kill(), limit):
            self.log.warning(
                "Ending the job on kill took longer than %gs; it may still be running: end it by hand",
                limit,
            )

    async def end_job_on_kill(self) -> None:
        """Delete or cancel the job if the kill policy says so (the subclass's)."""

    async def cleanup(self) -> None:
        await super().cleanup()
        if TRIGGER_ON_KILL or self._fired:
            return
        try:
            state = await task_instance_state(self.task_instance)
        except Exception as err:
            self.log.warning("Could not read the task instance's state (%s); the job is left running", err)
            return
        if state is not None and state != "deferred":
            self.log.info("The task is %s: ending its job, as the kill policy says", state)
            await self.on_kill()


def kill_time_limit() -> float:
    """How long :meth:`KillableTrigger.on_kill` may take: the triggerer's ``on_kill_timeout`` less a
    margin (that setting exists from Airflow 3.3; its default before)."""
    from airflow.configuration import conf

    timeout = conf.getfloat("triggerer", "on_kill_timeout", fallback=TRIGGERER_ON_KILL_TIMEOUT)
    return max(timeout - KILL_MARGIN, timeout / 2)


async def run_through_cancellation(work: Coroutine[Any, Any, None], limit: float) -> bool:
    """Run ``work`` to its end even when the calling task is cancelled meanwhile, for at most ``limit``
    seconds (then it is cancelled); False when it did not end in time. Its exception is raised."""
    loop = asyncio.get_running_loop()
    job = asyncio.ensure_future(work)
    deadline = loop.time() + limit
    swallowed = 0
    try:
        while not job.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                job.cancel()
                return False
            try:
                await asyncio.wait({job}, timeout=remaining)
            except asyncio.CancelledError:
                swallowed += 1
    finally:
        current = asyncio.current_task()
        for _ in range(swallowed if hasattr(current, "uncancel") else 0):
            current.uncancel()  # type: ignore[union-attr]  # the cancellations were answered
    job.result()
    return True


async def task_instance_state(ti: Any) -> str | None:
    """The state of the trigger's task instance now (None when it is not known)."""
    if ti is None:
        return None
    from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_0_PLUS
    from asgiref.sync import sync_to_async

    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
            dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id], map_index=ti.map_index
        )
        # The execution API keys a mapped task instance as "<task_id>_<map_index>".
        key = f"{ti.task_id}_{ti.map_index}" if ti.map_index >= 0 else ti.task_id
        state = (states.get(ti.run_id) or {}).get(key)
    else:
        state = await sync_to_async(_state_from_database)(ti)
    return None if state is None else str(getattr(state, "value", state))


def _state_from_database(ti: Any) -> Any:
    """Airflow 2: the triggerer reads the metadata database."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(
            select(TaskInstance.state).where(
                TaskInstance.dag_id == ti.dag_id,
                TaskInstance.task_id == ti.task_id,
                TaskInstance.run_id == ti.run_id,
                TaskInstance.map_index == ti.map_index,
            )
        )
