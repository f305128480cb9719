"""A trigger that ends its job when the user kills the deferred task, on every Airflow version, and
only then."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from airflow.triggers.base import BaseTrigger

from airflow_provider_pathways.airflow_features import TRIGGER_ON_KILL
from airflow_provider_pathways.task_instance_state import ends_the_job, read_task_instance_state

#: Airflow's default of ``[triggerer] on_kill_timeout``: how long the triggerer waits for ``on_kill``.
TRIGGERER_ON_KILL_TIMEOUT = 30.0
#: Ending the job on kill must be done this long before the triggerer's ``on_kill_timeout``.
KILL_MARGIN = 2.0
#: How often the task instance's state is read before the trigger gives up on knowing it.
STATE_READS = 3


class KillableTrigger(BaseTrigger):
    """
    Base of the triggers whose ``on_kill`` deletes or cancels the job they follow.

    From Airflow 3.3 the triggerer calls ``on_kill`` when a user kills the deferred task (mark
    failed or success, clear), and also when it cancels a trigger it no longer owns: a triggerer
    that stalled without dying (a long pause, a stopped container, its event loop blocked) finds, when
    it goes on, that its heartbeat lapsed and another triggerer took its triggers over, and cancels
    them with the same user-action message (airflow-core 3.3:
    ``TriggerRunnerSupervisor.update_triggers`` puts every trigger missing from its assignment in
    ``cancelling_triggers``, and ``TriggerRunner.cancel_triggers`` cancels each with
    ``_USER_ACTION_CANCEL_MSG``; apache/airflow#73454). The trigger cannot see which: ``on_kill``
    therefore reads the task instance's state and ends the job only when no try of the task
    instance follows it any more (:func:`ends_the_job`): the task was marked, or cleared, or its
    run is gone. While the task instance is deferred (on this trigger, moved; or on a newer try's),
    or a try of it runs, is queued or will retry, that try owns the job, which is left alone.

    Before 3.3 the triggerer only cancels the trigger and calls ``cleanup``, also when it stops or
    hands the trigger over: ``cleanup`` takes the same decision, as cncf-kubernetes' pod trigger
    does. The trigger sets ``_fired`` once it sent its event: the task then owns the job's end.

    Airflow 3.3's triggerer cancels the trigger again on every loop until it has finished, also while
    ``on_kill`` runs (the supervisor sends the cancelled trigger in ``to_cancel`` of each state sync
    until the runner reports it finished): the decision and :meth:`end_job_on_kill` run to their
    end through those cancellations, within the triggerer's ``on_kill_timeout``.
    """

    _fired: bool = False

    async def on_kill(self) -> None:
        """End the job per the task's kill policy if the task instance no longer waits on it;
        harmless if it already ended."""
        if not self._fired:
            await self._settle_kill()

    async def end_job_on_kill(self) -> None:
        """Delete or cancel the job if the kill policy says so (the subclass's)."""

    async def cleanup(self) -> None:
        await super().cleanup()
        if TRIGGER_ON_KILL or self._fired:
            return
        await self._settle_kill()

    async def _settle_kill(self) -> None:
        limit = kill_time_limit()
        if not await run_through_cancellation(self._end_job_if_killed(), limit):
            self.log.warning(
                "Ending the job on kill took longer than %gs; it may still be running: end it by hand",
                limit,
            )

    async def _end_job_if_killed(self) -> None:
        ti = getattr(self, "task_instance", None)
        if ti is not None:
            try:
                state = await _read_state(ti)
            except Exception as err:
                self.log.warning(
                    "The trigger was cancelled, but the task instance's state could not be read (%s): "
                    "the job is left running, since another triggerer may run this trigger now; if the "
                    "task was killed, end the job by hand",
                    err,
                )
                return
            if not ends_the_job(state):
                self.log.info(
                    "The trigger was cancelled, but the task instance is %s: a try of it still follows "
                    "the job (this trigger runs on another triggerer now, or the task resumed or "
                    "retries), so the job is left to it",
                    state,
                )
                return
            self.log.info(
                "The task instance is %s: ending its job as the kill policy says", state or "cleared"
            )
        await self.end_job_on_kill()


async def _read_state(ti: Any) -> str | None:
    """:func:`~airflow_provider_pathways.task_instance_state.read_task_instance_state`, read again (up
    to :data:`STATE_READS` times) when it fails."""
    from asgiref.sync import sync_to_async

    for attempt in range(1, STATE_READS + 1):
        try:
            return await sync_to_async(read_task_instance_state)(ti)
        except Exception:
            if attempt == STATE_READS:
                raise
            await asyncio.sleep(0.5 * attempt)
    raise AssertionError("unreachable")  # pragma: no cover


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
