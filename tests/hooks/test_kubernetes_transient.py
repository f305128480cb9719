"""The GKE hook rides out an overloaded or failing API server, and never retries a refused request.

What a real API server sends: 429 with ``Retry-After`` from API priority and fairness, 5xx from an
unhealthy server (cncf-kubernetes retries the same calls in ``generic_api_retry``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from airflow_provider_pathways.failures import PathwaysSpecRejected
from airflow_provider_pathways.gke.objects import PATHWAYS_JOB
from airflow_provider_pathways.gke.status import Phase
from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
from airflow_provider_pathways.transient import OutageTooLong
from tests.support.kube_jobs import CONN, new_spec

pytestmark = pytest.mark.usefixtures("kube")
NS = "transient-tests"


@pytest.fixture
def hook() -> PathwaysJobHook:
    return PathwaysJobHook(kubernetes_conn_id=CONN)


def faults(kube: Any, status: int, count: int, retry_after: float | None = None) -> None:
    params: dict[str, Any] = {"status": status, "count": count}
    if retry_after is not None:
        params["retry_after"] = retry_after
    kube.control("faults", method="POST", **params)


def injected(kube: Any) -> int:
    return sum(v for k, v in kube.control("requests")["by_verb"].items() if k == "fault")


def test_create_and_get_ride_out_5xx_and_429_honouring_retry_after(hook: PathwaysJobHook, kube: Any) -> None:
    spec = new_spec(NS, headless=True)
    kube.control("requests/reset")
    faults(kube, 503, 2)
    hook.create_job(spec.to_pathwaysjob(), NS)  # two 503s, then created
    faults(kube, 429, 1, retry_after=2)
    started = time.monotonic()
    found = hook.get_object(PATHWAYS_JOB, spec.name, NS)
    assert found is not None and found["metadata"]["name"] == spec.name
    assert time.monotonic() - started >= 2  # waited as long as the server asked
    assert injected(kube) == 3
    assert hook.delete_job(spec.name, NS) is True


def test_a_request_timeout_is_retried(hook: PathwaysJobHook, kube: Any) -> None:
    """408: the server, or a load balancer in front of it, did not receive the whole request and did
    nothing; like Cloud Storage (https://cloud.google.com/storage/docs/retry-strategy: "HTTP 408,
    429, and 5xx"), every client of the provider sends it again."""
    spec = new_spec(NS, headless=True)
    kube.control("requests/reset")
    faults(kube, 408, 1)
    hook.create_job(spec.to_pathwaysjob(), NS)
    assert injected(kube) == 1
    assert hook.get_object(PATHWAYS_JOB, spec.name, NS) is not None
    assert hook.delete_job(spec.name, NS) is True


def test_refused_request_is_never_retried(hook: PathwaysJobHook, kube: Any) -> None:
    spec = new_spec(NS, headless=True)
    manifest = spec.to_pathwaysjob()
    manifest["spec"]["workers"][0]["numSlices"] = "two"  # the CRD schema refuses it: 422
    kube.control("requests/reset")
    with pytest.raises(PathwaysSpecRejected, match="numSlices") as caught:
        hook.create_job(manifest, NS)
    assert isinstance(caught.value.__cause__, ApiException) and caught.value.__cause__.status == 422
    assert kube.control("requests")["by_verb_resource"].get("create pathwaysjobs", 0) == 1


def clear_faults(kube: Any) -> None:
    kube.control("faults", method="POST", count=0, clear=1)


@pytest.mark.slow
def test_a_longer_outage_ends_the_call_with_the_server_error(hook: PathwaysJobHook, kube: Any) -> None:
    faults(kube, 503, 50)
    try:
        with pytest.raises(ApiException) as caught:
            hook.get_object(PATHWAYS_JOB, "never-created", NS)
        assert caught.value.status == 503
        assert kube.control("faults", method="POST", count=0)["pending"] == 50 - hook.call_retry.attempts
    finally:
        clear_faults(kube)


@pytest.mark.slow
async def test_watch_rides_out_an_outage_shorter_than_its_tolerance(hook: PathwaysJobHook, kube: Any) -> None:
    spec = new_spec(NS, program_seconds=1.0)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    seen: list[Any] = []
    async for status in hook.a_watch_status(spec.name, NS, outage_tolerance=60):
        seen.append(status)
        if len(seen) == 1:
            await asyncio.to_thread(faults, kube, 503, 6)
            await asyncio.to_thread(kube.control, "watches/drop")
    assert seen[-1].phase is Phase.SUCCEEDED
    await hook.a_delete_job(spec.name, NS)


async def test_watch_gives_up_after_its_tolerance_naming_the_server(hook: PathwaysJobHook, kube: Any) -> None:
    spec = new_spec(NS, headless=True)
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    statuses = hook.a_watch_status(spec.name, NS, outage_tolerance=2)
    await statuses.__anext__()
    await asyncio.to_thread(faults, kube, 503, 1000)
    await asyncio.to_thread(kube.control, "watches/drop")
    try:
        with pytest.raises(OutageTooLong) as caught:
            while True:
                await asyncio.wait_for(statuses.__anext__(), 60)
        assert "Kubernetes API server at http://127.0.0.1:" in str(caught.value)
        assert "tolerance 2s" in str(caught.value)
    finally:
        await asyncio.to_thread(clear_faults, kube)
    await hook.a_delete_job(spec.name, NS)
