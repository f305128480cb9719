"""Fixtures for the Kubernetes stand-in tests: one stand-in per session, official clients, factories."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from sandbox.kube.launcher import KubeStandin, start_kube_standin

T = TypeVar("T")

PW_GROUP, PW_VERSION, PW_PLURAL = "pathways-job.pathways.domain", "v1", "pathwaysjobs"
JS_GROUP, JS_VERSION, JS_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
KNOB = "sandbox.pathways.dev/"
CONN_ID = "kube_sandbox"
# Knobs that keep lifecycle tests fast.
FAST = {
    f"{KNOB}slice-delay-seconds": "0.03",
    f"{KNOB}head-delay-seconds": "0.02",
    f"{KNOB}program-seconds": "0.2",
}


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeStandin]:
    """A stand-in started through the launcher (bookmarks every 0.3 s so the bookmark test is quick)."""
    state_dir: Path = tmp_path_factory.mktemp("kube-standin")
    standin = start_kube_standin(state_dir, extra_args=("--bookmark-interval", "0.3"))
    previous = os.environ.get(f"AIRFLOW_CONN_{CONN_ID.upper()}")
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = standin.airflow_connection()
    try:
        yield standin
    finally:
        if previous is None:
            os.environ.pop(f"AIRFLOW_CONN_{CONN_ID.upper()}", None)
        else:
            os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = previous
        standin.stop()


@pytest.fixture(scope="session")
def api_client(kube: KubeStandin) -> Iterator[k8s.ApiClient]:
    api = k8s_config.new_client_from_config(config_file=str(kube.kubeconfig))
    yield api
    api.close()


@pytest.fixture(scope="session")
def custom(api_client: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api_client)


@pytest.fixture(scope="session")
def core(api_client: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def batch(api_client: k8s.ApiClient) -> k8s.BatchV1Api:
    return k8s.BatchV1Api(api_client)


@pytest.fixture
def namespace() -> str:
    """A fresh namespace per test (the stand-in accepts any namespace)."""
    return f"t-{uuid.uuid4().hex[:10]}"


def _wait_for(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}; last value: {last!r}")


async def _async_wait_for(
    predicate: Callable[[], Awaitable[T]], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await predicate()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}; last value: {last!r}")


@pytest.fixture(scope="session")
def wait_for() -> Callable[..., Any]:
    """``wait_for(predicate, timeout=10, what="...")``: poll until truthy (deadline, not a fixed sleep)."""
    return _wait_for


@pytest.fixture(scope="session")
def async_wait_for() -> Callable[..., Any]:
    return _async_wait_for


def pathways_job_manifest(
    name: str,
    *,
    num_slices: int = 2,
    machine: str = "ct5lp-hightpu-4t",
    topology: str = "2x4",
    max_restarts: int = 0,
    headless: bool = False,
    main: str = "main",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A PathwaysJob like the upstream samples (``2x4`` v5e slices = 2 VMs each by default)."""
    controller: dict[str, Any] = {"deploymentMode": "default"}
    if not headless:
        controller["mainContainerName"] = main
        controller["template"] = {
            "spec": {
                "containers": [
                    {"name": main, "image": "python:3.12", "command": ["python", "-c", "print(1)"]}
                ]
            }
        }
    manifest: dict[str, Any] = {
        "apiVersion": f"{PW_GROUP}/{PW_VERSION}",
        "kind": "PathwaysJob",
        "metadata": {"name": name, "annotations": {**FAST, **(annotations or {})}},
        "spec": {
            "maxRestarts": max_restarts,
            "pathwaysDir": "gs://bucket/tmp",
            "workers": [{"type": machine, "topology": topology, "numSlices": num_slices}],
            "controller": controller,
        },
    }
    if labels:
        manifest["metadata"]["labels"] = labels
    return manifest


def plain_jobset_manifest(
    name: str,
    *,
    num_slices: int = 2,
    vms: int = 1,
    max_restarts: int = 0,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A plain JobSet of the shape current xpk renders (head with RM/proxy sidecars + user container)."""
    server = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:latest"
    sidecar = {
        "restartPolicy": "Always",
        "image": server,
    }
    return {
        "apiVersion": f"{JS_GROUP}/{JS_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "annotations": {**FAST, **(annotations or {})}},
        "spec": {
            "coordinator": {"replicatedJob": "pathways-head"},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": max_restarts, "restartStrategy": "Recreate"},
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["pathways-head"]},
            "replicatedJobs": [
                {
                    "name": "pathways-head",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "backoffLimit": 0,
                            "completionMode": "Indexed",
                            "completions": 1,
                            "parallelism": 1,
                            "template": {
                                "spec": {
                                    "initContainers": [
                                        {"name": "pathways-proxy", **sidecar},
                                        {"name": "pathways-rm", **sidecar},
                                    ],
                                    "containers": [
                                        {"name": "jax-tpu", "image": "gcr.io/project/runner:latest"}
                                    ],
                                    "restartPolicy": "Never",
                                }
                            },
                        }
                    },
                },
                {
                    "name": "worker",
                    "replicas": num_slices,
                    "template": {
                        "spec": {
                            "backoffLimit": 4,
                            "completionMode": "Indexed",
                            "completions": vms,
                            "parallelism": vms,
                            "template": {
                                "spec": {
                                    "containers": [
                                        {
                                            "name": "pathways-worker",
                                            "image": server,
                                            "resources": {"limits": {"google.com/tpu": "4"}},
                                        }
                                    ],
                                    "restartPolicy": "OnFailure",
                                }
                            },
                        }
                    },
                },
            ],
        },
    }


@pytest.fixture(scope="session")
def make_pathways_job() -> Callable[..., dict[str, Any]]:
    return pathways_job_manifest


@pytest.fixture(scope="session")
def make_jobset() -> Callable[..., dict[str, Any]]:
    return plain_jobset_manifest


@pytest.fixture(scope="session")
def pw_api(custom: k8s.CustomObjectsApi) -> Any:
    """Shortcuts for PathwaysJobs and JobSets through the official CustomObjectsApi."""

    class Shortcuts:
        def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
            return custom.create_namespaced_custom_object(PW_GROUP, PW_VERSION, namespace, PW_PLURAL, body)

        def get(self, namespace: str, name: str) -> dict[str, Any]:
            return custom.get_namespaced_custom_object(PW_GROUP, PW_VERSION, namespace, PW_PLURAL, name)

        def create_jobset(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
            return custom.create_namespaced_custom_object(JS_GROUP, JS_VERSION, namespace, JS_PLURAL, body)

        def jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
            try:
                return custom.get_namespaced_custom_object(JS_GROUP, JS_VERSION, namespace, JS_PLURAL, name)
            except k8s.ApiException as err:
                if err.status == 404:
                    return None
                raise

    return Shortcuts()


def rjob_status(jobset: dict[str, Any] | None, name: str) -> dict[str, Any]:
    for entry in ((jobset or {}).get("status") or {}).get("replicatedJobsStatus") or []:
        if entry.get("name") == name:
            return entry
    return {}


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


@pytest.fixture(scope="session")
def helpers() -> Any:
    """``rjob_status(jobset, name)`` and ``condition(obj, type)``."""

    class Helpers:
        pass

    out = Helpers()
    out.rjob_status = rjob_status  # type: ignore[attr-defined]
    out.condition = condition  # type: ignore[attr-defined]
    return out
