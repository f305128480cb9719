"""Jobs on the Kubernetes stand-in for hook, trigger and sensor tests."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

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
