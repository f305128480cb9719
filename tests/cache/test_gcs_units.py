"""Pure logic of the cleanup: input checks, cache layout, planning, the batch format (no server)."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_pathways.cache import (
    DEFAULT_MIN_AGE,
    CacheObject,
    CacheSelector,
    CleanupCriteria,
    GcsLocation,
    build_plan,
    parse_duration,
    parse_size,
    scratch_location_for_bucket,
)
from tests.conftest import REPO_ROOT
from tests.support.airflow_versions import AIRFLOW_3_DAGS

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
HEX = hashlib.sha256(b"k").hexdigest()


def test_locations_and_the_slurm_convention() -> None:
    assert GcsLocation.parse(" gs://bkt/a/b ") == GcsLocation("bkt", "a/b/")
    assert GcsLocation.parse("gs://bkt/a/b/").url == "gs://bkt/a/b/"
    assert GcsLocation.parse("gs://bkt").is_bucket_root


@pytest.mark.parametrize(
    ("bucket", "why"),
    [
        ("ab", "is 2 characters"),
        ("My-Bucket", "may only contain lowercase letters"),
        ("a" * 64, "names without dots have at most 63"),
        ("a..b", "dot-separated part that is empty"),
        ("192.168.0.1", "is an IP address"),
        ("google-cache", "may not start with 'goog' or contain 'google'"),
    ],
)
def test_a_location_in_a_bucket_gcs_cannot_name_is_refused(bucket: str, why: str) -> None:
    # One rule for every bucket the provider takes (cache locations, gcs_bucket of the Slurm
    # service, pathwaysDir): https://cloud.google.com/storage/docs/buckets#naming
    with pytest.raises(ValueError, match=f"location='gs://{bucket}/c/': the bucket name .*{why}"):
        GcsLocation.parse(f"gs://{bucket}/c/")
    assert scratch_location_for_bucket("my-bucket") == "gs://my-bucket/pathways-scratch/shared/"
    assert scratch_location_for_bucket("gs://my-bucket/") == "gs://my-bucket/pathways-scratch/shared/"
    for bad in ("", "bkt/a", "gs://", "gs://Bad_Bucket/x", "gs://bkt/a//b", None, 3):
        with pytest.raises(ValueError, match="location"):
            GcsLocation.parse(bad)


def test_durations_and_sizes() -> None:
    assert parse_duration("1d12h", param="older_than") == timedelta(hours=36)
    assert parse_duration("90m", param="x") == parse_duration(5400, param="x") == timedelta(minutes=90)
    assert parse_duration("2w", param="x") == timedelta(days=14)
    assert parse_duration("0", param="x") == timedelta(0)
    assert parse_size("500GiB", param="x") == 500 * 2**30
    assert parse_size("1.5TB", param="x") == 1_500_000_000_000
    assert parse_size(0, param="x") == 0
    assert parse_duration("36500d", param="x") == timedelta(days=36500)
    assert parse_size("1EiB", param="x") == 2**60
    for bad in ("7 days please", "1x", True, [1], float("nan"), float("inf"), "36501d", 10**12):
        with pytest.raises(ValueError, match=r"older_than=.* give an age from 0 to 100 years"):
            parse_duration(bad, param="older_than")
    for bad in ("lots", float("nan"), 2**60 + 1, "1.5", 0.5, -1, "1025PiB"):
        with pytest.raises(ValueError, match=r"max_cache_bytes=.* from 0 to 1 EiB"):
            parse_size(bad, param="max_cache_bytes")


def test_what_counts_as_a_cache_entry() -> None:
    scratch = CacheSelector.build(GcsLocation.parse("gs://bkt/pathways-scratch/shared"))
    base = "pathways-scratch/shared/"
    assert scratch.classify(base + "compilation_cache/default/a.binarypb") == (
        "object",
        base + "compilation_cache/default/a.binarypb",
    )
    assert scratch.classify(base + "x/compilation_cache/temp/b") is not None
    jax = base + "jax_cache/jit_f-" + HEX
    assert scratch.classify(jax + "-atime") == ("atime", jax)
    assert scratch.classify(jax + "-cache") == ("cache", jax)
    for kept in (
        "model-cache",
        "compilation_cache",
        "ckpt/compilation_cache.txt",
        "compilation_cache/",
        "jit_f-abc-cache",
        "jax/jit_f-" + HEX + "-atime",  # a JAX name outside every cache folder
        "checkpoints/compilation_cache/a",  # a cache folder inside a protected one
        "compilation_cache/TensorBoard/b",
    ):
        assert scratch.classify(base + kept) is None, kept
    assert scratch.classify("pathways-scratch/shared2/compilation_cache/a") is None
    # A location that is itself a cache folder: everything in it is cache.
    folder = CacheSelector.build(GcsLocation.parse("gs://bkt/jax-cache"))
    assert folder.classify("jax-cache/anything.bin") == ("object", "jax-cache/anything.bin")
    # Explicit prefixes must look like cache folders unless told otherwise.
    with pytest.raises(ValueError, match="allow_any_prefix"):
        CacheSelector.build(GcsLocation.parse("gs://bkt/run"), cache_prefixes=["outputs/"])
    explicit = CacheSelector.build(
        GcsLocation.parse("gs://bkt/run"), cache_prefixes=["xla_cache", "xla_cache/sub"]
    )
    assert explicit.listing_prefixes() == ["run/xla_cache/"]


def test_cleanup_criteria_are_normalised_once_and_build_the_selector() -> None:
    criteria = CleanupCriteria(
        older_than="1d12h",
        max_cache_bytes="500GiB",
        min_age=90,
        cache_prefixes=["xla_cache", "jax_cache/sub/"],
    )
    assert criteria.older_than == timedelta(hours=36)
    assert criteria.max_cache_bytes == 500 * 2**30
    assert criteria.min_age == timedelta(seconds=90)
    assert criteria.cache_prefixes == ("xla_cache/", "jax_cache/sub/")
    assert (criteria.jax_pairs, criteria.allow_bucket_root, criteria.allow_any_prefix) == (True, False, False)
    assert criteria == CleanupCriteria(
        older_than=timedelta(hours=36),
        max_cache_bytes=500 * 2**30,
        min_age=timedelta(seconds=90),
        cache_prefixes=("xla_cache/", "jax_cache/sub/"),
    )
    assert hash(criteria) == hash(dataclasses.replace(criteria))
    with pytest.raises(dataclasses.FrozenInstanceError):
        criteria.older_than = None  # type: ignore[misc]
    defaults = CleanupCriteria(max_cache_bytes=0)
    assert (defaults.older_than, defaults.min_age, defaults.cache_prefixes) == (None, DEFAULT_MIN_AGE, None)

    run = GcsLocation.parse("gs://bkt/run")
    selector = criteria.selector(run)
    assert selector == CacheSelector.build(run, cache_prefixes=["xla_cache", "jax_cache/sub"])
    assert selector.listing_prefixes() == ["run/jax_cache/sub/", "run/xla_cache/"]
    assert not CleanupCriteria(older_than="7d", jax_pairs=False).selector(run).jax_pairs
    root = GcsLocation.parse("gs://bkt")
    with pytest.raises(ValueError, match="allow_bucket_root=True"):
        CleanupCriteria(older_than="7d").selector(root)
    assert CleanupCriteria(older_than="7d", allow_bucket_root=True).selector(root).location == root
    outputs = CleanupCriteria(older_than="7d", cache_prefixes=["outputs/"])
    with pytest.raises(ValueError, match="allow_any_prefix=True"):
        outputs.selector(run)
    assert dataclasses.replace(outputs, allow_any_prefix=True).selector(run).cache_prefixes == ("outputs/",)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "give older_than (an age such as '7d') and/or max_cache_bytes (a budget such as '500GiB')"),
        ({"older_than": "a week"}, "older_than='a week' is not a duration: give an age from 0"),
        ({"max_cache_bytes": "lots"}, "max_cache_bytes='lots' is not a size: give a whole number of bytes"),
        ({"older_than": "7d", "min_age": -1}, "min_age=-1 is negative: give an age from 0"),
        (
            {"older_than": "7d", "cache_prefixes": "compilation_cache/"},
            "cache_prefixes='compilation_cache/' must be a list of folders",
        ),
        (
            {"older_than": "7d", "cache_prefixes": ["gs://bkt/c/"]},
            "cache_prefixes entry 'gs://bkt/c/' must be a folder relative to the location",
        ),
        ({"older_than": "7d", "cache_prefixes": ["a/../b_cache"]}, "cache_prefixes='a/../b_cache' has an"),
        ({"older_than": "7d", "cache_prefixes": []}, "cache_prefixes is empty"),
        ({"older_than": "7d", "jax_pairs": "no"}, "jax_pairs='no' must be True or False"),
        ({"older_than": "7d", "allow_bucket_root": 1}, "allow_bucket_root=1 must be True or False"),
        ({"older_than": "7d", "allow_any_prefix": None}, "allow_any_prefix=None must be True or False"),
    ],
)
def test_cleanup_criteria_refuse_a_bad_value_naming_the_field(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        CleanupCriteria(**fields)  # type: ignore[arg-type]


def test_the_cleanup_operator_takes_every_criterion_and_checks_them_by_the_same_rules() -> None:
    from airflow_provider_pathways.operators.gcs import _STAND_INS, CleanupCompilationCacheOperator

    criteria = inspect.signature(CleanupCriteria).parameters
    operator = inspect.signature(CleanupCompilationCacheOperator.__init__).parameters
    assert {name: operator[name].default for name in criteria} == {n: p.default for n, p in criteria.items()}
    assert set(CleanupCompilationCacheOperator.template_fields) & set(criteria) == set(_STAND_INS)
    # A value still a template is checked once rendered; the others now.
    CleanupCompilationCacheOperator(task_id="a", bucket="my-bucket", older_than="{{ params.age }}")
    CleanupCompilationCacheOperator(
        task_id="b", scratch_location="gs://bkt/run", older_than="7d", cache_prefixes=["{{ params.c }}"]
    )
    with pytest.raises(ValueError, match="max_cache_bytes='-5GiB' is negative"):
        CleanupCompilationCacheOperator(
            task_id="c", bucket="my-bucket", older_than="{{ params.age }}", max_cache_bytes="-5GiB"
        )
    with pytest.raises(ValueError, match="allow_any_prefix=True"):
        CleanupCompilationCacheOperator(
            task_id="d",
            scratch_location="gs://bkt/run",
            older_than="{{ params.age }}",
            cache_prefixes=["out/"],
        )


def obj(name: str, age_days: float, size: int = 10, generation: int = 1) -> CacheObject:
    return CacheObject(name, generation, size, T0 - timedelta(days=age_days))


def test_budget_plans_oldest_first_through_an_external_sort() -> None:
    location = GcsLocation.parse("gs://bkt/compilation_cache")
    ages = [5, 1, 9, 3, 7, 2, 8, 4, 6, 0.5, 9]  # two entries of age 9: listing order breaks the tie
    listing = [obj(f"compilation_cache/e{i:02d}", age, size=100) for i, age in enumerate(ages)]
    criteria = CleanupCriteria(max_cache_bytes=450, min_age=timedelta(0))
    with build_plan(listing, location, criteria, now=T0, run_entries=3) as plan:
        chosen = [entry.objects[0].name for entry in plan.entries()]
        assert plan.summary.planned_bytes == 700 and plan.summary.kept_cache_bytes == 400
    assert chosen == [f"compilation_cache/e{i:02d}" for i in (2, 10, 6, 4, 8, 0, 7)]


def test_age_and_budget_together_and_the_min_age_guard() -> None:
    location = GcsLocation.parse("gs://bkt/compilation_cache")
    listing = [
        obj("compilation_cache/a", 10),
        obj("compilation_cache/b", 0.01),
        obj("compilation_cache/c", 0.02),
    ]
    criteria = CleanupCriteria(older_than=timedelta(days=7), max_cache_bytes=0, min_age=timedelta(hours=1))
    with build_plan(listing, location, criteria, now=T0) as plan:
        assert [e.objects[0].name for e in plan.entries()] == ["compilation_cache/a"]
        assert plan.summary.over_budget_bytes == 20


def test_jax_pairs_are_paired_across_any_gap_and_unpaired_halves_are_kept() -> None:
    location = GcsLocation.parse("gs://bkt/jax-cache")
    k1, k2, k3 = (f"jax-cache/jit_{x}-{HEX}" for x in "abc")
    listing = [
        obj(k1 + "-atime", 9),
        obj(k1 + "-b-not-jax", 9),
        obj(k1 + "-cache", 9),
        obj(k2 + "-atime", 9),
        obj(k3 + "-cache", 9),
        obj("jax-cache/zz", 9),
    ]
    with build_plan(listing, location, CleanupCriteria(older_than=timedelta(days=1)), now=T0) as plan:
        entries = [tuple(o.name for o in e.objects) for e in plan.entries()]
        assert plan.summary.unpaired_jax_objects == 2
    assert entries == [(k1 + "-b-not-jax",), (k1 + "-atime", k1 + "-cache"), ("jax-cache/zz",)]


def test_plan_files_are_removed_on_close() -> None:
    plan = build_plan(
        [obj("compilation_cache/a", 9)],
        GcsLocation.parse("gs://bkt/compilation_cache"),
        CleanupCriteria(older_than=timedelta(0)),
    )
    workdir = plan._workdir
    assert workdir.exists()
    plan.close()
    assert not workdir.exists()


@AIRFLOW_3_DAGS
def test_importing_the_operator_and_example_dag_loads_no_google_client() -> None:
    """DAG parsing must stay cheap: google.cloud / google.auth load only when a task runs (what an
    installed package's .pth file imports at interpreter start does not count)."""
    code = (
        "import runpy, sys\n"
        "before = set(sys.modules)\n"
        "import airflow_provider_pathways.operators.gcs, airflow_provider_pathways.hooks.gcs\n"
        "import airflow_provider_pathways.cache\n"
        "runpy.run_path('example_dags/example_cache_cleanup.py')\n"
        "new = set(sys.modules) - before\n"
        "bad = sorted(m for m in new if m.startswith(('google.cloud', 'google.auth')))\n"
        "print('google client modules loaded: ' + ','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    # Other lines (something logged to stdout while importing) do not count.
    loaded = [line for line in result.stdout.splitlines() if line.startswith("google client modules loaded:")]
    assert loaded == ["google client modules loaded: "], result.stdout
