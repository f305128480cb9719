"""How a cleanup lists, against the emulator over HTTP (through the sandbox proxy, which records
requests and can cut answers off or hold listings): split by folder when long, listings at once,
answers read as a stream, only the fields needed, and every object listed exactly once."""

from __future__ import annotations

import hashlib
import json
import random
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import timedelta

import pytest

from airflow_provider_pathways.cache import CleanupCriteria
from airflow_provider_pathways.cache.storage import (
    FOLDER_FIELDS,
    LIST_FIELDS,
    CacheCleanupError,
    iter_members,
)
from airflow_provider_pathways.hooks.gcs import CompilationCacheHook
from sandbox.gcs.launcher import GcsEmulator
from sandbox.gcs.proxy import GcsProxy
from tests.cache.conftest import NOW

SCRATCH = "pathways-scratch/shared"
Seed = Callable[..., None]


def hook(**kwargs: object) -> CompilationCacheHook:
    return CompilationCacheHook(retry_initial_delay=0.001, **kwargs)  # type: ignore[arg-type]


def listings(proxy: GcsProxy, bucket: str) -> list[dict[str, str]]:
    """The query of every object listing of ``bucket`` the proxy saw, in order."""
    out = []
    for method, path in proxy.requests:
        parsed = urllib.parse.urlsplit(path)
        if method == "GET" and parsed.path == f"/storage/v1/b/{bucket}/o":
            out.append(dict(urllib.parse.parse_qsl(parsed.query)))
    return out


def jax_pair(folder: str, label: str) -> list[str]:
    key = f"{folder}/jit_{label}-{hashlib.sha256(label.encode()).hexdigest()}"
    return [f"{key}-atime", f"{key}-cache"]


