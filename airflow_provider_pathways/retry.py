"""Retry policy that retries preemption and fails user and spec errors at once."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy

from airflow_provider_pathways.failures import FailureClass, PathwaysJobFailed

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context


class PathwaysRetryPolicy(RetryPolicy):
    """
    Retry preempted Pathways jobs with exponential backoff; fail program and spec errors at once.

    :param base_delay: delay before the first retry after a preemption.
    :param max_delay: upper bound of the backoff.
    :param multiplier: growth of the delay per try.
    """

    def __init__(
        self,
        base_delay: timedelta = timedelta(minutes=1),
        max_delay: timedelta = timedelta(minutes=30),
        multiplier: float = 2.0,
    ) -> None:
        if base_delay.total_seconds() < 0 or max_delay < base_delay:
            raise ValueError("PathwaysRetryPolicy: need 0 <= base_delay <= max_delay")
        if multiplier < 1:
            raise ValueError("PathwaysRetryPolicy: multiplier must be >= 1")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.multiplier = multiplier

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
        if not isinstance(exception, PathwaysJobFailed):
            return RetryDecision.default()
        failure_class = exception.failure_class
        if failure_class is FailureClass.PREEMPTED:
            return RetryDecision.retry(
                delay=self.backoff(try_number),
                reason=f"preemption, retrying with backoff: {exception}",
            )
        if failure_class in (FailureClass.USER_PROGRAM_FAILED, FailureClass.SPEC_REJECTED):
            return RetryDecision.fail(reason=f"{failure_class.value.replace('_', ' ')}: {exception}")
        return RetryDecision.default()

    def serialize(self) -> dict[str, Any]:
        return {
            "base_delay": self.base_delay.total_seconds(),
            "max_delay": self.max_delay.total_seconds(),
            "multiplier": self.multiplier,
        }

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> PathwaysRetryPolicy:
        return cls(
            base_delay=timedelta(seconds=data["base_delay"]),
            max_delay=timedelta(seconds=data["max_delay"]),
            multiplier=data["multiplier"],
        )
