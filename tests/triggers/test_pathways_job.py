"""PathwaysJobTrigger: exact serialization, readiness events, and on_kill that deletes once."""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import Any

import pytest

from airflow_provider_pathways.gke.objects import PATHWAYS_JOB, JobKind, parse_time
from airflow_provider_pathways.gke.task_job import JobRef, airflow_labels
from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
from airflow_provider_pathways.triggers.pathways_job import PathwaysJobTrigger
from tests.support.kube_jobs import CONN, new_spec, wait_for
from tests.triggers.killing import kill_as_the_triggerer_does

NS = "trigger-tests"


def rebuild(trigger: PathwaysJobTrigger) -> PathwaysJobTrigger:
    path, kwargs = trigger.serialize()
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)(**kwargs)


def test_serialization_round_trips_exactly() -> None:
    trigger = PathwaysJobTrigger(
        name="train-1",
        namespace="ml",
        kubernetes_conn_id="gke",
        kind="JobSet",
        wait_until="ready",
        min_slices=3,
        worker_replicated_job="pathways-worker",
        main_container="jax-tpu",
        fail_on_suspend=False,
        delete_on_kill=False,
        watch_timeout_seconds=120,
        deadline=1_900_000_000.5,
    )
    again = rebuild(trigger)
    assert again.serialize() == trigger.serialize()
    assert rebuild(again).serialize() == trigger.serialize()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"wait_until": "soon"}, "wait_until"),
        ({"wait_until": "created"}, "wait_until"),
        ({"min_slices": 0}, "min_slices"),
        ({"kind": "Deployment"}, "kind"),
        ({"name": ""}, "name"),
        ({"watch_timeout_seconds": 0}, "watch_timeout_seconds"),
    ],
)
def test_invalid_arguments_are_refused_naming_them(kwargs: dict[str, Any], field: str) -> None:
    arguments = {"name": "x", "namespace": "ns", **kwargs}
    with pytest.raises(ValueError, match=field):
        PathwaysJobTrigger(**arguments)


@pytest.mark.usefixtures("kube")
async def test_fires_once_min_slices_are_ready_and_returns_the_status() -> None:
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    spec = new_spec(NS, slices=3, headless=True, max_ready_slices=2)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    trigger = PathwaysJobTrigger(
        name=spec.name, namespace=NS, kubernetes_conn_id=CONN, wait_until="ready", min_slices=2
    )
    events = [event async for event in trigger.run()]
    assert len(events) == 1
    job = events[0].payload["job"]
    assert events[0].payload["status"] == "done"
    assert (job["slices_ready"], job["slices_total"], job["head_ready"]) == (2, 3, True)
    await hook.a_delete_job(spec.name, NS)


@pytest.mark.usefixtures("kube")
async def test_on_kill_deletes_the_job_and_a_second_call_is_harmless() -> None:
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    spec = new_spec(NS, headless=True)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    trigger = PathwaysJobTrigger(name=spec.name, namespace=NS, kubernetes_conn_id=CONN)
    await trigger.on_kill()
    await trigger.on_kill()
    await asyncio.to_thread(hook.wait_until_deleted, spec.name, NS, JobKind.PATHWAYS_JOB, 15)
    assert await asyncio.to_thread(hook.get_object, PATHWAYS_JOB, spec.name, NS) is None


@pytest.mark.usefixtures("kube")
async def test_a_kill_the_triggerer_cancels_again_while_on_kill_runs_still_deletes_the_job() -> None:
    """Airflow 3.3's triggerer cancels the trigger on every loop until it finished, on_kill included
    (tests/triggers/killing.py): the delete must still be sent and the job be gone."""
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    spec = new_spec(NS, headless=True, max_ready_slices=0)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    trigger = PathwaysJobTrigger(name=spec.name, namespace=NS, kubernetes_conn_id=CONN, wait_until="ready")
    await kill_as_the_triggerer_does(trigger)
    await asyncio.to_thread(hook.wait_until_deleted, spec.name, NS, JobKind.PATHWAYS_JOB, 15)
    assert await asyncio.to_thread(hook.get_object, PATHWAYS_JOB, spec.name, NS) is None


