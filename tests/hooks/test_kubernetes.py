"""PathwaysJobHook against the Kubernetes stand-in: status summaries and a watch that loses nothing."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
from typing import Any

import aiohttp
import psutil
import pytest

from airflow_provider_pathways.failures import FailureClass, PathwaysSpecRejected
from airflow_provider_pathways.gke.objects import (
    DEFAULT_STATUS_OPTIONS,
    JOBSET,
    PATHWAYS_JOB,
    JobKind,
    StatusOptions,
)
from airflow_provider_pathways.gke.status import Phase
from airflow_provider_pathways.hooks import kubernetes as kubernetes_hook
from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
from tests.support.airflow_versions import AIRFLOW_V_3_0_PLUS
from tests.support.kube_jobs import CONN, new_spec, wait_for

pytestmark = pytest.mark.usefixtures("kube")
NS = "hook-tests"


@pytest.fixture
def hook() -> PathwaysJobHook:
    return PathwaysJobHook(kubernetes_conn_id=CONN)


def status_when(hook: PathwaysJobHook, name: str, check: Any, what: str, namespace: str = NS) -> Any:
    return wait_for(lambda: (s := hook.get_status(name, namespace)) and check(s) and s, what=what)


def test_slices_come_up_one_by_one_and_the_program_completes(hook: PathwaysJobHook) -> None:
    # Each partial state lasts 1 s: polling sees it unless one status read takes that long (0.2 s
    # was missed once on a 2-core machine running two suites). The watch tests pin every change.
    spec = new_spec(NS, slices=3, slice_delay_seconds=1.0, program_seconds=0.5)
    hook.create_job(spec.to_pathwaysjob(), NS)
    seen = set()

    def progressed(status: Any) -> bool:
        seen.add(status.slices_ready)
        return status.phase is Phase.SUCCEEDED

    final = status_when(hook, spec.name, progressed, "completion")
    assert {1, 2} <= seen  # partial readiness is visible, slice by slice
    assert final.slices_total == 3 and final.failure is None
    assert "Number of JAX devices is" in hook.read_main_container_log(spec.name, NS)
    assert hook.delete_job(spec.name, NS) is True
    hook.wait_until_deleted(spec.name, NS, JobKind.PATHWAYS_JOB, 15)
    assert hook.delete_job(spec.name, NS) is False  # already gone: fine


def test_a_taken_name_and_a_refused_object_are_the_providers_own_errors(hook: PathwaysJobHook) -> None:
    """The hook translates the API server's answers to a create: 409 Conflict (a Kubernetes API
    server's answer to a create whose name exists) is JobNameTaken naming the job, 422 (the
    schema's refusal, as the PathwaysJob CRD's openAPIV3Schema makes it) is PathwaysSpecRejected
    with the server's message; the operator decides from those, never from ApiException."""
    spec = new_spec(NS, program_seconds=30)
    hook.create_job(spec.to_pathwaysjob(), NS)
    with pytest.raises(kubernetes_hook.JobNameTaken) as taken:
        hook.create_job(spec.to_pathwaysjob(), NS)
    assert (taken.value.ref.name, taken.value.ref.namespace) == (spec.name, NS)
    refused = spec.to_pathwaysjob()
    refused["metadata"]["name"] = "Bad_Name"
    with pytest.raises(
        PathwaysSpecRejected, match=rf"the API server rejected {NS}/Bad_Name: .*metadata.name"
    ):
        hook.create_job(refused, NS)
    assert hook.delete_job(spec.name, NS) is True


def test_failing_program_reports_its_exit_code(hook: PathwaysJobHook) -> None:
    spec = new_spec(NS, program_exit_code=7, program_log="boom")
    hook.create_job(spec.to_pathwaysjob(), NS)
    final = status_when(hook, spec.name, lambda s: s.terminal, "failure")
    assert final.failure is FailureClass.USER_PROGRAM_FAILED
    assert final.exit_code == 7
    assert "exited with code 7" in final.message


def test_program_failure_is_recognised_from_jobs_when_pods_are_gone(hook: PathwaysJobHook) -> None:
    spec = new_spec(NS, program_exit_code=2, delete_pods_after_failure="true")
    hook.create_job(spec.to_pathwaysjob(), NS)
    final = status_when(hook, spec.name, lambda s: s.terminal, "failure")
    wait_for(lambda: not hook.list_pods(spec.name, NS), what="pods to vanish")
    final = hook.get_status(spec.name, NS)
    assert final.failure is FailureClass.USER_PROGRAM_FAILED
    assert "pods are gone" in final.message


