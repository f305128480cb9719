"""Ages and sizes out of range are refused where they are given, before any request, naming the
parameter and the allowed range: in the operator's constructor, after a template renders, and in
the hook's ``CleanupCriteria``."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta

import pytest

from airflow_provider_pathways.cache import CleanupCriteria
from airflow_provider_pathways.hooks.gcs import CompilationCacheHook
from airflow_provider_pathways.operators.gcs import CleanupCompilationCacheOperator
from sandbox.gcs.launcher import GcsEmulator
from sandbox.gcs.proxy import GcsProxy
from tests.support.airflow_runs import load_dag, run_dag

pytestmark = pytest.mark.gcs

Seed = Callable[..., None]
CACHE_ENTRY = "pathways-scratch/shared/compilation_cache/default/e.binarypb"
AGE_RANGE = "give an age from 0 to 100 years (36500d)"
SIZE_RANGE = "give a whole number of bytes from 0 to 1 EiB (2**60 bytes)"

# (parameter, value, what is wrong, allowed range)
BAD = [
    ("older_than", float("nan"), "is not a finite duration", AGE_RANGE),
    ("older_than", float("inf"), "is not a finite duration", AGE_RANGE),
    ("older_than", float("-inf"), "is not a finite duration", AGE_RANGE),
    ("older_than", "1000000d", "is too long", AGE_RANGE),
    ("older_than", 1e300, "is too long", AGE_RANGE),
    ("older_than", timedelta.max, "is too long", AGE_RANGE),
    ("older_than", "-1d", "is negative", AGE_RANGE),
    ("older_than", "a week", "is not a duration", AGE_RANGE),
    ("min_age", "1000000d", "is too long", AGE_RANGE),
    ("min_age", float("nan"), "is not a finite duration", AGE_RANGE),
    ("min_age", timedelta(days=-1), "is negative", AGE_RANGE),
    ("max_cache_bytes", float("nan"), "is not a finite size", SIZE_RANGE),
    ("max_cache_bytes", float("inf"), "is not a finite size", SIZE_RANGE),
    ("max_cache_bytes", 2**70, "is too large", SIZE_RANGE),
    ("max_cache_bytes", "2000000EiB", "is too large", SIZE_RANGE),
    ("max_cache_bytes", 1.5, "is not a whole number of bytes", SIZE_RANGE),
    ("max_cache_bytes", "-5GiB", "is negative", SIZE_RANGE),
]
IDS = [f"{param}={value!r}" for param, value, _, _ in BAD]


def arguments(param: str, value: object) -> dict[str, object]:
    """The bad value, plus what makes the call otherwise valid (a budget makes min_age matter)."""
    if param == "min_age":
        return {"max_cache_bytes": "1GiB", "min_age": value}
    return {param: value}


def expected(param: str, value: object, problem: str, allowed: str) -> str:
    return re.escape(f"{param}={value!r} {problem}: {allowed}")


@pytest.mark.parametrize(("param", "value", "problem", "allowed"), BAD, ids=IDS)
def test_the_criteria_refuse_when_made(param: str, value: object, problem: str, allowed: str) -> None:
    with pytest.raises(ValueError, match=expected(param, value, problem, allowed)):
        CleanupCriteria(**arguments(param, value))  # type: ignore[arg-type]


@pytest.mark.parametrize(("param", "value", "problem", "allowed"), BAD, ids=IDS)
def test_the_hook_refuses_before_any_request(
    emulator: GcsEmulator,
    proxy: GcsProxy,
    bucket: str,
    seed: Seed,
    param: str,
    value: object,
    problem: str,
    allowed: str,
) -> None:
    seed(bucket, {CACHE_ENTRY: 10})
    before = len(proxy.requests)
    with pytest.raises(ValueError, match=expected(param, value, problem, allowed)):
        CompilationCacheHook().cleanup(
            f"gs://{bucket}/pathways-scratch/shared", CleanupCriteria(**arguments(param, value))
        )
    with pytest.raises(ValueError, match=expected(param, value, problem, allowed)):
        CompilationCacheHook().plan(
            f"gs://{bucket}/pathways-scratch/shared", CleanupCriteria(**arguments(param, value))
        )
    assert proxy.requests[before:] == []
    assert set(emulator.list_objects(bucket)) == {CACHE_ENTRY}


@pytest.mark.parametrize(("param", "value", "problem", "allowed"), BAD, ids=IDS)
def test_the_operator_refuses_when_the_dag_is_parsed(
    param: str, value: object, problem: str, allowed: str
) -> None:
    with pytest.raises(ValueError, match=expected(param, value, problem, allowed)):
        CleanupCompilationCacheOperator(task_id="cleanup", bucket="my-bucket", **arguments(param, value))


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"older_than": "1000000d"}, f"older_than='1000000d' is too long: {AGE_RANGE}"),
        ({"older_than": "nan"}, f"older_than='nan' is not a duration: {AGE_RANGE}"),
        ({"budget": "inf"}, f"max_cache_bytes='inf' is not a size: {SIZE_RANGE}"),
        ({"budget": "9000000PiB"}, f"max_cache_bytes='9000000PiB' is too large: {SIZE_RANGE}"),
    ],
)
def test_a_templated_value_is_refused_after_rendering_before_any_request(
    emulator: GcsEmulator,
    proxy: GcsProxy,
    bucket: str,
    seed: Seed,
    cleanup_dags: str,
    capfd: pytest.CaptureFixture[str],
    conf: dict[str, str],
    message: str,
) -> None:
    seed(bucket, {CACHE_ENTRY: 10})
    before = len(proxy.requests)
    dag = load_dag(cleanup_dags, "gcs_cleanup_templated_values")

    outcome = run_dag(dag, {"bucket": bucket, "older_than": "7d", "budget": "1GiB", **conf})["cleanup_cache"]

    assert outcome.state == "failed"
    logs = capfd.readouterr()
    assert message in logs.out + logs.err
    assert proxy.requests[before:] == []
    assert set(emulator.list_objects(bucket)) == {CACHE_ENTRY}
