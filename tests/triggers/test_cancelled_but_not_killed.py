"""A cancelled trigger ends its job only when its task instance no longer waits on it
(triggers/killable.py).

Airflow 3.3's triggerer cancels with the message of a user's kill, and so calls ``on_kill``, both a
trigger whose task a user killed and a trigger it no longer owns: a triggerer that stalled finds,
when it goes on, that its heartbeat lapsed and another triggerer took its triggers over
(``TriggerRunnerSupervisor.update_triggers`` puts them in ``cancelling_triggers``,
``TriggerRunner.cancel_triggers`` cancels each with ``_USER_ACTION_CANCEL_MSG``; the deployment suite
meets it for real, ``stalled_triggerer`` in tests/deployment/test_triggerer_failover.py). The trigger
asks for its task instance's state as a trigger does in a triggerer, through the execution API
(``RuntimeTaskInstance.get_task_states`` over the runner's channel to its supervisor): here that
channel answers with the state the API would, in the API's shape.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_1_PLUS

from airflow_provider_pathways import task_instance_state
from airflow_provider_pathways.gke.objects import PATHWAYS_JOB, JobKind
from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
from airflow_provider_pathways.triggers import killable
from airflow_provider_pathways.triggers.pathways_job import PathwaysJobTrigger
from tests.support.kube_jobs import CONN, new_spec
from tests.triggers.killing import kill_as_the_triggerer_does

NS = "cancelled-not-killed"
RUN_ID = "manual__2026-01-01T00:00:00+00:00"
pytestmark = [
    pytest.mark.usefixtures("kube"),
    pytest.mark.skipif(not AIRFLOW_V_3_0_PLUS, reason="Airflow 2's trigger reads the metadata database"),
    # Airflow 3.0's trigger reads its connection over the same channel, which the fake below does
    # not answer; the deployment suite's stalled_triggerer runs the state read for real on 3.3
    pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="Airflow 3.0 reads connections over the channel"),
]
GONE = object()  # the task instance does not exist (its run was deleted)


class Supervisor:
    """The triggerer runner's channel to its supervisor, answering ``GetTaskStates`` as the execution
    API does (``{run_id: {task_id or "<task_id>_<map_index>": state}}``, a state None once cleared)."""

    def __init__(self, state: Any, failures: int = 0) -> None:
        self.state = state
        self.failures = failures
        self.asked = 0

    def send(self, msg: Any) -> Any:
        from airflow.sdk.execution_time.comms import GetTaskStates, TaskStatesResult

        assert isinstance(msg, GetTaskStates)
        self.asked += 1
        if self.asked <= self.failures:
            raise ConnectionError("the supervisor did not answer")
        run = {} if self.state is GONE else {"train": self.state}
        return TaskStatesResult(task_states={RUN_ID: run} if run else {})


@pytest.fixture
def supervisor(monkeypatch: pytest.MonkeyPatch) -> Any:
    from airflow.sdk.execution_time import task_runner

    def install(state: Any, failures: int = 0) -> Supervisor:
        channel = Supervisor(state, failures)
        monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", channel, raising=False)
        return channel

    return install


async def deferred_trigger() -> tuple[PathwaysJobHook, PathwaysJobTrigger]:
    """A job that waits, and the trigger of its deferred task instance."""
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    spec = new_spec(NS, headless=True, max_ready_slices=0)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    trigger = PathwaysJobTrigger(name=spec.name, namespace=NS, kubernetes_conn_id=CONN, wait_until="ready")
    trigger.task_instance = SimpleNamespace(
        dag_id="train_dag", task_id="train", run_id=RUN_ID, map_index=-1, try_number=1
    )
    return hook, trigger


async def settled() -> None:
    """Wait for the work still running on the loop: under Airflow's repeated cancellations
    ``on_kill`` returns early and its decision goes on (``run_through_cancellation``)."""
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    await asyncio.wait_for(asyncio.gather(*others, return_exceptions=True), 30)


async def job_exists(hook: PathwaysJobHook, name: str) -> bool:
    obj = await asyncio.to_thread(hook.get_object, PATHWAYS_JOB, name, NS)
    return obj is not None and not obj["metadata"].get("deletionTimestamp")


@pytest.mark.parametrize(
    ("state", "ends_job"),
    [
        pytest.param("deferred", False, id="deferred: moved to another triggerer"),
        pytest.param("running", False, id="running: the task resumed and follows the job"),
        pytest.param("up_for_retry", False, id="up for retry: the retry reattaches"),
        pytest.param("failed", True, id="marked failed"),
        pytest.param("success", True, id="marked success"),
        pytest.param(None, True, id="cleared"),
        pytest.param(GONE, True, id="its run deleted"),
    ],
)
async def test_a_cancelled_trigger_ends_the_job_only_when_no_try_follows_it(
    supervisor: Any, capfd: pytest.CaptureFixture[str], state: Any, ends_job: bool
) -> None:
    hook, trigger = await deferred_trigger()
    asked = supervisor(state)

    await kill_as_the_triggerer_does(trigger)  # cancelled again and again while it decides
    await settled()

    assert asked.asked == 1
    logs = capfd.readouterr().out
    if ends_job:
        await asyncio.to_thread(hook.wait_until_deleted, trigger.name, NS, JobKind.PATHWAYS_JOB, 15)
        assert "ending its job as the kill policy says" in logs
    else:
        assert await job_exists(hook, trigger.name)
        assert f"the task instance is {state}: a try of it still follows the job" in logs
        await hook.a_delete_job(trigger.name, NS)


async def test_a_state_that_cannot_be_read_leaves_the_job_and_says_so(
    supervisor: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """The trigger may run on another triggerer now: it deletes nothing it cannot tell is killed."""
    hook, trigger = await deferred_trigger()
    asked = supervisor("failed", failures=killable.STATE_READS)

    await trigger.on_kill()

    assert asked.asked == killable.STATE_READS
    assert await job_exists(hook, trigger.name)
    logs = capfd.readouterr().out
    assert "the task instance's state could not be read" in logs
    assert "end the job by hand" in logs
    await hook.a_delete_job(trigger.name, NS)


async def test_a_state_read_that_fails_once_is_read_again(supervisor: Any) -> None:
    hook, trigger = await deferred_trigger()
    asked = supervisor("failed", failures=1)

    await trigger.on_kill()

    assert asked.asked == 2
    await asyncio.to_thread(hook.wait_until_deleted, trigger.name, NS, JobKind.PATHWAYS_JOB, 15)


def test_every_task_instance_state_is_decided() -> None:
    """A user's kill leaves the task instance ended (marked) or without a state (cleared); every
    other state has a try that follows the job. A state a new Airflow adds must be placed."""
    from airflow.utils.state import TaskInstanceState

    killed = {"success", "failed", "skipped", "upstream_failed", "removed"}
    states = {state.value for state in TaskInstanceState}
    follows, ends_the_job = task_instance_state.A_TRY_FOLLOWS, task_instance_state.ends_the_job
    assert states - (killed | follows) == set()  # (3.3 added awaiting_input)
    assert not killed & follows
    assert all(ends_the_job(state) for state in (*killed, None, task_instance_state.NOT_FOUND))
    assert not any(ends_the_job(state) for state in follows)
