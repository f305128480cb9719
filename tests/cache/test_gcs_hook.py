"""CompilationCacheHook against a GCS emulator over HTTP: what goes, what stays, what is reported."""

from __future__ import annotations

import gc
import hashlib
import tracemalloc
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_pathways.cache import BucketNotFoundError, CleanupCriteria
from airflow_provider_pathways.hooks.gcs import CompilationCacheHook
from sandbox.gcs.launcher import GcsEmulator, SeedObject
from sandbox.gcs.proxy import GcsProxy
from tests.cache.conftest import NOW

pytestmark = pytest.mark.gcs

SCRATCH = "pathways-scratch/shared"
CACHE = f"{SCRATCH}/compilation_cache/default"

Seed = Callable[..., None]


def jax_key(label: str) -> str:
    """A JAX persistent-cache key: ``<module>-<sha256 hex>``."""
    return f"jit_{label}-{hashlib.sha256(label.encode()).hexdigest()}"


def names(emulator: GcsEmulator, bucket: str, prefix: str = "") -> set[str]:
    return set(emulator.list_objects(bucket, prefix))


def hook(**kwargs: object) -> CompilationCacheHook:
    return CompilationCacheHook(retry_initial_delay=0.001, **kwargs)  # type: ignore[arg-type]


def test_only_stale_cache_entries_under_the_location_are_deleted(
    emulator: GcsEmulator, bucket: str, seed: Seed
) -> None:
    stale = {f"{CACHE}/entry-{i}.binarypb": 100 for i in range(30)}
    stale[f"{CACHE}/temp/staging.binarypb"] = 7
    kept_old = {
        f"{SCRATCH}/checkpoints/step_100/state.bin": 1000,  # run output in the scratch location
        f"{SCRATCH}/model-cache": 10,  # ends in -cache but is no JAX cache file
        f"{SCRATCH}/compilation_cache_notes.txt": 5,  # not inside the cache folder
        "pathways-scratch/shared-2/compilation_cache/default/x.binarypb": 3,  # sibling prefix
        "pathways-scratch/other-run/compilation_cache/default/y.binarypb": 3,  # other location
        "compilation_cache/default/root.binarypb": 3,  # bucket root
    }
    seed(bucket, {**stale, **kept_old})
    emulator.upload(bucket, f"{CACHE}/fresh.binarypb", b"new entry")

    report = hook().cleanup(f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d"))

    assert names(emulator, bucket) == set(kept_old) | {f"{CACHE}/fresh.binarypb"}
    assert report.deleted_objects == len(stale)
    assert report.deleted_bytes == sum(stale.values())
    assert report.errors == 0
    assert report.plan.listed_objects == len(stale) + 4  # the scratch location's own objects
    assert report.plan.cache_objects == len(stale) + 1


def test_jax_pairs_go_whole_or_not_at_all_even_across_listing_pages(
    emulator: GcsEmulator, bucket: str, seed: Seed
) -> None:
    folder = f"{SCRATCH}/jax_cache"
    old_pairs = [jax_key(f"old{i}") for i in range(7)]
    used = jax_key("used_recently")
    objects = {f"{folder}/{k}-{kind}": 50 for k in old_pairs for kind in ("atime", "cache")}
    objects[f"{folder}/{used}-cache"] = 500
    objects[f"{folder}/{jax_key('orphan_atime')}-atime"] = 8
    seed(bucket, objects)
    # The atime is rewritten on every cache hit: this entry was used a minute ago.
    emulator.upload(bucket, f"{folder}/{used}-atime", b"\x00" * 8)

    # Pages of 3 objects: pairs straddle page boundaries.
    report = hook(list_page_size=3).cleanup(f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d"))

    left = names(emulator, bucket)
    orphan = f"{folder}/{jax_key('orphan_atime')}-atime"
    assert left == {f"{folder}/{used}-cache", f"{folder}/{used}-atime", orphan}  # an unpaired half stays
    assert report.plan.planned_jax_pairs == len(old_pairs)
    assert report.plan.unpaired_jax_objects == 1
    assert report.deleted_entries == len(old_pairs)
    assert report.deleted_objects == 2 * len(old_pairs)


def test_dry_run_deletes_nothing_and_reports_exactly_what_a_real_run_then_deletes(
    emulator: GcsEmulator, bucket: str, seed: Seed
) -> None:
    seed(bucket, {f"{CACHE}/e{i}.binarypb": 10 + i for i in range(25)})
    seed(
        bucket,
        {f"{SCRATCH}/jax_cache/{jax_key('p')}-atime": 8, f"{SCRATCH}/jax_cache/{jax_key('p')}-cache": 64},
    )
    seed(bucket, {f"{SCRATCH}/logs/run.log": 99})
    emulator.upload(bucket, f"{CACHE}/fresh.binarypb", b"fresh")
    location = f"gs://{bucket}/{SCRATCH}"
    before = emulator.list_objects(bucket)

    with hook().plan(location, CleanupCriteria(older_than="2d")) as plan:
        planned = {obj.name for entry in plan.entries() for obj in entry.objects}
    dry = hook().cleanup(location, CleanupCriteria(older_than="2d"), dry_run=True)

    assert emulator.list_objects(bucket) == before  # same names, same generations
    real = hook().cleanup(location, CleanupCriteria(older_than="2d"))

    gone = set(before) - names(emulator, bucket)
    assert gone == planned
    assert dry.dry_run and dry.deleted_objects == 0
    assert (real.deleted_objects, real.deleted_bytes) == (dry.plan.planned_objects, dry.plan.planned_bytes)
    assert real.deleted_digest == dry.plan.planned_digest
    assert sum(int(before[n]["size"]) for n in gone) == dry.plan.planned_bytes


@pytest.mark.parametrize("batch_size", [1, 100], ids=["one-request-per-object", "batches"])
def test_an_entry_rewritten_between_plan_and_delete_is_kept(
    gcs_emulator: GcsEmulator, proxy: GcsProxy, bucket: str, seed: Seed, batch_size: int
) -> None:
    """fake-gcs-server ignores ``ifGenerationMatch`` on DELETE (checked first, below), so the
    sandbox proxy enforces it as GCS does (412 on a generation mismatch) and records every DELETE:
    the test shows both that each delete carried the generation seen when planning and that the
    rewritten entries survive."""
    seed(bucket, {"probe/x": 1})
    probe = urllib.request.Request(
        f"{gcs_emulator.url}/storage/v1/b/{bucket}/o/probe%2Fx?ifGenerationMatch=1", method="DELETE"
    )
    try:
        with urllib.request.urlopen(probe) as resp:
            emulator_enforces = False  # deleted despite the wrong generation
            assert resp.status in (200, 204)
    except urllib.error.HTTPError as err:  # a future emulator that enforces it: the proxy is moot
        emulator_enforces = err.code == 412
    assert emulator_enforces or "probe/x" not in names(gcs_emulator, bucket)

    entries = {f"{CACHE}/e{i}.binarypb": 100 for i in range(12)}
    pair_touched, pair_rewritten = jax_key("touched"), jax_key("rewritten")
    for key in (pair_touched, pair_rewritten):
        entries[f"{SCRATCH}/jax_cache/{key}-atime"] = 8
        entries[f"{SCRATCH}/jax_cache/{key}-cache"] = 300
    seed(bucket, entries)
    location = f"gs://{bucket}/{SCRATCH}"

    with hook(max_workers=4, batch_size=batch_size).plan(location, CleanupCriteria(older_than="1d")) as plan:
        planned_generation = {obj.name: obj.generation for e in plan.entries() for obj in e.objects}
        # Meanwhile a job rewrites one entry, reads a JAX entry (its -atime is rewritten) and
        # recompiles another JAX entry (its -cache object is rewritten).
        rewritten = {
            f"{CACHE}/e5.binarypb": gcs_emulator.upload(bucket, f"{CACHE}/e5.binarypb", b"recompiled"),
            f"{SCRATCH}/jax_cache/{pair_touched}-atime": gcs_emulator.upload(
                bucket, f"{SCRATCH}/jax_cache/{pair_touched}-atime", b"\x01" * 8
            ),
            f"{SCRATCH}/jax_cache/{pair_rewritten}-cache": gcs_emulator.upload(
                bucket, f"{SCRATCH}/jax_cache/{pair_rewritten}-cache", b"x" * 300
            ),
        }
        report = hook(max_workers=4, batch_size=batch_size).delete(plan)

    left = names(gcs_emulator, bucket)
    for name, resource in rewritten.items():
        assert int(resource["generation"]) != planned_generation[name]
        assert name in left
    assert int(gcs_emulator.list_objects(bucket, f"{CACHE}/e5")[f"{CACHE}/e5.binarypb"]["size"]) == 10
    # Both JAX pairs are still whole: the touched one was never split, the other had its
    # -atime written back after its -cache refused to go.
    for key in (pair_touched, pair_rewritten):
        assert {f"{SCRATCH}/jax_cache/{key}-atime", f"{SCRATCH}/jax_cache/{key}-cache"} <= left
    assert left - set(rewritten) == {
        f"{SCRATCH}/jax_cache/{pair_touched}-cache",
        f"{SCRATCH}/jax_cache/{pair_rewritten}-atime",
    }
    assert report.restored_atimes == 1
    assert report.skipped_changed_entries == 3
    assert report.deleted_objects == 11 and report.errors == 0

    # Every DELETE the server got carried ifGenerationMatch = the generation seen when planning.
    deletes = [d for d in proxy.deletes if d.bucket == bucket and d.name != "probe/x"]
    assert deletes and all(
        d.query.get("ifGenerationMatch") == str(planned_generation[d.name]) for d in deletes
    )
    assert {d.name for d in deletes if d.status == 412} == set(rewritten)


@pytest.mark.parametrize(
    ("batch_size", "retried"),
    [(1, (20, 20)), (100, (1, 2))],
    ids=["one-request-per-object", "batches"],
)
def test_transient_errors_are_retried_with_backoff(
    emulator: GcsEmulator, proxy: GcsProxy, bucket: str, seed: Seed, batch_size: int, retried: tuple[int, int]
) -> None:
    """One 503, then two 429s, on every object: every object goes, no error; retried requests are
    counted (a batch is sent again once, with only its refused parts)."""
    seed(bucket, {f"{CACHE}/e{i}.binarypb": 10 for i in range(20)})
    proxy.fail_deletes(503, per_object=1)
    first = hook(max_workers=4, batch_size=batch_size).cleanup(
        f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d")
    )
    assert (first.deleted_objects, first.errors, first.retries) == (20, 0, retried[0])

    seed(bucket, {f"{CACHE}/f{i}.binarypb": 10 for i in range(10)})
    proxy.fail_deletes(429, per_object=2)
    second = hook(max_workers=4, batch_size=batch_size).cleanup(
        f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d")
    )
    assert (second.deleted_objects, second.errors, second.retries) == (10, 0, retried[1])
    assert names(emulator, bucket, SCRATCH) == set()


@pytest.mark.parametrize("status", [408, 500, 502, 504])
def test_every_status_gcs_documents_as_retryable_is_retried(
    emulator: GcsEmulator, proxy: GcsProxy, bucket: str, seed: Seed, status: int
) -> None:
    """https://cloud.google.com/storage/docs/retry-strategy: "HTTP 408, 429, and 5xx response
    codes" are transient (429 and 503 above)."""
    seed(bucket, {f"{CACHE}/e{i}.binarypb": 10 for i in range(5)})
    proxy.fail_deletes(status, per_object=1)
    report = hook(max_workers=2, batch_size=1).cleanup(
        f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d")
    )
    assert (report.deleted_objects, report.errors, report.retries) == (5, 0, 5)


@pytest.mark.parametrize("batch_size", [1, 100], ids=["one-request-per-object", "batches"])
def test_permanent_errors_are_reported_and_stop_the_run_early(
    emulator: GcsEmulator, proxy: GcsProxy, bucket: str, seed: Seed, batch_size: int
) -> None:
    seed(bucket, {f"{CACHE}/e{i:04d}.binarypb": 10 for i in range(1000)})
    proxy.fail_deletes(403, per_object=10)
    report = hook(max_workers=4, batch_size=batch_size).cleanup(
        f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d"), max_errors=5
    )
    assert report.deleted_objects == 0
    assert report.errors >= 5 and report.aborted and "max_errors=5" in report.aborted
    assert report.error_samples[0]["error"].startswith("HTTP 403")
    assert len(names(emulator, bucket)) == 1000
    assert len(proxy.deletes) < 1000  # it stopped instead of trying everything


def test_size_budget_deletes_oldest_first_and_keeps_the_newest(
    emulator: GcsEmulator, bucket: str, seed: Seed
) -> None:
    for day in range(1, 11):  # e01 is one day old ... e10 ten days old; 1000 bytes each
        seed(bucket, {f"{CACHE}/e{day:02d}.binarypb": 1000}, updated=NOW - timedelta(days=day))
    emulator.upload(bucket, f"{CACHE}/just-written.binarypb", b"y" * 1000)

    report = hook().cleanup(f"gs://{bucket}/{SCRATCH}", CleanupCriteria(max_cache_bytes="3500"))

    # 11000 bytes, budget 3500: the 8 oldest go; min_age (1 h) protects the one just written.
    expected = {f"{CACHE}/e01.binarypb", f"{CACHE}/e02.binarypb", f"{CACHE}/just-written.binarypb"}
    assert names(emulator, bucket) == expected
    assert report.deleted_objects == 8 and report.plan.kept_cache_bytes == 3000

    # A budget of 0 still keeps what is younger than min_age, and says so.
    report = hook().cleanup(f"gs://{bucket}/{SCRATCH}", CleanupCriteria(max_cache_bytes=0))
    assert names(emulator, bucket) == {f"{CACHE}/just-written.binarypb"}
    assert report.plan.over_budget_bytes == 1000


def test_bucket_root_needs_the_explicit_flag_and_then_cleans_every_scratch_location(
    emulator: GcsEmulator, bucket: str, seed: Seed
) -> None:
    cache = {f"pathways-scratch/run{i}/compilation_cache/default/e.binarypb": 10 for i in range(3)}
    other = {"datasets/train.tfrecord": 10, "pathways-scratch/run0/output/metrics.json": 10}
    seed(bucket, {**cache, **other})
    with pytest.raises(ValueError, match="allow_bucket_root=True"):
        hook().cleanup(f"gs://{bucket}", CleanupCriteria(older_than="1d"))
    assert names(emulator, bucket) == set(cache) | set(other)

    report = hook().cleanup(f"gs://{bucket}/", CleanupCriteria(older_than="1d", allow_bucket_root=True))
    assert names(emulator, bucket) == set(other)
    assert report.deleted_objects == 3


@pytest.mark.parametrize(
    ("location", "kwargs", "message"),
    [
        ("s3://{bucket}/pathways-scratch/shared", {"older_than": "1d"}, "not a gs:// location"),
        ("/mnt/{bucket}/pathways-scratch", {"older_than": "1d"}, "not a gs:// location"),
        ("gs://{bucket}", {"older_than": "1d"}, "bucket root"),
        ("gs://{bucket}/pathways-scratch/shared", {"older_than": "-1d"}, "older_than='-1d' is negative"),
        ("gs://{bucket}/pathways-scratch/shared", {"older_than": -60}, "older_than=-60 is negative"),
        ("gs://{bucket}/pathways-scratch/shared", {"older_than": timedelta(days=-1)}, "negative"),
        ("gs://{bucket}/pathways-scratch/shared", {"older_than": "a week"}, "older_than='a week' is not a"),
        ("gs://{bucket}/pathways-scratch/shared", {"max_cache_bytes": "-5GiB"}, "max_cache_bytes='-5GiB'"),
        ("gs://{bucket}/pathways-scratch/shared", {}, "give older_than"),
        (
            "gs://{bucket}/pathways-scratch/shared",
            {"older_than": "1d", "cache_prefixes": ["outputs/"]},
            "allow_any_prefix",
        ),
        ("gs://{bucket}/pathways-scratch/*", {"older_than": "1d"}, "wildcard"),
        ("gs://{bucket}/../x", {"older_than": "1d"}, "'..'"),
    ],
)
def test_bad_input_fails_clearly_before_anything_is_deleted(
    emulator: GcsEmulator, bucket: str, seed: Seed, location: str, kwargs: dict[str, object], message: str
) -> None:
    seed(bucket, {f"{CACHE}/e.binarypb": 1, f"{SCRATCH}/checkpoints/a": 1})
    with pytest.raises(ValueError, match=message.replace("*", r"\*")):
        hook().cleanup(location.format(bucket=bucket), CleanupCriteria(**kwargs))  # type: ignore[arg-type]
    assert names(emulator, bucket) == {f"{CACHE}/e.binarypb", f"{SCRATCH}/checkpoints/a"}


def test_a_missing_bucket_is_named_in_the_error(emulator: GcsEmulator) -> None:
    with pytest.raises(BucketNotFoundError, match="bucket 'no-such-bucket-here' does not exist"):
        hook().cleanup("gs://no-such-bucket-here/pathways-scratch/shared", CleanupCriteria(older_than="1d"))


def test_ten_thousand_objects_are_cleaned_with_bounded_memory(emulator: GcsEmulator, bucket: str) -> None:
    """Peak Python memory of a whole cleanup does not grow with the number of objects: it holds one
    listing page and a bounded queue, never the listing."""
    old = datetime.now(timezone.utc) - timedelta(days=3)

    def cleanup_peak(prefix: str, count: int) -> tuple[int, int]:
        emulator.seed_objects(
            bucket,
            (SeedObject(f"{prefix}/compilation_cache/{i:06d}.binarypb", 10, old) for i in range(count)),
        )
        cache_hook = hook()
        cache_hook.get_conn()
        gc.collect()
        tracemalloc.start()
        try:
            report = cache_hook.cleanup(f"gs://{bucket}/{prefix}", CleanupCriteria(older_than="1d"))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return report.deleted_objects, peak

    small_deleted, small_peak = cleanup_peak("small", 2_000)
    deleted, peak = cleanup_peak("large", 10_000)

    assert (small_deleted, deleted) == (2_000, 10_000)
    assert names(emulator, bucket) == set()
    assert peak < small_peak + 2 * 2**20, (small_peak, peak)  # 5x the objects, same memory
    assert peak < 16 * 2**20


def test_requests_never_leave_the_location(
    emulator: GcsEmulator, proxy: GcsProxy, bucket: str, seed: Seed
) -> None:
    seed(bucket, {f"{CACHE}/a.binarypb": 1, "pathways-scratch/shared2/compilation_cache/b.binarypb": 1})
    hook().cleanup(f"gs://{bucket}/{SCRATCH}/", CleanupCriteria(older_than="1h"))
    assert [d.name for d in proxy.deletes] == [f"{CACHE}/a.binarypb"]
    assert all(urllib.parse.unquote(d.name).startswith(f"{SCRATCH}/") for d in proxy.deletes)


def test_the_summary_table_counts_entries_and_objects_apart(
    emulator: GcsEmulator, bucket: str, seed: Seed
) -> None:
    """45 Pathways entries and one JAX pair: 46 entries, 47 objects, each in its own column."""
    objects = {f"{CACHE}/e{i:02d}.binarypb": 100 for i in range(45)}
    key = jax_key("pair")
    objects.update({f"{SCRATCH}/jax_cache/{key}-atime": 8, f"{SCRATCH}/jax_cache/{key}-cache": 300})
    seed(bucket, objects)

    table = hook().cleanup(f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d")).summary_table()

    rows = {
        cells[0]: cells[1:]
        for line in table.splitlines()
        if line.startswith("| ")
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
    }
    assert rows[""] == ["entries", "objects", "bytes"]
    assert rows["cache"] == ["46", "47", "4.7 KiB"]
    assert rows["planned to delete"] == rows["deleted"] == ["46", "47", "4.7 KiB"]
    assert rows["already gone"] == ["", "0", ""]
    assert rows["cache left"] == ["", "", "0 B"]
