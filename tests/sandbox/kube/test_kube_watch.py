"""Watch streams through ``kubernetes`` and ``kubernetes_asyncio``: resume, 410, drop, timeouts, load."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import pytest
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes_asyncio import client as aclient
from kubernetes_asyncio import config as aconfig
from kubernetes_asyncio import watch as awatch

PW = ("pathways-job.pathways.domain", "v1")
PATH = "/apis/pathways-job.pathways.domain/v1/namespaces/{ns}/pathwaysjobs"


async def _async_api(kube: Any) -> aclient.ApiClient:
    return await aconfig.new_client_from_config(config_file=str(kube.kubeconfig))


def _create(custom: k8s.CustomObjectsApi, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    return custom.create_namespaced_custom_object(*PW, namespace, "pathwaysjobs", manifest)


def _quiet(make: Any, name: str, **labels: str) -> dict[str, Any]:
    """A PathwaysJob whose controller writes no status (invalid topology sets only terminalState)."""
    return make(name, headless=True, topology="3x3", labels=labels or None)


def test_sync_watch_resumes_from_resource_version(custom, namespace, make_pathways_job, wait_for):
    first = _create(custom, namespace, _quiet(make_pathways_job, "w1"))
    wait_for(
        lambda: custom.get_namespaced_custom_object(*PW, namespace, "pathwaysjobs", "w1").get("status"),
        what="controller status write",
    )
    since = first["metadata"]["resourceVersion"]
    _create(custom, namespace, _quiet(make_pathways_job, "w2"))
    custom.delete_namespaced_custom_object(*PW, namespace, "pathwaysjobs", "w1")
    seen = []
    stream = k8s_watch.Watch().stream(
        custom.list_namespaced_custom_object,
        *PW,
        namespace,
        "pathwaysjobs",
        resource_version=since,
        timeout_seconds=1,
    )
    for event in stream:
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if ("DELETED", "w1") in seen:
            break
    assert seen[0] == ("MODIFIED", "w1")  # the controller's terminalState write
    assert ("ADDED", "w2") in seen and seen[-1] == ("DELETED", "w1")


def test_sync_watch_initial_state_and_timeout(custom, namespace, make_pathways_job):
    """A watch with timeoutSeconds=1 first lists what exists, then ends by itself once its time is up:
    not before (the lower bound cannot flake on a loaded machine), and well within a deadline."""
    _create(custom, namespace, _quiet(make_pathways_job, "init"))

    def watch() -> tuple[list[dict[str, Any]], float]:
        started = time.monotonic()
        stream = k8s_watch.Watch().stream(
            custom.list_namespaced_custom_object,
            *PW,
            namespace,
            "pathwaysjobs",
            resource_version="0",
            timeout_seconds=1,
        )
        return list(stream), time.monotonic() - started

    with ThreadPoolExecutor(1) as pool:
        events, elapsed = pool.submit(watch).result(timeout=60)  # a deadline: the stream ended on its own
    assert [e["type"] for e in events] == ["ADDED"] and events[0]["object"]["metadata"]["name"] == "init"
    assert elapsed >= 0.9  # it stayed open for its timeoutSeconds


async def test_async_watch_sends_watch_true_and_label_transitions(kube, custom, namespace, make_pathways_job):
    api = await _async_api(kube)
    try:
        aco = aclient.CustomObjectsApi(api)
        listing = await aco.list_namespaced_custom_object(*PW, namespace, "pathwaysjobs")
        since = listing["metadata"]["resourceVersion"]
        _create(custom, namespace, _quiet(make_pathways_job, "sel", tier="gold"))
        custom.patch_namespaced_custom_object(
            *PW, namespace, "pathwaysjobs", "sel", {"metadata": {"labels": {"tier": "x"}}}
        )
        seen = []
        async with awatch.Watch().stream(
            aco.list_namespaced_custom_object,
            *PW,
            namespace,
            "pathwaysjobs",
            label_selector="tier=gold",
            resource_version=since,
            timeout_seconds=1,
        ) as stream:
            async for event in stream:
                seen.append(event["type"])
                if event["type"] == "DELETED":
                    break
        # ADDED (created matching), maybe MODIFIED (controller status), DELETED (label no longer matches).
        assert seen[0] == "ADDED" and seen[-1] == "DELETED"
    finally:
        await api.close()


async def test_raw_watch_true_lowercase_and_bookmarks(kube, custom, namespace, make_pathways_job):
    headers = {"Authorization": f"Bearer {kube.token}"}
    url = kube.url + PATH.format(ns=namespace)
    async with aiohttp.ClientSession(headers=headers) as session:
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "2",
            "resourceVersion": "0",
        }
        async with session.get(url, params=params) as resp:
            assert resp.status == 200
            _create(custom, namespace, _quiet(make_pathways_job, "raw"))
            types = []
            while True:
                line = await resp.content.readline()
                if not line:
                    break
                event = json.loads(line)
                types.append(event["type"])
                if event["type"] == "BOOKMARK":
                    assert int(event["object"]["metadata"]["resourceVersion"]) > 0
                    break
            assert "ADDED" in types and types[-1] == "BOOKMARK"


def test_expired_after_compact_sync_and_async(kube, custom, namespace, make_pathways_job):
    created = _create(custom, namespace, _quiet(make_pathways_job, "old"))
    _create(custom, namespace, _quiet(make_pathways_job, "newer"))
    kube.control("compact")
    with pytest.raises(k8s.ApiException) as exc:
        for _ in k8s_watch.Watch().stream(
            custom.list_namespaced_custom_object,
            *PW,
            namespace,
            "pathwaysjobs",
            resource_version=created["metadata"]["resourceVersion"],
            timeout_seconds=2,
        ):
            pass
    assert exc.value.status == 410 and "Expired" in exc.value.reason

    async def run() -> None:
        api = await _async_api(kube)
        try:
            aco = aclient.CustomObjectsApi(api)
            with pytest.raises(aclient.ApiException) as aexc:
                async with awatch.Watch().stream(
                    aco.list_namespaced_custom_object,
                    *PW,
                    namespace,
                    "pathwaysjobs",
                    resource_version=created["metadata"]["resourceVersion"],
                    timeout_seconds=2,
                ) as stream:
                    async for _ in stream:
                        pass
            assert aexc.value.status == 410
        finally:
            await api.close()

    asyncio.run(run())
    # A watch from the current resourceVersion is still fine after compaction.
    current = custom.list_namespaced_custom_object(*PW, namespace, "pathwaysjobs")["metadata"][
        "resourceVersion"
    ]
    events = list(
        k8s_watch.Watch().stream(
            custom.list_namespaced_custom_object,
            *PW,
            namespace,
            "pathwaysjobs",
            resource_version=current,
            timeout_seconds=1,
        )
    )
    assert all(e["type"] != "ERROR" for e in events)


async def test_dropped_watch_breaks_the_stream(kube, namespace):
    api = await _async_api(kube)
    try:
        aco = aclient.CustomObjectsApi(api)
        w = awatch.Watch()

        async def consume() -> None:
            async for _ in w.stream(
                aco.list_namespaced_custom_object, *PW, namespace, "pathwaysjobs", timeout_seconds=600
            ):
                pass

        task = asyncio.create_task(consume())
        deadline = time.monotonic() + 60
        while kube.control("state")["openWatches"] < 1:
            assert time.monotonic() < deadline, "the watch never opened"
            await asyncio.sleep(0.02)
        assert kube.control("watches/drop")["dropped"] >= 1
        # The stream breaks with a connection error; without the drop it would run for 600 s, and
        # the 60 s here are a deadline, not a measurement.
        with pytest.raises(
            (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, aiohttp.ServerDisconnectedError)
        ):
            await asyncio.wait_for(task, 60)
    finally:
        await api.close()


@pytest.mark.slow
async def test_500_concurrent_watches_all_get_events(kube, custom, namespace, make_pathways_job):
    """500 open watches: the API still answers, each watch gets the new object's ADDED event. How
    fast it answers meanwhile is measured by bench/bench_kube_watches.py."""
    headers = {"Authorization": f"Bearer {kube.token}"}
    url = kube.url + PATH.format(ns=namespace)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
        responses = await asyncio.gather(
            *(session.get(url, params={"watch": "true", "timeoutSeconds": "300"}) for _ in range(500))
        )
        try:
            assert all(r.status == 200 for r in responses)
            async with session.get(f"{kube.url}/version") as version:
                assert version.status == 200
            _create(custom, namespace, _quiet(make_pathways_job, "fanout"))

            async def first_event(resp: aiohttp.ClientResponse) -> dict[str, Any]:
                return json.loads(await resp.content.readline())

            # A deadline for all 500 events, not a measurement.
            events = await asyncio.wait_for(asyncio.gather(*(first_event(r) for r in responses)), 120)
            assert all(e["type"] == "ADDED" and e["object"]["metadata"]["name"] == "fanout" for e in events)
            listing = custom.list_namespaced_custom_object(*PW, namespace, "pathwaysjobs")
            assert [item["metadata"]["name"] for item in listing["items"]] == ["fanout"]
        finally:
            for resp in responses:
                resp.close()


def test_bounded_history_expires_old_resource_versions():
    """The store keeps only ``history_limit`` events; older resourceVersions get one 410 ERROR line."""
    from sandbox.kube.resources import JOBSETS
    from sandbox.kube.store import Store

    async def run() -> None:
        store = Store(history_limit=3)
        for i in range(5):
            store.create(JOBSETS, _tiny_jobset(f"js{i}"), namespace="ns", from_api=False)
        expired = store.open_watch(JOBSETS, "ns", (), (), "1")
        [line] = list(expired.lines)
        event = json.loads(line)
        assert event["type"] == "ERROR" and event["object"]["code"] == 410
        assert event["object"]["reason"] == "Expired" and expired.closed == "expired"
        recent = store.open_watch(JOBSETS, "ns", (), (), "3")
        names = [json.loads(x)["object"]["metadata"]["name"] for x in recent.lines]
        assert names == ["js3", "js4"]

    asyncio.run(run())


def _tiny_jobset(name: str) -> dict[str, Any]:
    pod = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    return {
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": pod}}}]},
    }
