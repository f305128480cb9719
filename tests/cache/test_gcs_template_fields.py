"""The cache operators take every template field as an ``XComArg`` and run with the values the
upstream task gave (the coverage of every operator is checked in tests/test_template_fields.py)."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.gcs.launcher import SeedObject
from tests.cache.conftest import OLD
from tests.dags.template_field_scenarios import CACHE_BUCKET
from tests.support.airflow_runs import load_dag, run_dag

pytestmark = pytest.mark.gcs
DAGS = "template_field_scenarios.py"


def test_cache_cleanup_runs_with_every_template_field_from_xcom(
    gcs_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.dags.template_field_scenarios import CACHE_BUCKET

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.url)
    gcs_emulator.create_bucket(CACHE_BUCKET)
    stale = {
        "pathways-scratch/by-location/compilation_cache/a.binarypb": 10,
        "pathways-scratch/shared/compilation_cache/b.binarypb": 20,
        "pathways-scratch/by-task/compilation_cache/c.binarypb": 30,
        "pathways-scratch/by-task/checkpoints/step_1/state": 40,
    }
    gcs_emulator.seed_objects(CACHE_BUCKET, (SeedObject(n, size, OLD) for n, size in stale.items()))

    outcomes = run_dag(load_dag(DAGS, "xcomarg_cache"))

    deleted = {
        task: (outcomes[task].state, outcomes[task].xcom["return_value"]["deleted_bytes"])
        for task in ("by_location", "by_bucket", "by_task")
    }
    assert deleted == {
        "by_location": ("success", 10),
        "by_bucket": ("success", 20),
        "by_task": ("success", 30),
    }
    assert set(gcs_emulator.list_objects(CACHE_BUCKET)) == {
        "pathways-scratch/by-task/checkpoints/step_1/state"
    }


def test_cache_lifecycle_rule_runs_with_every_template_field_from_xcom(
    lifecycle_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", lifecycle_emulator.url)
    lifecycle_emulator.create_bucket(CACHE_BUCKET)

    outcome = run_dag(load_dag(DAGS, "xcomarg_cache_lifecycle"))["lifecycle"]

    assert (outcome.state, outcome.xcom["return_value"]) == ("success", "added")
    rules = lifecycle_emulator.request("GET", f"/storage/v1/b/{CACHE_BUCKET}")["lifecycle"]["rule"]
    assert rules[0]["condition"]["matchesPrefix"] == ["pathways-scratch/shared/compilation_cache/"]