@pytest.mark.usefixtures("kube")
async def test_on_kill_keeps_the_job_when_told_to() -> None:
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    spec = new_spec(NS, headless=True)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    trigger = PathwaysJobTrigger(name=spec.name, namespace=NS, kubernetes_conn_id=CONN, delete_on_kill=False)
    await trigger.on_kill()
    assert await asyncio.to_thread(hook.get_object, PATHWAYS_JOB, spec.name, NS) is not None
    await hook.a_delete_job(spec.name, NS)


@pytest.mark.usefixtures("kube")
async def test_wait_deadline_fires_a_timeout_event() -> None:
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    spec = new_spec(NS, headless=True, max_ready_slices=0)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    trigger = PathwaysJobTrigger(
        name=spec.name, namespace=NS, kubernetes_conn_id=CONN, wait_until="ready", deadline=time.time() + 0.5
    )
    events = [event async for event in trigger.run()]
    assert events[0].payload["status"] == "timeout"
    await hook.a_delete_job(spec.name, NS)


@pytest.mark.usefixtures("kube")
async def test_without_min_slices_every_slice_must_be_ready() -> None:
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    spec = new_spec(NS, slices=3, headless=True, max_ready_slices=2)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    trigger = PathwaysJobTrigger(
        name=spec.name, namespace=NS, kubernetes_conn_id=CONN, wait_until="ready", deadline=time.time() + 1.5
    )
    events = [event async for event in trigger.run()]
    assert events[0].payload["status"] == "timeout"  # 2 of 3 slices is not ready
    await hook.a_delete_job(spec.name, NS)


@pytest.mark.usefixtures("kube")
async def test_on_kill_of_a_superseded_try_leaves_the_job_a_newer_try_follows() -> None:
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    owner = airflow_labels("dag", "train", "manual__1", -1)
    spec = new_spec(NS, headless=True)
    spec.labels = owner
    created = await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    ref = JobRef.of(created, JobKind.PATHWAYS_JOB.value)
    await asyncio.to_thread(hook.mark_followed, ref, 2)  # try 2 reattached to it

    def trigger_of_try(try_number: int) -> PathwaysJobTrigger:
        return rebuild(
            PathwaysJobTrigger(
                name=ref.name,
                namespace=NS,
                kubernetes_conn_id=CONN,
                uid=ref.uid,
                owner_labels=owner,
                try_number=try_number,
            )
        )

    await trigger_of_try(1).on_kill()
    assert await asyncio.to_thread(hook.get_object, PATHWAYS_JOB, ref.name, NS) is not None
    await trigger_of_try(2).on_kill()
    await asyncio.to_thread(hook.wait_until_deleted, ref.name, NS, JobKind.PATHWAYS_JOB, 15)


@pytest.mark.usefixtures("kube")
async def test_a_trigger_that_starts_after_the_job_ran_reports_the_moments_the_job_recorded() -> None:
    """A trigger that a triggerer restart moved, or a retry's, may first look at a job that already
    ran: its timeline takes the moments the JobSet's conditions record (StartupPolicyInProgress,
    StartupPolicyCompleted, Completed: jobset ``updateCondition``), not the moment it looked."""
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    spec = new_spec(NS, slices=2, program_seconds=1.0)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    ended = await asyncio.to_thread(wait_for, lambda: (s := hook.get_status(spec.name, NS)).terminal and s)
    looked = time.time()
    trigger = PathwaysJobTrigger(name=spec.name, namespace=NS, kubernetes_conn_id=CONN)
    events = [event async for event in trigger.run()]
    timeline = events[0].payload["timeline"]
    assert events[0].payload["status"] == "done"
    assert timeline["submitted"] <= timeline["running"] <= timeline["ready"] <= timeline["ended"]
    # never seen running or ready: the recorded moments; its end: recorded, or seen within a second
    assert (timeline["running"], timeline["ready"]) == (
        parse_time(ended.started_at),
        parse_time(ended.ready_at),
    )
    end = parse_time(ended.ended_at)
    assert end is not None and (timeline["ended"] == end or looked <= timeline["ended"] < end + 1)
    # all slices came up at the recorded readiness: the slice line has that step
    assert [timeline["ready"], 2] in timeline["slices_ready"]
    await hook.a_delete_job(spec.name, NS)
