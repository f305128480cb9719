"""The cleanup operators run for real with dag.test() against a GCS emulator over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from airflow_provider_pathways.operators.gcs import CleanupCompilationCacheOperator
from sandbox.gcs.launcher import GcsEmulator
from tests.cache.conftest import NOW
from tests.support.airflow_runs import load_dag, run_dag

pytestmark = pytest.mark.gcs

Seed = Callable[..., None]
SLURM_CACHE = "pathways-scratch/shared/compilation_cache/default"


def names(emulator: GcsEmulator, bucket: str) -> set[str]:
    return set(emulator.list_objects(bucket))


def test_teardown_cleans_the_location_the_training_task_pushed_even_when_training_failed(
    emulator: GcsEmulator, bucket: str, seed: Seed, cleanup_dags: str, capfd: pytest.CaptureFixture[str]
) -> None:
    stale = {f"runs/exp1/compilation_cache/default/e{i}.binarypb": 100 for i in range(12)}
    seed(bucket, {**stale, "runs/exp1/checkpoints/step_10/state": 5000})
    emulator.upload(bucket, "runs/exp1/compilation_cache/default/fresh.binarypb", b"new")

    dag = load_dag(cleanup_dags, "gcs_cleanup_after_training")
    outcomes = run_dag(dag, {"pathways_dir": f"gs://{bucket}/runs/exp1", "fail": True})

    assert outcomes["train"].state == "failed"
    assert outcomes["cleanup_cache"].state == "success"
    report = outcomes["cleanup_cache"].xcom["return_value"]
    assert report == outcomes["cleanup_cache"].xcom["cleanup_report"]
    assert (report["deleted_objects"], report["deleted_bytes"], report["errors"]) == (12, 1200, 0)
    assert report["location"] == f"gs://{bucket}/runs/exp1/"
    assert names(emulator, bucket) == {
        "runs/exp1/checkpoints/step_10/state",
        "runs/exp1/compilation_cache/default/fresh.binarypb",
    }
    logs = capfd.readouterr()
    text = logs.out + logs.err
    assert f"Compilation cache cleanup of gs://{bucket}/runs/exp1/" in text
    assert "| deleted " in text and "1.2 KiB" in text


def test_nightly_dry_run_then_budget_cleanup_of_the_slurm_scratch_location(
    emulator: GcsEmulator, bucket: str, seed: Seed, cleanup_dags: str
) -> None:
    for day in (10, 11, 12, 13, 14):  # older than 7 days: go by age
        seed(bucket, {f"{SLURM_CACHE}/old{day}.binarypb": 100}, updated=NOW - timedelta(days=day))
    for day in (2, 3, 4, 5, 6):  # younger: only the oldest go, down to the 2500-byte budget
        seed(bucket, {f"{SLURM_CACHE}/recent{day}.binarypb": 1000}, updated=NOW - timedelta(days=day))
    seed(bucket, {"pathways-scratch/other/compilation_cache/x.binarypb": 1})

    outcomes = run_dag(load_dag(cleanup_dags, "gcs_cleanup_nightly"), {"bucket": bucket, "budget": "2500"})

    dry = outcomes["dry_run"].xcom["return_value"]
    real = outcomes["keep_under_budget"].xcom["return_value"]
    assert dry["dry_run"] and dry["deleted_objects"] == 0 and dry["planned_objects"] == 5
    assert dry["location"] == f"gs://{bucket}/pathways-scratch/shared/"
    assert (real["deleted_objects"], real["deleted_bytes"]) == (8, 3500)
    assert names(emulator, bucket) == {
        f"{SLURM_CACHE}/recent2.binarypb",
        f"{SLURM_CACHE}/recent3.binarypb",
        "pathways-scratch/other/compilation_cache/x.binarypb",
    }


def test_teardown_skips_when_the_training_task_pushed_no_location(
    emulator: GcsEmulator, bucket: str, seed: Seed, cleanup_dags: str
) -> None:
    seed(bucket, {"runs/compilation_cache/e.binarypb": 1})
    outcomes = run_dag(
        load_dag(cleanup_dags, "gcs_cleanup_after_training"), {"pathways_dir": "", "fail": True}
    )
    assert outcomes["cleanup_cache"].state == "skipped"
    assert names(emulator, bucket) == {"runs/compilation_cache/e.binarypb"}


def test_a_bad_rendered_location_fails_the_task_and_deletes_nothing(
    emulator: GcsEmulator, bucket: str, seed: Seed, cleanup_dags: str, capfd: pytest.CaptureFixture[str]
) -> None:
    seed(bucket, {"runs/exp/compilation_cache/e.binarypb": 1})
    dag = load_dag(cleanup_dags, "gcs_cleanup_after_training")
    outcomes = run_dag(dag, {"pathways_dir": f"s3://{bucket}/runs/exp", "older_than": "1d"})
    assert outcomes["cleanup_cache"].state == "failed"
    logs = capfd.readouterr()
    assert (
        f"pathways_dir pushed by 'train'='s3://{bucket}/runs/exp' is not a gs:// location"
        in logs.out + logs.err
    )
    outcomes = run_dag(dag, {"pathways_dir": f"gs://{bucket}/runs/exp", "older_than": "-2d"})
    assert outcomes["cleanup_cache"].state == "failed"
    assert names(emulator, bucket) == {"runs/exp/compilation_cache/e.binarypb"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"scratch_location": "s3://bkt/pathways", "older_than": "7d"},
            "scratch_location='s3://bkt/pathways'",
        ),
        ({"scratch_location": "gs://my-bucket", "older_than": "7d"}, "allow_bucket_root=True"),
        ({"scratch_location": "gs://bkt-a/x", "bucket": "bkt-b", "older_than": "7d"}, "exactly one of"),
        ({"bucket": "bkt/a/b", "older_than": "7d"}, "give only the bucket name"),
        ({"bucket": "my-bucket", "older_than": "-3d"}, "older_than='-3d' is negative"),
        ({"bucket": "my-bucket"}, "give older_than"),
        ({"bucket": "my-bucket", "max_cache_bytes": "lots"}, "max_cache_bytes='lots' is not a size"),
    ],
)
def test_bad_static_arguments_fail_at_dag_parse_time(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CleanupCompilationCacheOperator(task_id="cleanup", **kwargs)  # type: ignore[arg-type]


def test_templated_arguments_are_checked_when_rendered_not_at_parse_time() -> None:
    op = CleanupCompilationCacheOperator(
        task_id="cleanup", scratch_location="{{ params.where }}", older_than="{{ params.age }}"
    )
    assert op.trigger_rule == "all_done"
    assert {"scratch_location", "older_than", "max_cache_bytes", "bucket"} <= set(op.template_fields)


def test_lifecycle_rule_operator_is_idempotent(
    lifecycle_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch, cleanup_dags: str
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", lifecycle_emulator.url)
    lifecycle_emulator.create_bucket("team-bucket-dag")
    dag = load_dag(cleanup_dags, "gcs_cache_lifecycle_rule")
    first = run_dag(dag, {"bucket": "team-bucket-dag"})["ensure_rule"]
    second = run_dag(dag, {"bucket": "team-bucket-dag"})["ensure_rule"]
    assert (first.state, first.xcom["return_value"]) == ("success", "added")
    assert (second.state, second.xcom["return_value"]) == ("success", "unchanged")
    rules = lifecycle_emulator.request("GET", "/storage/v1/b/team-bucket-dag")["lifecycle"]["rule"]
    assert rules == [
        {
            "action": {"type": "Delete"},
            "condition": {"age": 14, "matchesPrefix": ["pathways-scratch/shared/compilation_cache/"]},
        }
    ]
