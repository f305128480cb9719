"""The exceptions operators raise for each failure class, and the retry policy that retries
preemption and fails user and spec errors (and unknown outcomes) at once; the preemption budget a
task gets when its author sets no ``retries``."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_provider_pathways.airflow_features import RETRY_POLICIES
from airflow_provider_pathways.reattach_rules import FailureClass
from airflow_provider_pathways.transient import ConnectionToFix

__all__ = [
    "FailureClass",
    "PathwaysInfrastructureFailure",
    "PathwaysJobFailed",
    "PathwaysMaxRestartsReached",
    "PathwaysOutcomeUnknown",
    "PathwaysPreempted",
    "PathwaysQueueTimeout",
    "PathwaysSpecRejected",
    "PathwaysUserProgramFailed",
    "PathwaysWatchLost",
]


class PathwaysJobFailed(AirflowException):
    """A Pathways job ended without success; ``failure_class`` says why."""

    failure_class: FailureClass = FailureClass.UNKNOWN

    def __init__(self, message: str, *, job: str | None = None, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.job = job
        self.exit_code = exit_code

    @staticmethod
    def for_class(
        failure_class: FailureClass,
        message: str,
        *,
        job: str | None = None,
        exit_code: int | None = None,
        retry: bool = True,
    ) -> PathwaysJobFailed:
        """Build the exception type that matches ``failure_class``. With ``retry=False`` it is also
        an ``AirflowFailException``, which fails the task at once whatever its ``retries`` and
        ``retry_policy``: for a task that only watches the job, whose retry could not make it again."""
        exception_type = _EXCEPTION_BY_CLASS.get(failure_class, PathwaysJobFailed)
        if not retry:
            exception_type = _without_retry(exception_type)
        return exception_type(message, job=job, exit_code=exit_code)


if TYPE_CHECKING or RETRY_POLICIES:

    class _NotRetried:
        """A final failure (:attr:`FailureClass.final`): the retry policy fails it at once."""

else:

    class _NotRetried(AirflowFailException):
        """A final failure (:attr:`FailureClass.final`). Without retry policies (before Airflow
        3.3) it is an ``AirflowFailException``: never retried, whatever the task's ``retries``."""


class PathwaysSpecRejected(PathwaysJobFailed, _NotRetried):
    """The spec was refused before or by the controller (e.g. a topology invalid for the machine type)."""

    failure_class = FailureClass.SPEC_REJECTED


class PathwaysUserProgramFailed(PathwaysJobFailed, _NotRetried):
    """The user's program (or workload job) exited with an error."""

    failure_class = FailureClass.USER_PROGRAM_FAILED


class PathwaysPreempted(PathwaysJobFailed):
    """Slices were preempted, evicted, suspended or lost with their nodes."""

    failure_class = FailureClass.PREEMPTED


class PathwaysInfrastructureFailure(PathwaysJobFailed):
    """The cluster failed the job before or around the program: a launch failure, a node failure,
    a job the controller could not create, or a job the cluster no longer knows."""

    failure_class = FailureClass.INFRASTRUCTURE


class PathwaysOutcomeUnknown(PathwaysJobFailed, _NotRetried):
    """The cluster forgot the job before its end was seen: its program may have run, to any end.
    Not retried, so that the program never runs twice without the user's say."""

    failure_class = FailureClass.OUTCOME_UNKNOWN


class PathwaysWatchLost(PathwaysInfrastructureFailure):
    """The task lost sight of its job, which may still be running: the cluster stayed unreachable
    longer than ``outage_tolerance``, the trigger failed, or a retry could not read the job. Retried
    like an infrastructure failure, but the job is kept and the next try reattaches to it; on the
    task's last try the job is deleted or cancelled instead, so that none runs unwatched."""


class PathwaysQueueTimeout(AirflowException):
    """The job waited in the queue (Kueue had not admitted it, or evicted it each time before it
    started) longer than ``queue_timeout`` and was deleted: no program ran. Retried as any
    unclassified failure is (``retries``)."""


