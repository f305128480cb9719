"""Failure classes of a Pathways job and the exceptions operators raise for them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_provider_pathways.airflow_features import RETRY_POLICIES
from airflow_provider_pathways.failure_class import FailureClass

__all__ = [
    "FailureClass",
    "PathwaysInfrastructureFailure",
    "PathwaysJobFailed",
    "PathwaysMaxRestartsReached",
    "PathwaysOutcomeUnknown",
    "PathwaysPreempted",
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
