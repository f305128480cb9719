"""ensure_lifecycle_rule: one age rule for the cache prefix, however often it runs."""

from __future__ import annotations

import uuid

import pytest
from google.api_core.exceptions import Forbidden

from airflow_provider_pathways.cache import CacheCleanupError
from airflow_provider_pathways.hooks.gcs import CompilationCacheHook
from sandbox.gcs.launcher import GcsEmulator
from sandbox.gcs.proxy import GcsProxy

pytestmark = pytest.mark.gcs

PREFIX = "pathways-scratch/shared/compilation_cache/"


@pytest.fixture
def lifecycle_bucket(lifecycle_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", lifecycle_emulator.url)
    name = f"team-{uuid.uuid4().hex[:10]}"
    lifecycle_emulator.create_bucket(name)
    return name


def rules(emulator: GcsEmulator, bucket: str) -> list[dict[str, object]]:
    return (emulator.request("GET", f"/storage/v1/b/{bucket}").get("lifecycle") or {}).get("rule", [])


def test_the_rule_is_added_once_updated_in_place_and_other_rules_are_kept(
    lifecycle_emulator: GcsEmulator, lifecycle_bucket: str
) -> None:
    unrelated = {"action": {"type": "SetStorageClass", "storageClass": "NEARLINE"}, "condition": {"age": 30}}
    lifecycle_emulator.request(
        "PATCH", f"/storage/v1/b/{lifecycle_bucket}", {"lifecycle": {"rule": [unrelated]}}
    )
    hook = CompilationCacheHook()

    assert hook.ensure_lifecycle_rule(lifecycle_bucket, PREFIX, 7) == "added"
    assert hook.ensure_lifecycle_rule(lifecycle_bucket, PREFIX, 7) == "unchanged"
    assert CompilationCacheHook().ensure_lifecycle_rule(f"gs://{lifecycle_bucket}", PREFIX, 7) == "unchanged"
    ours = {"action": {"type": "Delete"}, "condition": {"age": 7, "matchesPrefix": [PREFIX]}}
    assert rules(lifecycle_emulator, lifecycle_bucket) == [unrelated, ours]

    assert hook.ensure_lifecycle_rule(lifecycle_bucket, PREFIX, 3) == "updated"
    assert rules(lifecycle_emulator, lifecycle_bucket) == [
        unrelated,
        {"action": {"type": "Delete"}, "condition": {"age": 3, "matchesPrefix": [PREFIX]}},
    ]


def test_duplicates_left_by_earlier_runs_collapse_into_one(
    lifecycle_emulator: GcsEmulator, lifecycle_bucket: str
) -> None:
    ours = {"action": {"type": "Delete"}, "condition": {"age": 7, "matchesPrefix": [PREFIX]}}
    lifecycle_emulator.request(
        "PATCH", f"/storage/v1/b/{lifecycle_bucket}", {"lifecycle": {"rule": [ours, ours]}}
    )
    assert CompilationCacheHook().ensure_lifecycle_rule(lifecycle_bucket, PREFIX, 7) == "updated"
    assert rules(lifecycle_emulator, lifecycle_bucket) == [ours]


@pytest.mark.parametrize(
    ("prefix", "age", "kwargs", "message"),
    [
        ("pathways-scratch/shared/", 7, {}, "not a cache folder"),
        ("", 7, {}, "whole bucket"),
        (PREFIX, 0, {}, "age_days=0"),
        (PREFIX, 1.5, {}, "whole number of days"),
        (f"gs://somewhere/{PREFIX}", 7, {}, "object prefix inside the bucket"),
    ],
)
def test_bad_rule_input_changes_nothing(
    lifecycle_emulator: GcsEmulator, lifecycle_bucket: str, prefix: str, age: int, kwargs: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        CompilationCacheHook().ensure_lifecycle_rule(lifecycle_bucket, prefix, age, **kwargs)
    assert rules(lifecycle_emulator, lifecycle_bucket) == []


def test_a_server_that_drops_lifecycle_rules_is_reported_not_trusted(
    emulator: GcsEmulator, bucket: str
) -> None:
    """fake-gcs-server accepts the update but keeps no lifecycle rules: the hook re-reads and says so."""
    with pytest.raises(CacheCleanupError, match="did not keep the lifecycle rule"):
        CompilationCacheHook().ensure_lifecycle_rule(bucket, PREFIX, 7)


@pytest.mark.parametrize("status", [408, 429, 503])
def test_a_busy_server_is_asked_again(
    lifecycle_emulator: GcsEmulator, lifecycle_bucket: str, monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    """Reading and updating the bucket are sent again on an answer GCS documents as retryable
    (https://cloud.google.com/storage/docs/retry-strategy), as every request of the cleanup is."""
    with GcsProxy(lifecycle_emulator.url) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        proxy.fail_bucket_requests(status, 2)
        hook = CompilationCacheHook(retry_initial_delay=0.001)
        assert hook.ensure_lifecycle_rule(lifecycle_bucket, PREFIX, 7) == "added"
        assert proxy.bucket_faults_injected == 2
        proxy.fail_bucket_requests(403, 1)
        with pytest.raises(Forbidden):
            hook.ensure_lifecycle_rule(lifecycle_bucket, PREFIX, 3)
        assert proxy.bucket_faults_injected == 3  # a refusal is not asked again
    ours = {"action": {"type": "Delete"}, "condition": {"age": 7, "matchesPrefix": [PREFIX]}}
    assert rules(lifecycle_emulator, lifecycle_bucket) == [ours]
