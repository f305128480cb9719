"""Deletes in JSON batch requests (100 per request, as GCS takes them), against both emulators, and the
fall-back to one request per object on a server without batches."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable

import pytest

from airflow_provider_pathways.cache import CleanupCriteria
from airflow_provider_pathways.cache.storage import BatchCall, encode_batch, parse_batch_response
from airflow_provider_pathways.hooks.gcs import CompilationCacheHook
from sandbox.gcs.launcher import GcsEmulator
from sandbox.gcs.proxy import GcsProxy

Seed = Callable[..., None]
SCRATCH = "pathways-scratch/shared"


def cache_objects(singles: int, pairs: int) -> dict[str, int]:
    objects = {f"{SCRATCH}/compilation_cache/default/e{i:04d}.binarypb": 10 + i for i in range(singles)}
    for i in range(pairs):
        key = f"{SCRATCH}/jax_cache/jit_f{i}-{hashlib.sha256(str(i).encode()).hexdigest()}"
        objects.update({f"{key}-atime": 8, f"{key}-cache": 1000})
    return objects


def test_answers_are_matched_by_id_or_by_position_in_both_server_layouts() -> None:
    body, content_type = encode_batch(
        [BatchCall(str(i), "DELETE", f"/storage/v1/b/b/o/{i}") for i in range(3)]
    )
    assert content_type.startswith("multipart/mixed; boundary=")
    assert body.count(b"DELETE /storage/v1/b/b/o/") == 3 and body.endswith(b"--\r\n")
    # GCS and fake-gcs-server: ids, a blank line before each answer, answers in any order.
    with_ids = (
        b"--x\r\nContent-Id: <response-1>\r\nContent-Type: application/http\r\n\r\n"
        b'HTTP/1.1 412 Precondition Failed\r\nContent-Type: application/json\r\n\r\n{"error": {}}\r\n'
        b"--x\r\nContent-Type: application/http\r\nContent-ID: <response-0>\r\n\r\n"
        b"HTTP/1.1 204 No Content\r\n\r\n\r\n--x--\r\n"
    )
    answers = parse_batch_response("multipart/mixed; boundary=x", with_ids)
    assert [(a.content_id, a.status, a.body) for a in answers] == [
        ("1", 412, b'{"error": {}}'),
        ("0", 204, b""),
    ]
    # gcp-storage-emulator: no ids, no blank line between the part's header and the answer.
    no_ids = (
        b"--y\r\nContent-Type: application/http\r\nHTTP/1.1 204 No Content\r\n"
        b"Content-Type: application/json; charset=UTF-8\r\n\r\n"
        b"--y\r\nContent-Type: application/http\r\nHTTP/1.1 404 Not Found\r\n\r\n{}\r\n\r\n--y--"
    )
    answers = parse_batch_response('multipart/mixed; boundary="y"', no_ids)
    assert [(a.content_id, a.status) for a in answers] == [(None, 204), (None, 404)]
    with pytest.raises(ValueError, match="not a batch response"):
        parse_batch_response("application/json", b"{}")


@pytest.mark.gcs
def test_deletes_go_100_to_a_request_with_every_part_conditioned(
    emulator: GcsEmulator, proxy: GcsProxy, bucket: str, seed: Seed
) -> None:
    objects = cache_objects(singles=230, pairs=20)  # 250 entries, 270 objects
    seed(bucket, objects)
    with CompilationCacheHook().plan(f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d")) as plan:
        generations = {o.name: o.generation for entry in plan.entries() for o in entry.objects}
        report = CompilationCacheHook(max_workers=4).delete(plan)

    assert emulator.list_objects(bucket) == {}
    assert (report.deleted_objects, report.deleted_entries, report.errors) == (270, 250, 0)
    methods = [method for method, _ in proxy.requests]
    assert "DELETE" not in methods  # no request per object
    # 3 groups of at most 100 entries; the groups with pairs need a second batch for the -cache halves.
    assert 3 < methods.count("POST") <= 6
    assert sorted(d.name for d in proxy.deletes) == sorted(objects)
    assert all(d.query["ifGenerationMatch"] == str(generations[d.name]) for d in proxy.deletes)


@pytest.mark.gcs
def test_a_server_without_batches_gets_one_request_per_object(
    emulator: GcsEmulator, proxy: GcsProxy, bucket: str, seed: Seed, capfd: pytest.CaptureFixture[str]
) -> None:
    proxy.refuse_batches()
    objects = cache_objects(singles=150, pairs=5)
    seed(bucket, objects)

    report = CompilationCacheHook(max_workers=4).cleanup(
        f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d")
    )

    assert emulator.list_objects(bucket) == {}
    assert (report.deleted_objects, report.deleted_entries, report.errors) == (160, 155, 0)
    assert [method for method, _ in proxy.requests].count("DELETE") == 160
    logs = capfd.readouterr()
    assert "The server takes no batch requests" in logs.out + logs.err


@pytest.mark.gcs
def test_gcp_storage_emulator_takes_the_batches_too(
    lifecycle_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gcp-storage-emulator has its own batch endpoint (and answers without part ids)."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", lifecycle_emulator.url)
    bucket = f"batch-{uuid.uuid4().hex[:10]}"
    lifecycle_emulator.create_bucket(bucket)
    objects = cache_objects(singles=110, pairs=3)
    for name in objects:
        lifecycle_emulator.upload(bucket, name, b"x" * 10)
    lifecycle_emulator.upload(bucket, f"{SCRATCH}/checkpoints/step_1/state", b"keep")

    report = CompilationCacheHook(max_workers=4).cleanup(
        f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="0s")
    )

    assert set(lifecycle_emulator.list_objects(bucket)) == {f"{SCRATCH}/checkpoints/step_1/state"}
    assert (report.deleted_objects, report.deleted_entries, report.errors) == (116, 113, 0)
    assert report.deleted_bytes == 10 * 116