class PathwaysMaxRestartsReached(PathwaysJobFailed):
    """The job used up its restarts for a reason that could not be classified further."""

    failure_class = FailureClass.MAX_RESTARTS_REACHED


_EXCEPTION_BY_CLASS: dict[FailureClass, type[PathwaysJobFailed]] = {
    FailureClass.SPEC_REJECTED: PathwaysSpecRejected,
    FailureClass.USER_PROGRAM_FAILED: PathwaysUserProgramFailed,
    FailureClass.PREEMPTED: PathwaysPreempted,
    FailureClass.MAX_RESTARTS_REACHED: PathwaysMaxRestartsReached,
    FailureClass.INFRASTRUCTURE: PathwaysInfrastructureFailure,
    FailureClass.OUTCOME_UNKNOWN: PathwaysOutcomeUnknown,
}


_WITHOUT_RETRY: dict[type[PathwaysJobFailed], type[PathwaysJobFailed]] = {}


def _without_retry(exception_type: type[PathwaysJobFailed]) -> type[PathwaysJobFailed]:
    """``exception_type`` that Airflow never retries (named as it is, so logs read the same)."""
    if exception_type not in _WITHOUT_RETRY:
        _WITHOUT_RETRY[exception_type] = type(
            exception_type.__name__,
            (exception_type, AirflowFailException),
            {"__module__": __name__, "__doc__": f"{exception_type.__doc__}\n\nNot retried."},
        )
    return _WITHOUT_RETRY[exception_type]


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


def apply_preemption_budget(
    kwargs: MutableMapping[str, Any],
    preemption_retries: int,
    inherited: Mapping[str, Any] | None = None,
) -> None:
    """
    Fill an operator's keyword arguments so that preemption is retried out of the box.

    When the DAG author sets no ``retries`` (on the task, in its ``default_args`` or in the
    ``inherited`` ones of its DAG and task group), the task gets ``preemption_retries`` retries
    under a ``PathwaysRetryPolicy`` that spends them only on preemption and infrastructure
    failures. An explicit ``retries`` wins. A ``retry_policy`` given by the author is kept either
    way. Before Airflow 3.3 (no retry policies) only the ``retries`` are filled in. Called by the
    operators' ``__init__`` and, for mapped tasks, by their ``partial()``, before Airflow fills
    its own defaults (``retries=0``, no policy) there.
    """
    if (
        isinstance(preemption_retries, bool)
        or not isinstance(preemption_retries, int)
        or preemption_retries < 0
    ):
        raise ValueError(f"preemption_retries: {preemption_retries!r} must be an integer >= 0")
    authored = any("retries" in (given or {}) for given in (kwargs, kwargs.get("default_args"), inherited))
    if not authored:
        kwargs["retries"] = preemption_retries
    if RETRY_POLICIES:
        kwargs.setdefault("retry_policy", PathwaysRetryPolicy(retry_unclassified=authored))


def apply_retry_policy(kwargs: MutableMapping[str, Any]) -> None:
    """Give a task that follows a job (a sensor) the ``PathwaysRetryPolicy`` unless its author set
    one; nothing before Airflow 3.3, where final failures are not retried without it."""
    if RETRY_POLICIES:
        kwargs.setdefault("retry_policy", PathwaysRetryPolicy())


_NEVER_RETRIED: dict[type[ConnectionToFix], type[ConnectionToFix]] = {}


def never_retried(error_type: type[ConnectionToFix], message: str) -> ConnectionToFix:
    """An ``error_type`` with ``message`` that Airflow never retries, whatever the task's ``retries``
    and ``retry_policy`` (an ``AirflowFailException`` too, named as ``error_type`` in the task log)."""
    if error_type not in _NEVER_RETRIED:
        _NEVER_RETRIED[error_type] = type(
            error_type.__name__,
            (error_type, AirflowFailException),
            {"__module__": error_type.__module__, "__doc__": f"{error_type.__doc__}\n\nNot retried."},
        )
    return _NEVER_RETRIED[error_type](message)
