"""Retry policy that retries preemption and fails user and spec errors (and unknown outcomes) at
once; the preemption budget a task gets when its author sets no ``retries``."""

from __future__ import annotations

from collections.abc import MutableMapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_pathways.airflow_features import RETRY_POLICIES
from airflow_provider_pathways.failures import FailureClass, PathwaysJobFailed

if TYPE_CHECKING or RETRY_POLICIES:
    from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy
else:
    RetryPolicy = object  # before Airflow 3.3: PathwaysRetryPolicy refuses to be built

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context


_RETRY_WORDS = {FailureClass.PREEMPTED: "preemption", FailureClass.INFRASTRUCTURE: "infrastructure failure"}


class PathwaysRetryPolicy(RetryPolicy):
    """
    Retry preempted Pathways jobs with exponential backoff; fail program and spec errors, and jobs
    whose outcome is unknown, at once.

    :param base_delay: delay before the first retry after a preemption.
    :param max_delay: upper bound of the backoff.
    :param multiplier: growth of the delay per try.
    :param retry_unclassified: other errors (an API outage, a timeout) follow Airflow's default
        retry; ``False`` fails them at once (used when the task's retries are only a preemption
        budget).
    """

    def __init__(
        self,
        base_delay: timedelta = timedelta(minutes=1),
        max_delay: timedelta = timedelta(minutes=30),
        multiplier: float = 2.0,
        retry_unclassified: bool = True,
    ) -> None:
        if not RETRY_POLICIES:
            raise TypeError(
                "PathwaysRetryPolicy needs Airflow 3.3 or later (retry policies); leave retry_policy "
                "out: program failures and refused specs are not retried on this Airflow either, and "
                "preemption is retried with the task's retries"
            )
        if base_delay.total_seconds() < 0 or max_delay < base_delay:
            raise ValueError("PathwaysRetryPolicy: need 0 <= base_delay <= max_delay")
        if multiplier < 1:
            raise ValueError("PathwaysRetryPolicy: multiplier must be >= 1")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.multiplier = multiplier
        self.retry_unclassified = retry_unclassified

    def backoff(self, try_number: int) -> timedelta:
        """Delay before the retry that follows try ``try_number`` (1-based)."""
        seconds = self.base_delay.total_seconds() * self.multiplier ** max(try_number - 1, 0)
        return timedelta(seconds=min(seconds, self.max_delay.total_seconds()))

    def evaluate(
        self,
        exception: BaseException,
        try_number: int,
        max_tries: int,
        context: Context | None = None,
    ) -> RetryDecision:
        """Map the exception's failure class to a retry decision."""
        failure_class = exception.failure_class if isinstance(exception, PathwaysJobFailed) else None
        if failure_class is not None and failure_class.retryable:
            return RetryDecision.retry(
                delay=self.backoff(try_number),
                reason=f"{_RETRY_WORDS[failure_class]}, retrying with backoff: {exception}",
            )
        if failure_class is not None and failure_class.final:
            return RetryDecision.fail(reason=f"{failure_class.value.replace('_', ' ')}: {exception}")
        if not self.retry_unclassified:
            return RetryDecision.fail(
                reason="the task's retries are a preemption budget; other failures are not retried "
                "(set retries on the task to retry them)"
            )
        return RetryDecision.default()

    def serialize(self) -> dict[str, Any]:
        return {
            "base_delay": self.base_delay.total_seconds(),
            "max_delay": self.max_delay.total_seconds(),
            "multiplier": self.multiplier,
            "retry_unclassified": self.retry_unclassified,
        }

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> PathwaysRetryPolicy:
        return cls(
            base_delay=timedelta(seconds=data["base_delay"]),
            max_delay=timedelta(seconds=data["max_delay"]),
            multiplier=data["multiplier"],
            retry_unclassified=data.get("retry_unclassified", True),
        )


DEFAULT_PREEMPTION_RETRIES = 3


def apply_preemption_budget(kwargs: MutableMapping[str, Any], preemption_retries: int) -> None:
    """
    Fill an operator's keyword arguments so that preemption is retried out of the box.

    When the DAG author sets no ``retries`` (on the task or in ``default_args``), the task gets
    ``preemption_retries`` retries under a ``PathwaysRetryPolicy`` that spends them only on
    preemption and infrastructure failures. An explicit ``retries`` wins. A ``retry_policy``
    given by the author is kept either way. Before Airflow 3.3 (no retry policies) only the
    ``retries`` are filled in.
    """
    if (
        isinstance(preemption_retries, bool)
        or not isinstance(preemption_retries, int)
        or preemption_retries < 0
    ):
        raise ValueError(f"preemption_retries: {preemption_retries!r} must be an integer >= 0")
    authored = "retries" in kwargs or "retries" in (kwargs.get("default_args") or {})
    if not authored:
        kwargs["retries"] = preemption_retries
    if RETRY_POLICIES:
        kwargs.setdefault("retry_policy", PathwaysRetryPolicy(retry_unclassified=authored))


def apply_retry_policy(kwargs: MutableMapping[str, Any]) -> None:
    """Give a task that follows a job (a sensor) the ``PathwaysRetryPolicy`` unless its author set
    one; nothing before Airflow 3.3, where final failures are not retried without it."""
    if RETRY_POLICIES:
        kwargs.setdefault("retry_policy", PathwaysRetryPolicy())