def test_json_answers_are_read_in_any_chunking() -> None:
    """The stream reader gives the same members however the bytes arrive, and refuses a cut answer."""
    doc = {
        "kind": "storage#objects",
        "nextPageToken": "tok\u00e9\u4e2d",
        "items": [{"name": f"a/\u00e9{i}", "size": str(i), "n": [1, 2.5e3, None, True]} for i in range(300)],
        "prefixes": ["a/", "b/"],
        "count": 12345,
    }
    raw = json.dumps(doc, ensure_ascii=False, indent=1).encode()
    rng = random.Random(7)
    for _ in range(30):
        cuts = sorted(rng.sample(range(1, len(raw)), rng.randint(0, 200)))
        chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        seen: dict[str, object] = {"items": [], "prefixes": []}
        for key, value in iter_members(chunks, frozenset({"items", "prefixes"})):
            if key in ("items", "prefixes"):
                seen[key].append(value)  # type: ignore[union-attr]
            else:
                seen[key] = value
        assert seen == doc
    for bad in (raw[:-1], raw[: len(raw) // 2], b"[1]", raw + b"{}", b""):
        with pytest.raises(ValueError):
            list(iter_members([bad], frozenset({"items"})))


@pytest.mark.gcs
def test_by_default_no_page_size_is_asked_and_only_the_fields_used(
    emulator: GcsEmulator, proxy: GcsProxy, bucket: str, seed: Seed
) -> None:
    """GCS answers at most 1000 objects a page whatever is asked; asking nothing lets a server that
    can answer more at once (this emulator: everything) do so; the answer is read as a stream."""
    seed(bucket, {f"{SCRATCH}/compilation_cache/e{i:04d}": 10 for i in range(2500)})

    report = hook().cleanup(f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d"))

    assert (report.deleted_objects, report.plan.listed_objects) == (2500, 2500)
    (query,) = listings(proxy, bucket)  # one answer held all 2500: nothing to split
    assert query == {"fields": LIST_FIELDS, "prefix": f"{SCRATCH}/"}

    seed(bucket, {f"{SCRATCH}/compilation_cache/f{i:04d}": 10 for i in range(20)})
    proxy.requests.clear()
    hook(list_page_size=7).cleanup(f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d"))
    asked = listings(proxy, bucket)
    assert asked[0] == {"fields": LIST_FIELDS, "prefix": f"{SCRATCH}/", "maxResults": "7"}
    assert len([q for q in asked if q.get("fields") == LIST_FIELDS]) == 3  # 20 objects, pages of 7


@pytest.mark.gcs
def test_a_long_listing_is_split_by_folder_and_every_object_is_listed_once(
    emulator: GcsEmulator, proxy: GcsProxy, bucket: str, seed: Seed
) -> None:
    """Pages of 7 over 300 objects: after the first page, the folders further on are named and
    listed on their own; the first listing stops where they start; the objects directly in the
    location from there on come from a delimiter listing. The report counts every object once and
    exactly the stale cache goes (JAX pairs whole, checkpoints and outputs kept)."""
    stale_cache = {f"{SCRATCH}/compilation_cache/default/e{i:02d}.binarypb": 10 for i in range(40)}
    stale_cache.update({name: 50 for i in range(10) for name in jax_pair(f"{SCRATCH}/jax_cache", f"f{i}")})
    kept = {f"{SCRATCH}/checkpoints/step_{i:03d}/state": 100 for i in range(200)}
    kept[f"{SCRATCH}/a-notes.txt"] = 1
    kept[f"{SCRATCH}/outputs/metrics.json"] = 2
    kept[f"{SCRATCH}/z-notes.txt"] = 4
    kept[jax_pair(f"{SCRATCH}/jax_cache", "orphan")[0]] = 8
    seed(bucket, {**kept, **stale_cache})
    fresh = {f"{SCRATCH}/outputs/jax_cache/x.bin": b"new", f"{SCRATCH}/compilation_cache/y": b"5"}
    for name, data in fresh.items():  # fresh cache entries, one in a nested cache folder
        emulator.upload(bucket, name, data)
        kept[name] = len(data)
    everything = {**kept, **stale_cache}

    report = hook(list_page_size=7).cleanup(f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d"))

    assert set(emulator.list_objects(bucket)) == set(kept)
    assert (report.deleted_objects, report.deleted_entries, report.errors) == (60, 50, 0)
    assert report.plan.listed_objects == len(everything)
    assert report.plan.listed_bytes == sum(everything.values())
    assert report.plan.cache_objects == 60 + 2  # and the two fresh ones
    assert report.plan.unpaired_jax_objects == 1
    asked = listings(proxy, bucket)
    finders = [q for q in asked if q["fields"] == FOLDER_FIELDS]
    assert all(q["delimiter"] == "/" for q in finders)
    assert finders[0]["prefix"] == f"{SCRATCH}/"  # then split-off listings long enough are split too
    # The first listing was in checkpoints/ when the folders were named: what follows went apart.
    split_off = {q["prefix"] for q in asked if q["fields"] == LIST_FIELDS and "delimiter" not in q}
    assert {f"{SCRATCH}/{f}/" for f in ("compilation_cache", "jax_cache", "outputs")} <= split_off
    direct = [
        q for q in asked if q["fields"] == LIST_FIELDS and q["prefix"] == f"{SCRATCH}/" and "delimiter" in q
    ]
    assert [q["startOffset"] for q in direct] == [f"{SCRATCH}/compilation_cache/"]


@pytest.mark.gcs
def test_cache_prefixes_are_listed_at_the_same_time(
    emulator: GcsEmulator, proxy: GcsProxy, bucket: str, seed: Seed
) -> None:
    """The proxy holds each listing until three are in flight at once (or 30 s pass): a cleanup
    that listed one prefix after another would take the whole wait and show one at a time."""
    prefixes = ["compilation_cache/", "jax_cache/", "xla_cache/"]
    seed(bucket, {f"{SCRATCH}/{p}e{i}": 10 for p in prefixes for i in range(30)})
    proxy.hold_listings(3)

    report = hook(list_workers=3).cleanup(
        f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d", cache_prefixes=prefixes)
    )

    assert (report.deleted_objects, report.plan.listed_objects) == (90, 90)
    assert proxy.listings_in_flight_high == 3
    assert sorted(q["prefix"] for q in listings(proxy, bucket)) == [f"{SCRATCH}/{p}" for p in prefixes]


@pytest.mark.gcs
@pytest.mark.parametrize("page_size", [None, 400], ids=["one-answer", "pages-of-400"])
def test_a_listing_answer_cut_off_is_read_again_and_nothing_counts_twice(
    emulator: GcsEmulator, proxy: GcsProxy, bucket: str, seed: Seed, page_size: int | None
) -> None:
    """The first answer breaks off after more than 1000 objects were read and handed on (deletes
    of them may have started); it is asked again, and what was handed on is not handed on again."""
    seed(bucket, {f"{SCRATCH}/compilation_cache/e{i:04d}": 10 for i in range(3000)})
    query = urllib.parse.urlencode({"prefix": f"{SCRATCH}/", "fields": LIST_FIELDS})
    with urllib.request.urlopen(f"{emulator.url}/storage/v1/b/{bucket}/o?{query}") as answer:
        whole = len(answer.read())  # the emulator ignores maxResults=None and fields: all 3000
    cut_at = whole * 1200 // 3000 if page_size is None else whole * 300 // 3000
    proxy.cut_listings(1, after_bytes=cut_at)

    report = hook(list_page_size=page_size).cleanup(
        f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d")
    )

    assert proxy.cut_answers == 1
    assert emulator.list_objects(bucket) == {}
    assert (report.deleted_objects, report.missing_objects, report.errors) == (3000, 0, 0)
    assert report.plan.listed_objects == 3000
    assert report.retries >= 1


@pytest.mark.gcs
def test_a_listing_that_keeps_breaking_fails_clearly_and_deletes_nothing(
    emulator: GcsEmulator, proxy: GcsProxy, bucket: str, seed: Seed
) -> None:
    seed(bucket, {f"{SCRATCH}/compilation_cache/e{i}": 10 for i in range(50)})
    proxy.cut_listings(100, after_bytes=40)
    with pytest.raises(CacheCleanupError, match=f"listing gs://{bucket}/{SCRATCH}/ failed"):
        hook(max_attempts=3).cleanup(f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="1d"))
    assert proxy.cut_answers == 3
    assert len(emulator.list_objects(bucket)) == 50


@pytest.mark.gcs
def test_a_size_budget_picks_the_same_entries_however_the_listing_is_split(
    emulator: GcsEmulator, bucket: str, seed: Seed
) -> None:
    """Entries updated at the same moment are ordered by name, so the plan does not depend on which
    listing found them first."""
    same_moment = NOW - timedelta(days=3)
    objects = {f"{SCRATCH}/{folder}/e{i:02d}": 100 for folder in ("a_cache", "b_cache") for i in range(30)}
    objects.update({f"{SCRATCH}/checkpoints/s{i:03d}": 1 for i in range(100)})
    seed(bucket, objects, updated=same_moment)
    location = f"gs://{bucket}/{SCRATCH}"
    selection = {"max_cache_bytes": 2500, "cache_prefixes": ["a_cache/", "b_cache/"]}

    plans = []
    for kwargs in ({}, {"list_page_size": 4, "list_workers": 2}, {"list_page_size": 9, "list_workers": 1}):
        with hook(**kwargs).plan(location, CleanupCriteria(**selection)) as plan:  # type: ignore[arg-type]
            plans.append(([o.name for e in plan.entries() for o in e.objects], plan.summary.planned_digest))

    names, digest = plans[0]
    assert len(names) == 35 and names == sorted(names)  # 6000 bytes, budget 2500: the first 35 by name
    assert all(plan == (names, digest) for plan in plans)