@pytest.mark.parametrize("action", ["preempt-slice", "lose-node"])
def test_lost_slice_without_restarts_left_is_preemption(
    hook: PathwaysJobHook, kube: Any, action: str
) -> None:
    spec = new_spec(NS, program_seconds=30)
    hook.create_job(spec.to_pathwaysjob(), NS)
    status_when(hook, spec.name, lambda s: s.slices_ready == 2, "slices ready")
    kube.action(NS, spec.name, action, slice=0)
    final = status_when(hook, spec.name, lambda s: s.terminal, "failure")
    assert final.failure is FailureClass.PREEMPTED
    assert "preempted" in final.message
    hook.delete_job(spec.name, NS)


def test_preempted_slice_with_restarts_left_restarts_the_jobset(hook: PathwaysJobHook, kube: Any) -> None:
    spec = new_spec(NS, max_restarts=2, program_seconds=1)
    hook.create_job(spec.to_pathwaysjob(), NS)
    status_when(hook, spec.name, lambda s: s.slices_ready == 2, "slices ready")
    kube.action(NS, spec.name, "preempt-slice", slice=1)
    final = status_when(hook, spec.name, lambda s: s.terminal, "completion after restart")
    assert final.phase is Phase.SUCCEEDED
    assert final.restarts == 1


@pytest.mark.parametrize("action", ["suspend", "evict"])
def test_suspension_and_eviction_are_preemption_not_failure(
    hook: PathwaysJobHook, kube: Any, action: str
) -> None:
    spec = new_spec(NS, program_seconds=30)
    hook.create_job(spec.to_pathwaysjob(), NS)
    status_when(hook, spec.name, lambda s: s.slices_ready == 2, "slices ready")
    kube.action(NS, spec.name, action)
    status = status_when(hook, spec.name, lambda s: s.phase is Phase.SUSPENDED, "suspension")
    assert status.failure is FailureClass.PREEMPTED and not status.terminal
    kube.action(NS, spec.name, "resume")
    status_when(hook, spec.name, lambda s: s.phase is Phase.RUNNING, "resumed")
    hook.delete_job(spec.name, NS)


def test_invalid_topology_is_a_rejected_spec_naming_the_topology(hook: PathwaysJobHook) -> None:
    manifest = new_spec(NS).to_pathwaysjob()
    manifest["spec"]["workers"][0].update({"type": "ct6e-standard-4t", "topology": "3x3"})
    hook.create_job(manifest, NS)
    name = manifest["metadata"]["name"]
    final = status_when(hook, name, lambda s: s.terminal, "rejection")
    assert final.failure is FailureClass.SPEC_REJECTED
    assert "'3x3'" in final.message and "ct6e-standard-4t" in final.message
    assert hook.get_object(PATHWAYS_JOB, name, NS) is not None


def test_deleted_job_is_reported_as_gone(hook: PathwaysJobHook) -> None:
    status = hook.get_status("never-created", NS)
    assert status.phase is Phase.DELETED and status.terminal


def test_worker_replicated_job_name_is_configurable(hook: PathwaysJobHook) -> None:
    spec = new_spec(NS)
    jobset = spec.to_jobset()
    for rjob in jobset["spec"]["replicatedJobs"]:
        if rjob["name"] == "worker":
            rjob["name"] = "pathways-worker"
    hook.create_job(jobset, NS)
    options = StatusOptions(kind=JobKind.JOBSET, worker_replicated_job="pathways-worker")
    final = wait_for(
        lambda: (s := hook.get_status(spec.name, NS, options)) and s.terminal and s, what="completion"
    )
    assert final.phase is Phase.SUCCEEDED and final.slices_total == 2


def held_in_kueue(slices: int) -> Any:
    """A job Kueue holds until the test admits it: its slices come up only once the watch runs, one
    every 0.5 s, each its own JobSet change (none already past when the watch starts)."""
    spec = new_spec(
        NS, slices=slices, slice_delay_seconds=0.5, program_seconds=0.5, kueue_admit_after_seconds="never"
    )
    spec.labels = {"kueue.x-k8s.io/queue-name": "multislice-queue"}
    return spec


