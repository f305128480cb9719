"""Jobs on the Kubernetes stand-in for hook, trigger and sensor tests."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from airflow_provider_pathways.gke.spec import PathwaysJobSpec

CONN = "gke_sandbox"
KNOB = "sandbox.pathways.dev/"
T = TypeVar("T")


def new_spec(
    namespace: str,
    *,
    slices: int = 2,
    headless: bool = False,
    max_restarts: int = 0,
    topology: str | None = None,
    **knobs: Any,
) -> PathwaysJobSpec:
    """A small valid spec (v5e 4x4 slices) with a unique name and simulator knobs as annotations."""
    spec = PathwaysJobSpec.from_tpu_type(
        "v5litepod-16",
        num_slices=slices,
        name=f"job-{uuid.uuid4().hex[:8]}",
        namespace=namespace,
        pathways_dir="gs://pathways-test-bucket/scratch",
        template=None
        if headless
        else {"spec": {"containers": [{"name": "main", "image": "python:3.12", "command": ["python"]}]}},
        max_restarts=max_restarts,
        annotations={KNOB + k.replace("_", "-"): str(v) for k, v in knobs.items()},
    )
    if topology:
        spec.workers.topology = topology
    return spec


def wait_for(predicate: Callable[[], T], timeout: float = 15.0, what: str = "") -> T:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    value: Any = None
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what or predicate}; last value {value!r}")


async def async_wait_for(predicate: Callable[[], Awaitable[T]], timeout: float = 15.0, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    value: Any = None
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what or predicate}; last value {value!r}")


def relayed_connection(kube: Any, port: int, directory: Path) -> str:
    """An ``AIRFLOW_CONN_<ID>`` value: the stand-in's ``kubernetes`` connection with its API server
    reached through a relay on ``port`` (its kubeconfig written in ``directory``)."""
    config = yaml.safe_load(Path(kube.kubeconfig).read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"http://127.0.0.1:{port}"
    kubeconfig = directory / "kubeconfig-relayed"
    kubeconfig.write_text(yaml.safe_dump(config))
    return json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}})


def stand_in_objects(kube: Any, plural: str, namespace: str) -> list[dict[str, Any]]:
    """The stand-in's PathwaysJobs or JobSets in ``namespace``."""
    group = {"pathwaysjobs": "pathways-job.pathways.domain/v1", "jobsets": "jobset.x-k8s.io/v1alpha2"}[plural]
    return kube.request("GET", f"/apis/{group}/namespaces/{namespace}/{plural}")["items"]


def held_for(seconds: float, condition: Callable[[], T]) -> Callable[[], T | None]:
    """``condition`` that counts only once it has returned the same truthy value for ``seconds``
    (a job that has held its chips a while: the cluster records moments in whole seconds)."""
    since: dict[Any, float] = {}

    def check() -> T | None:
        value = condition()
        if not value:
            since.clear()
            return None
        first = since.setdefault(value, time.monotonic())
        return value if time.monotonic() - first >= seconds else None

    return check


def act_when(
    condition: Callable[[], Any], action: Callable[[Any], None], timeout: float = 30
) -> threading.Thread:
    """In the background, run ``action(value)`` once ``condition()`` returns a truthy value; a
    failure (or a condition that never held) is in the thread's ``failures`` list."""
    failures: list[BaseException] = []

    def loop() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = condition()
                if value:
                    action(value)
                    return
            except BaseException as err:  # surfaced by the test through the thread's list
                failures.append(err)
                return
            time.sleep(0.02)
        failures.append(TimeoutError("condition never held"))

    thread = threading.Thread(target=loop, daemon=True)
    thread.failures = failures  # type: ignore[attr-defined]
    thread.start()
    return thread
