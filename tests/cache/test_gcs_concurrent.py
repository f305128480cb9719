"""Two cleanups of the same location at once, with faults on the way: together they report exactly
what existed, once.

Both runs plan first (both plans hold every object), then delete together, so every object is
asked for by both and exactly one of them removes it. The sandbox proxy enforces
``ifGenerationMatch`` and injects a fault on the first DELETE of every object: a 503 answered
before the delete reaches the emulator (nothing happened), or, when that delete is carried out,
its answer dropped (it happened, the client never heard).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable

import pytest

from airflow_provider_pathways.cache import CleanupCriteria, CleanupReport
from airflow_provider_pathways.hooks.gcs import CompilationCacheHook
from sandbox.gcs.launcher import GcsEmulator
from sandbox.gcs.proxy import GcsProxy

pytestmark = pytest.mark.gcs

SCRATCH = "pathways-scratch/shared"
PAIRS = 1000
SINGLES = 1000

Seed = Callable[..., None]


def seed_cache(seed: Seed, bucket: str) -> dict[str, int]:
    """1,000 JAX pairs and 1,000 Pathways entries (3,000 objects, 2,000 entries), varied sizes."""
    objects: dict[str, int] = {}
    for i in range(PAIRS):
        key = f"{SCRATCH}/jax_cache/jit_f{i}-{hashlib.sha256(str(i).encode()).hexdigest()}"
        objects[f"{key}-atime"] = 8
        objects[f"{key}-cache"] = 1000 + i
    for i in range(SINGLES):
        objects[f"{SCRATCH}/compilation_cache/default/{i:05d}.binarypb"] = 500 + i % 97
    seed(bucket, objects)
    return objects


def delete_at_once(location: str, batch_size: int, proxy: GcsProxy) -> list[CleanupReport]:
    """Both plans first; the second delete starts once the first has met a fault, so both run
    together over what is left (and the first is sure to have retried)."""
    hooks = [
        CompilationCacheHook(max_workers=8, batch_size=batch_size, retry_initial_delay=0.001)
        for _ in range(2)
    ]
    plans = [hook.plan(location, CleanupCriteria(older_than="1d")) for hook in hooks]
    reports: list[CleanupReport | None] = [None, None]

    def run(i: int) -> None:
        reports[i] = hooks[i].delete(plans[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    threads[0].start()
    assert proxy.fault_injected.wait(timeout=60)
    threads[1].start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    for plan in plans:
        plan.close()
    assert reports[0] is not None and reports[1] is not None
    return [reports[0], reports[1]]


@pytest.mark.parametrize("batch_size", [1, 100], ids=["one-request-per-object", "batches-of-100"])
@pytest.mark.parametrize("fault", ["503-before-delete", "answer-lost-after-delete"])
def test_two_concurrent_cleanups_report_exactly_what_existed(
    emulator: GcsEmulator, proxy: GcsProxy, bucket: str, seed: Seed, fault: str, batch_size: int
) -> None:
    objects = seed_cache(seed, bucket)
    if fault == "503-before-delete":
        proxy.fail_deletes(503, per_object=1)
    else:
        proxy.drop_delete_responses(per_object=1)

    first, second = delete_at_once(f"gs://{bucket}/{SCRATCH}", batch_size, proxy)

    assert emulator.list_objects(bucket) == {}
    assert proxy.deleted_by_proxy() == len(objects)  # what the emulator really did
    assert (first.errors, second.errors) == (0, 0)
    assert first.deleted_objects + second.deleted_objects == len(objects)
    assert first.deleted_bytes + second.deleted_bytes == sum(objects.values())
    assert first.deleted_entries + second.deleted_entries == PAIRS + SINGLES
    # Each run accounted for every object it planned: deleted by it, or already gone.
    for report in (first, second):
        assert report.deleted_objects + report.missing_objects == len(objects)
    assert first.missing_objects + second.missing_objects == len(objects)
    retried = first.retries + second.retries
    assert first.retries > 0
    if batch_size == 1:  # each faulty request retried once
        assert retried == proxy.faults_injected()
    else:  # a batch is sent again (with its faulty parts only) once per faulty answer
        assert retried <= proxy.faults_injected()
        assert {method for method, _ in proxy.requests} <= {"GET", "POST"}  # no single DELETE
    assert "already gone" in first.summary_table()