async def test_watch_survives_a_dropped_stream_and_a_410(hook: PathwaysJobHook, kube: Any) -> None:
    spec = held_in_kueue(slices=3)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    kube.control("requests/reset")
    seen: list[Any] = []

    async def follow() -> None:
        async for status in hook.a_watch_status(spec.name, NS, watch_timeout_seconds=60):
            seen.append(status)
            if len(seen) == 1:
                await asyncio.to_thread(kube.action, NS, spec.name, "admit")
            if status.slices_ready == 1 and len([s for s in seen if s.slices_ready == 1]) == 1:
                await asyncio.to_thread(kube.control, "watches/drop")
            if status.slices_ready == 2 and len([s for s in seen if s.slices_ready == 2]) == 1:
                await asyncio.to_thread(kube.control, "compact")
                await asyncio.to_thread(kube.control, "watches/drop")

    await asyncio.wait_for(follow(), 30)
    assert seen[0].phase is Phase.QUEUED
    assert seen[-1].phase is Phase.SUCCEEDED
    assert [s.slices_ready for s in seen if s.phase is not Phase.SUCCEEDED][-1] == 3
    watches = kube.control("requests")["by_verb"].get("watch", 0)
    assert watches >= 3  # the stream was reopened after each drop


def api_warnings(logs: list[dict[str, Any]]) -> list[str]:
    """The hook's warnings that an outage of the API server began."""
    return [
        e["event"] for e in logs if e.get("log_level") == "warning" and "Kubernetes API error" in e["event"]
    ]


