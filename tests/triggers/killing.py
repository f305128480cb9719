"""Killing a running trigger as Airflow 3.3's triggerer does when a user kills the deferred task.

``TriggerRunner.cancel_triggers`` cancels the trigger's task with the message ``user-action``;
``run_trigger`` then awaits ``asyncio.wait_for(trigger.on_kill(), on_kill_timeout)`` and swallows a
``CancelledError`` of it. The supervisor keeps the trigger in ``cancelling_triggers`` and sends it in
``to_cancel`` of every state sync until the runner reports it finished, so the task is cancelled again
on every loop while ``on_kill`` runs (airflow-core 3.3, ``jobs/triggerer_job_runner.py``)."""

from __future__ import annotations

import asyncio
import contextlib

from airflow.triggers.base import BaseTrigger

USER_ACTION = "user-action"
ON_KILL_TIMEOUT = 30.0


async def kill_as_the_triggerer_does(trigger: BaseTrigger) -> None:
    """Run ``trigger``'s wait, then cancel it as a user's kill does, again and again until it ends."""

    async def run_trigger() -> None:
        try:
            async for _ in trigger.run():
                raise AssertionError("the trigger fired before it was killed")
        except asyncio.CancelledError as cancelled:
            if cancelled.args and cancelled.args[0] == USER_ACTION:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait_for(trigger.on_kill(), timeout=ON_KILL_TIMEOUT)
            raise

    task = asyncio.create_task(run_trigger())
    await asyncio.sleep(0.5)  # the trigger waits (polls, or watches)
    while not task.done():
        task.cancel(USER_ACTION)
        await asyncio.sleep(0)
    with contextlib.suppress(asyncio.CancelledError):
        await task
