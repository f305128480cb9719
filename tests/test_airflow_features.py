"""What the provider does on each Airflow version (airflow_features.FEATURES): the same outcomes
for the user, through the features the running Airflow has. Runs in every compatibility venv."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_pathways.airflow_features import RETRY_POLICIES, deferred_by, resumed_by_an_earlier_try
from airflow_provider_pathways.failures import (
    FailureClass,
    PathwaysJobFailed,
    PathwaysRetryPolicy,
    apply_preemption_budget,
)


@pytest.mark.parametrize("failure", list(FailureClass))
def test_a_final_failure_is_never_retried_and_a_preemption_is(failure: FailureClass) -> None:
    """Before 3.3 a final failure is an AirflowFailException (Airflow's task runner fails it whatever
    the retries); from 3.3 the task's PathwaysRetryPolicy fails it, and an author's policy may not."""
    error = PathwaysJobFailed.for_class(failure, "x")
    if RETRY_POLICIES:
        from airflow.sdk.definitions.retry_policy import RetryAction

        action = PathwaysRetryPolicy().evaluate(error, try_number=1, max_tries=3).action
        assert not isinstance(error, AirflowFailException)
        assert (action is RetryAction.FAIL) == failure.final
    else:
        assert isinstance(error, AirflowFailException) == failure.final


@pytest.mark.parametrize(
    ("given", "retries"),
    [({}, 3), ({"retries": 1}, 1), ({"default_args": {"retries": 0}}, None)],
)
def test_the_preemption_budget_is_applied_where_the_dag_sets_no_retries(
    given: dict[str, Any], retries: int | None
) -> None:
    kwargs = dict(given)
    apply_preemption_budget(kwargs, 3)
    assert kwargs.get("retries") == retries
    assert ("retry_policy" in kwargs) == RETRY_POLICIES


@pytest.mark.parametrize(
    ("dag_args", "task_args", "retries", "unclassified"),
    [({}, {}, 3, False), ({"retries": 5}, {}, 5, True), ({}, {"retries": 2}, 2, True)],
)
def test_a_mapped_task_gets_the_preemption_budget_and_policy_an_unmapped_one_gets(
    dag_args: dict[str, Any], task_args: dict[str, Any], retries: int, unclassified: bool
) -> None:
    """``partial()`` fills Airflow's ``retries=0`` and no retry policy before the operator is built,
    and the scheduler takes a mapped task's tries from them: the operators fill the budget first.
    Checked as the scheduler reads the DAG (serialized), for GKE and Slurm; a preempted index
    retried and a failing one not, in a real deployment (tests/deployment/test_mapped.py)."""
    import pendulum
    from airflow.providers.common.compat.sdk import DAG

    from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator
    from airflow_provider_pathways.operators.slurm import SlurmJobOperator

    try:
        from airflow.serialization.serialized_objects import DagSerialization as Serializer
    except ImportError:  # before Airflow 3.2
        from airflow.serialization.serialized_objects import SerializedDAG as Serializer  # type: ignore

    start = pendulum.datetime(2026, 1, 1, tz="UTC")
    with DAG("mapped_budget", schedule=None, start_date=start, default_args=dag_args) as dag:
        PathwaysJobOperator.partial(task_id="gke", job={}, **task_args).expand(name=["a", "b"])
        SlurmJobOperator.partial(task_id="slurm", **task_args).expand(script_path=["a.sh"])
    scheduled = Serializer.from_dict(Serializer.to_dict(dag))
    for task_id in ("gke", "slurm"):
        for task in (dag.get_task(task_id), scheduled.get_task(task_id)):
            assert task.retries == retries
        policy = dag.get_task(task_id).partial_kwargs.get("retry_policy")
        if RETRY_POLICIES:
            assert isinstance(policy, PathwaysRetryPolicy) and policy.retry_unclassified is unclassified
            assert scheduled.get_task(task_id).has_retry_policy
        else:
            assert policy is None


@pytest.mark.skipif(RETRY_POLICIES, reason="retry policies exist from Airflow 3.3")
def test_a_retry_policy_before_airflow_3_3_is_refused_saying_what_to_do() -> None:
    with pytest.raises(TypeError, match=r"needs Airflow 3\.3.*leave retry_policy out"):
        PathwaysRetryPolicy()


class _Ti:
    def __init__(self, try_number: int) -> None:
        self.try_number = try_number


@pytest.mark.parametrize(
    ("deferred", "current", "stale"),
    [(1, 2, True), (2, 2, False), (None, 2, False)],
)
def test_a_retry_resumed_with_an_earlier_tries_event_starts_afresh(
    deferred: int | None, current: int, stale: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """apache/airflow#56704: Airflow 3.0 hands a retry the ``next_method`` and ``next_kwargs`` of the
    try before it; the try that deferred travels in those kwargs (checked in a real 3.0 deployment
    by tests/deployment/compat)."""
    import logging

    context = {"ti": _Ti(deferred or current)}
    kwargs = deferred_by(context) if deferred is not None else {}
    log = logging.getLogger("pathways-test")
    with caplog.at_level(logging.WARNING, "pathways-test"):
        assert resumed_by_an_earlier_try({"ti": _Ti(current)}, kwargs, log) is stale
    assert ("starting this try afresh" in caplog.text) is stale