@pytest.mark.parametrize("how", ["eof", "reset"])
async def test_a_watch_cut_by_its_peer_is_reopened_at_once_and_is_no_outage(
    hook: PathwaysJobHook, kube: Any, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A load balancer or proxy in front of the API server cuts long requests: the connection of a
    watch that has been delivering events is closed before the chunked body's end (``eof``) or reset
    (``reset``). The watch is reopened at once from the last resourceVersion: no warning, no outage,
    no reconnect counted (``on_recovered``, which sends ``pathways.trigger.reconnects``)."""
    spec = held_in_kueue(slices=3)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    recovered: list[float] = []

    async def on_recovered(lasted: float) -> None:
        recovered.append(lasted)

    seen: list[Any] = []
    watches = 0
    structlog = pytest.importorskip("structlog") if AIRFLOW_V_3_0_PLUS else None  # Airflow 2: logging
    with structlog.testing.capture_logs() if structlog else contextlib.nullcontext([]) as logs:
        async for status in hook.a_watch_status(
            spec.name, NS, watch_timeout_seconds=60, on_recovered=on_recovered
        ):
            seen.append(status)
            if len(seen) == 1:
                await asyncio.to_thread(kube.action, NS, spec.name, "admit")
            if status.slices_ready == 1 and not watches:  # the watch delivered this change: cut it
                watches = kube.control("requests")["by_verb"].get("watch", 0)
                assert (await asyncio.to_thread(kube.control, "watches/drop", how=how))["dropped"] >= 1
    assert seen[-1].phase is Phase.SUCCEEDED
    assert [s.slices_ready for s in seen if s.phase is not Phase.SUCCEEDED][-1] == 3  # no change lost
    assert kube.control("requests")["by_verb"].get("watch", 0) > watches  # reopened
    assert recovered == []
    assert api_warnings(logs) == [] and "Kubernetes API error" not in caplog.text


async def test_a_watch_cut_right_after_it_opened_is_a_failure_not_a_cut(
    hook: PathwaysJobHook, kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut before it delivered any event, right after it opened, a watch did not really work
    (client-go's "very short watch": less than a second and no event, ``tools/cache/reflector.go``):
    the error reaches the wait, which starts its outage window (warning, backoff, reconnect counted)
    rather than reopening in a tight loop. (The limit is raised here: a slow machine must not make
    the cut late.)"""
    monkeypatch.setattr(kubernetes_hook, "VERY_SHORT_WATCH_SECONDS", 30.0)
    spec = new_spec(NS, headless=True, max_ready_slices=0)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    async for status in hook.a_watch_status(spec.name, NS):  # settle: nothing changes after this
        if status.head_ready:
            break
    async with hook.a_client() as client:
        watch = kubernetes_hook.JobWatch(hook, client, spec.name, NS, DEFAULT_STATUS_OPTIONS, 60)
        await watch.relist()
        changing = asyncio.ensure_future(watch.next_change())
        await wait_for_async(lambda: bool(watch.streams), "the watch to open")
        await asyncio.to_thread(kube.control, "watches/drop")
        with pytest.raises(aiohttp.ClientPayloadError):
            await asyncio.wait_for(changing, 30)
        watch.close_streams()
    await hook.a_delete_job(spec.name, NS)


async def wait_for_async(check: Any, what: str, timeout: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await asyncio.to_thread(check):
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_watch_costs_a_few_requests_not_one_per_change(hook: PathwaysJobHook, kube: Any) -> None:
    spec = held_in_kueue(slices=4)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    kube.control("requests/reset")
    statuses = []
    async for status in hook.a_watch_status(spec.name, NS):
        statuses.append(status)
        if len(statuses) == 1:
            await asyncio.to_thread(kube.action, NS, spec.name, "admit")
    requests = kube.control("requests")["total"]
    assert statuses[0].phase is Phase.QUEUED and statuses[-1].phase is Phase.SUCCEEDED
    assert len(statuses) >= 4
    assert requests <= 10, kube.control("requests")


async def test_async_log_tail_matches_the_sync_one(hook: PathwaysJobHook) -> None:
    spec = new_spec(NS, program_log="first\nsecond\nthird")
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    final = [s async for s in hook.a_watch_status(spec.name, NS)][-1]
    assert final.phase is Phase.SUCCEEDED
    tail = await hook.a_read_main_container_log(spec.name, NS, tail_lines=2)
    assert tail.splitlines() == ["second", "third"]
    assert await asyncio.to_thread(hook.read_main_container_log, spec.name, NS, tail_lines=2) == tail


def test_a_rejected_token_never_appears_in_errors(kube: Any, tmp_path: Any) -> None:
    import yaml

    secret = "s3cr3t-token-do-not-print"
    config = yaml.safe_load(kube.kubeconfig.read_text())
    for user in config["users"]:
        user["user"]["token"] = secret
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    bad = PathwaysJobHook(kubernetes_conn_id=None, config_file=str(path))
    with pytest.raises(Exception) as caught:
        bad.get_status("any", NS)
    assert "401" in str(caught.value)
    assert secret not in str(caught.value) and secret not in repr(caught.value)

    from airflow_provider_pathways.triggers.pathways_job import PathwaysJobTrigger

    trigger = PathwaysJobTrigger(name="any", namespace=NS, kubernetes_conn_id=None, config_file=str(path))
    event = asyncio.run(anext_event(trigger))
    assert event["status"] == "error" and "401" in event["message"]
    assert secret not in event["message"]


async def anext_event(trigger: Any) -> Any:
    events = [e async for e in trigger.run()]
    return events[0].payload


async def test_many_isolated_drops_do_not_end_the_wait(hook: PathwaysJobHook, kube: Any) -> None:
    spec = new_spec(NS, headless=True, max_ready_slices=0)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    statuses = hook.a_watch_status(spec.name, NS, outage_tolerance=2)
    while not (await statuses.__anext__()).head_ready:  # settle: the JobSet exists, nothing changes now
        pass

    async def drop_repeatedly() -> None:
        for _ in range(5):  # drops over more than the outage tolerance, each followed by a reconnect
            before = kube.control("requests")["by_verb"].get("watch", 0)
            await asyncio.to_thread(kube.control, "watches/drop")
            deadline = asyncio.get_running_loop().time() + 10
            while kube.control("requests")["by_verb"].get("watch", 0) <= before:
                assert asyncio.get_running_loop().time() < deadline, "the watch was not reopened"
                await asyncio.sleep(0.05)
        await asyncio.to_thread(kube.action, NS, spec.name, "suspend")

    dropper = asyncio.ensure_future(drop_repeatedly())
    status = await asyncio.wait_for(statuses.__anext__(), 30)
    await dropper
    await statuses.aclose()
    assert status.phase is Phase.SUSPENDED  # the change after the drops still arrives
    await hook.a_delete_job(spec.name, NS)


async def test_a_watch_lasts_until_the_server_ends_it_not_the_clients_default_timeout(
    hook: PathwaysJobHook, kube: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """cncf-kubernetes' async client cuts a request at ``API_TIMEOUT`` (60 s) unless it is told
    otherwise (kube_client.py, ``_TimeoutAsyncK8sApiClient.call_api``); a watch asks the server for
    ``timeoutSeconds`` and must run that long, without an API error in the task log each time."""
    from airflow.providers.cncf.kubernetes import kube_client

    monkeypatch.setattr(kube_client, "API_TIMEOUT", 1)  # the client's default, shortened
    spec = new_spec(NS, headless=True, max_ready_slices=0)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    statuses = hook.a_watch_status(spec.name, NS, watch_timeout_seconds=3)
    while not (await statuses.__anext__()).head_ready:  # settle: nothing changes from now on
        pass
    opened = kube.control("requests")["by_verb"].get("watch", 0)
    waiting = asyncio.ensure_future(statuses.__anext__())
    deadline = asyncio.get_running_loop().time() + 15
    while kube.control("requests")["by_verb"].get("watch", 0) <= opened:  # the server ended it (3 s)
        assert asyncio.get_running_loop().time() < deadline, "the server never ended the watch"
        await asyncio.sleep(0.1)
    await asyncio.to_thread(kube.action, NS, spec.name, "suspend")
    status = await asyncio.wait_for(waiting, 15)
    await statuses.aclose()
    assert status.phase is Phase.SUSPENDED
    logged = "".join(capfd.readouterr())  # what the task log shows (Airflow's structlog output)
    assert "Kubernetes API error" not in logged and "answers again" not in logged
    await hook.a_delete_job(spec.name, NS)


def test_a_delete_whose_preconditions_fail_is_refused_with_409_and_deletes_nothing(
    hook: PathwaysJobHook,
) -> None:
    """Kubernetes API, ``DeleteOptions.preconditions``: "Must be fulfilled before a deletion is
    carried out. If not possible, a 409 Conflict status will be returned" (the apiserver words it
    ``Precondition failed: UID in precondition: ..., UID in object meta: ...``)."""
    from kubernetes_asyncio.client.exceptions import ApiException

    spec = new_spec(NS, headless=True)
    created = hook.create_job(spec.to_pathwaysjob(), NS)["metadata"]
    for wrong in ({"uid": "not-its-uid"}, {"uid": created["uid"], "resourceVersion": "1"}):
        with pytest.raises(ApiException) as refused:
            hook.delete_job(spec.name or "", NS, preconditions=wrong)
        assert refused.value.status == 409
        assert "Precondition failed" in str(refused.value.body)
        assert hook.get_object(PATHWAYS_JOB, spec.name or "", NS) is not None
    exact = {"uid": created["uid"]}
    assert hook.delete_job(spec.name or "", NS, preconditions=exact) is True
    assert hook.delete_job(spec.name or "", NS, preconditions=exact) is False  # gone: 404 first


def test_a_task_instances_jobs_are_found_by_its_owner_labels_whatever_their_names(
    hook: PathwaysJobHook,
) -> None:
    from airflow_provider_pathways.gke.task_job import airflow_labels

    namespace = "owned-jobs"
    ours, theirs = (airflow_labels("dag", "train", run, -1) for run in ("manual__1", "manual__2"))
    renamed, other = new_spec(namespace, headless=True), new_spec(namespace, headless=True)
    renamed.labels, other.labels = ours, theirs
    hook.create_job(renamed.to_pathwaysjob(), namespace)
    hook.create_job(other.to_pathwaysjob(), namespace)
    wait_for(lambda: hook.get_object(JOBSET, renamed.name or "", namespace), what="its JobSet")

    found = hook.owned_jobs(namespace, ours)

    # the PathwaysJob once (its JobSet carries the same labels, but is not a job of its own)
    assert [(ref.kind, ref.name) for ref in found] == [("PathwaysJob", renamed.name)]
    for spec in (renamed, other):
        hook.delete_job(spec.name or "", namespace)


def _loop_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == "kubernetes-hook-loop"}


def test_sync_calls_share_one_client_and_a_closed_hook_leaves_no_thread_or_connection(kube: Any) -> None:
    """A worker or DAG processor that makes hooks all day must not collect threads or sockets."""
    gc.collect()  # hooks of earlier tests
    before, connections = _loop_threads(), len(psutil.Process().net_connections("tcp"))
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    for _ in range(5):
        assert hook.get_status("never-created", NS).phase is Phase.DELETED
    assert len(_loop_threads() - before) == 1
    assert len(psutil.Process().net_connections("tcp")) <= connections + 1  # one kept-alive connection
    hook.close()
    assert not _loop_threads() - before
    assert len(psutil.Process().net_connections("tcp")) <= connections
    forgotten = PathwaysJobHook(kubernetes_conn_id=CONN)
    forgotten.get_status("never-created", NS)
    started = _loop_threads() - before
    assert len(started) == 1
    del forgotten
    gc.collect()
    assert not any(thread.is_alive() for thread in started)  # garbage-collected: closed the same way


def test_a_hook_used_before_a_fork_works_in_the_child(hook: PathwaysJobHook) -> None:
    """Celery's prefork pool and Airflow's task runner fork: the child gets the hook's objects but
    not its loop thread."""
    assert hook.get_status("never-created", NS).phase is Phase.DELETED
    child = os.fork()
    if child == 0:  # pragma: no cover  (the child reports through its exit code)
        try:
            code = 0 if hook.get_status("never-created", NS).phase is Phase.DELETED else 1
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert hook.get_status("never-created", NS).phase is Phase.DELETED  # the parent's hook still works


async def test_sync_methods_work_where_an_event_loop_already_runs(hook: PathwaysJobHook) -> None:
    """A ``@task`` or a callback that runs its own event loop can still call the sync methods."""
    assert hook.get_status("never-created", NS).phase is Phase.DELETED
    assert (await hook.a_get_status("never-created", NS)).phase is Phase.DELETED
