"""PathwaysRetryPolicy: preemption is retried with growing delays, user and spec errors are not."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_provider_pathways.airflow_features import RETRY_POLICIES

if not RETRY_POLICIES:
    pytest.skip(
        "retry policies arrived in Airflow 3.3 (tests/test_airflow_features.py)", allow_module_level=True
    )

from airflow.sdk.definitions.retry_policy import RetryAction

from airflow_provider_pathways.failures import (
    FailureClass,
    PathwaysJobFailed,
    PathwaysMaxRestartsReached,
    PathwaysOutcomeUnknown,
    PathwaysPreempted,
    PathwaysRetryPolicy,
    PathwaysSpecRejected,
    PathwaysUserProgramFailed,
    PathwaysWatchLost,
)


def test_preemption_is_retried_with_exponential_backoff() -> None:
    policy = PathwaysRetryPolicy(base_delay=timedelta(seconds=30), max_delay=timedelta(minutes=5))
    delays = [
        policy.evaluate(PathwaysPreempted("slice 1 preempted"), try_number=n, max_tries=10).retry_delay
        for n in range(1, 6)
    ]
    decision = policy.evaluate(PathwaysPreempted("slice 1 preempted"), try_number=1, max_tries=10)
    assert decision.action is RetryAction.RETRY
    assert "slice 1 preempted" in (decision.reason or "")
    assert delays == [timedelta(seconds=s) for s in (30, 60, 120, 240, 300)]


@pytest.mark.parametrize(
    "error",
    [PathwaysUserProgramFailed("exited with code 3"), PathwaysSpecRejected("topology 3x3")],
)
def test_user_and_spec_failures_fail_at_once_with_the_reason(error: PathwaysJobFailed) -> None:
    decision = PathwaysRetryPolicy().evaluate(error, try_number=1, max_tries=5)
    assert decision.action is RetryAction.FAIL
    assert str(error) in (decision.reason or "")


@pytest.mark.parametrize("retry_unclassified", [True, False])
def test_an_unknown_outcome_is_never_retried(retry_unclassified: bool) -> None:
    """The program may have run: running it again is the user's call, whatever retries are left."""
    error = PathwaysOutcomeUnknown("Slurm job 42 is no longer known to slurmctld")
    decision = PathwaysRetryPolicy(retry_unclassified=retry_unclassified).evaluate(error, 1, 5)
    assert decision.action is RetryAction.FAIL
    assert (decision.reason or "").startswith("outcome unknown: Slurm job 42")


@pytest.mark.parametrize("retry_unclassified", [True, False])
def test_a_lost_watch_is_retried_like_infrastructure(retry_unclassified: bool) -> None:
    """Also on the preemption budget: the retry reattaches to the job, which may still be running."""
    error = PathwaysWatchLost("the Kubernetes API was unreachable for 301s")
    decision = PathwaysRetryPolicy(retry_unclassified=retry_unclassified).evaluate(error, 1, 5)
    assert decision.action is RetryAction.RETRY
    assert error.failure_class is FailureClass.INFRASTRUCTURE


@pytest.mark.parametrize("error", [PathwaysMaxRestartsReached("used up"), ValueError("boom")])
def test_other_failures_keep_the_task_retry_settings(error: BaseException) -> None:
    assert PathwaysRetryPolicy().evaluate(error, try_number=1, max_tries=5).action is RetryAction.DEFAULT


def test_failure_class_builds_the_matching_exception() -> None:
    for failure in FailureClass:
        error = PathwaysJobFailed.for_class(failure, "x", job="j", exit_code=2)
        assert error.failure_class is failure
        assert (error.job, error.exit_code) == ("j", 2)


def test_policy_round_trips_through_serialization() -> None:
    policy = PathwaysRetryPolicy(
        base_delay=timedelta(seconds=5), max_delay=timedelta(seconds=50), multiplier=3
    )
    again = PathwaysRetryPolicy.deserialize(policy.serialize())
    assert [again.backoff(n) for n in range(1, 5)] == [policy.backoff(n) for n in range(1, 5)]


def test_policy_rejects_nonsense_settings() -> None:
    with pytest.raises(ValueError, match="base_delay"):
        PathwaysRetryPolicy(base_delay=timedelta(minutes=10), max_delay=timedelta(minutes=1))
    with pytest.raises(ValueError, match="multiplier"):
        PathwaysRetryPolicy(multiplier=0.5)
