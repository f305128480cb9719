"""How a try of a Pathways job ended, in the terms every backend shares: the failure taxonomy,
the judgement of a job an earlier try submitted and what a new try does with it, and the payloads a
triggerer and a worker send each other.

Reattach, one rule set for GKE and Slurm: a job still running or queued is followed, unless the
task was cleared since a try last followed it and the task's kill ends its job (then it is deleted
or cancelled, as the clear's kill would have, and a fresh job is submitted), or it is suspended and
an earlier try already failed on that suspension (then it is replaced by a fresh job); one that succeeded is
reported without running it again; one that ended by preemption, eviction, node loss or another
infrastructure failure (or for a reason nobody could classify) is replaced by a fresh job; one
whose program failed or whose spec was refused fails the task at once, and the program never runs
twice; one the cluster forgot before anyone saw its end (its outcome is unknown: the program may
have run) fails the task too, unless the user asked for a resubmission in that case. A failure an
earlier try already reported never blocks a new try (a cleared task): that try submits a fresh job
and leaves the failed one as it is.

Payloads are read so that different versions of this provider understand each other: a reader
takes the keys it knows and ignores those a newer version added.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Any


class FailureClass(str, Enum):
    """Why a Pathways job did not succeed; decides whether a retry is worth it."""

    SPEC_REJECTED = "spec_rejected"
    USER_PROGRAM_FAILED = "user_program_failed"
    PREEMPTED = "preempted"
    MAX_RESTARTS_REACHED = "max_restarts_reached"
    INFRASTRUCTURE = "infrastructure"
    #: Whether the program ran, and how it ended, cannot be known: the cluster forgot the job (a
    #: Slurm job purged after ``MinJobAge`` on a cluster without accounting). Never rerun by itself.
    OUTCOME_UNKNOWN = "outcome_unknown"
    UNKNOWN = "unknown"

    @property
    def retryable(self) -> bool:
        """Preemption and infrastructure failures are worth a retry; a rejected spec or a failing
        program is not."""
        return self in (FailureClass.PREEMPTED, FailureClass.INFRASTRUCTURE)

    @property
    def final(self) -> bool:
        """A failure a retry must not paper over: the program failed, the spec was refused, or
        nobody knows whether the program ran (running it again is the user's call)."""
        return self in (
            FailureClass.USER_PROGRAM_FAILED,
            FailureClass.SPEC_REJECTED,
            FailureClass.OUTCOME_UNKNOWN,
        )


class Verdict(str, Enum):
    """Where a submitted job stands, judged the same way for every backend."""

    ACTIVE = "active"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class JobJudgement:
    """A job's verdict, and for a failure its class and the cluster's words. ``suspended``: an
    active job that someone other than its queue paused (it runs again once resumed)."""

    verdict: Verdict
    failure: FailureClass | None = None
    message: str = ""
    suspended: bool = False

    def __post_init__(self) -> None:
        if (self.verdict is Verdict.FAILED) != (self.failure is not None):
            raise ValueError("a failure class goes with a FAILED verdict, and only with it")
        if self.suspended and self.verdict is not Verdict.ACTIVE:
            raise ValueError("only an active job is suspended")

    @classmethod
    def active(cls, message: str = "", *, suspended: bool = False) -> JobJudgement:
        return cls(Verdict.ACTIVE, None, message, suspended)

    @classmethod
    def succeeded(cls, message: str = "") -> JobJudgement:
        return cls(Verdict.SUCCEEDED, None, message)

    @classmethod
    def failed(cls, failure: FailureClass, message: str = "") -> JobJudgement:
        return cls(Verdict.FAILED, failure, message)


class ReattachAction(str, Enum):
    """What a retry does with the job it finds."""

    FOLLOW = "follow"
    REPORT_SUCCESS = "report_success"
    REPLACE = "replace"
    FAIL = "fail"
    SUBMIT = "submit"
    """Submit a fresh job and leave the ended one as it is (its failure was already reported)."""
    RESTART = "restart"
    """The task was cleared while its job ran: delete or cancel the job, as the kill of the cleared
    try would have (a cleared deferred task can start again before its trigger is killed), and
    submit a fresh one."""


def reattach_action(
    judgement: JobJudgement,
    reported: Verdict | None = None,
    *,
    cleared: bool = False,
    kill_ends_job: bool = False,
    left_running: bool = False,
) -> ReattachAction:
    """The action for a job an earlier try submitted, from its judgement and the outcome an
    earlier try already reported for it (None after a crash: nobody reported anything).
    ``cleared``: the task was cleared since a try last followed the job; ``kill_ends_job``: the
    task's kill deletes or cancels its job; ``left_running``: the try that reported ended with the
    job alive (:attr:`KeptJob.left_running`), so what it reported was the try's end, not the job's."""
    if judgement.verdict is Verdict.ACTIVE:
        if judgement.suspended and reported is Verdict.FAILED:  # the try that reported its suspension
            return ReattachAction.REPLACE  # failed on it: following it would fail again at once
        return ReattachAction.RESTART if cleared and kill_ends_job else ReattachAction.FOLLOW
    if reported is Verdict.FAILED and not left_running:
        # the job's own end was reported (also a success after a wait_until="ready" try failed)
        return ReattachAction.SUBMIT
    if judgement.verdict is Verdict.SUCCEEDED:
        return ReattachAction.REPORT_SUCCESS
    assert judgement.failure is not None
    if judgement.failure.final:
        return ReattachAction.FAIL
    return ReattachAction.REPLACE


_JOB, _REPORTED, _OUTCOME, _MAX_TRIES, _LEFT = "job", "reported", "outcome", "max_tries", "left_running"


@dataclass(frozen=True)
class KeptJob:
    """What ``task_state_store`` keeps about a task instance's job across tries and clears.

    ``job``: the backend's id of the job. ``reported``: the outcome a try already reported to
    Airflow (None while nobody has: the try that followed it may have crashed). ``outcome``: what
    that try observed, so that a success is reported again once the job itself is gone.
    ``max_tries``: the task instance's ``max_tries`` when a try last submitted or followed the
    job. Airflow raises it only when the task is cleared, so a larger one on a new try means the
    task was cleared since (not retried). ``left_running``: the try that last followed the job
    ended and left it running (its wait succeeded at ``ready`` or ``created``, it lost sight of
    the job, or gave up on it and kept it): a clear then killed no try of it, so the cleared try
    follows the job instead of ending it.
    """

    job: Any
    reported: Verdict | None = None
    outcome: Any = None
    max_tries: int | None = None
    left_running: bool = False

    def to_stored(self) -> dict[str, Any]:
        stored: dict[str, Any] = {_JOB: self.job}
        if self.reported is not None:
            stored[_REPORTED] = self.reported.value
        if self.outcome is not None:
            stored[_OUTCOME] = self.outcome
        if self.max_tries is not None:
            stored[_MAX_TRIES] = self.max_tries
        if self.left_running:
            stored[_LEFT] = True
        return stored

    @classmethod
    def from_stored(cls, value: Any) -> KeptJob:
        """The kept job from what the store holds; a bare id (as kept before outcomes were) is a
        job whose outcome nobody reported."""
        if isinstance(value, Mapping) and _JOB in value:
            reported = value.get(_REPORTED)
            try:
                verdict = Verdict(reported) if reported is not None else None
            except ValueError:
                verdict = None
            max_tries = value.get(_MAX_TRIES)
            return cls(
                value[_JOB],
                verdict,
                value.get(_OUTCOME),
                max_tries if isinstance(max_tries, int) and not isinstance(max_tries, bool) else None,
                value.get(_LEFT) is True,
            )
        return cls(value)

    def reporting(self, verdict: Verdict, outcome: Any = None) -> KeptJob:
        """The same job, its outcome reported."""
        return replace(self, reported=verdict, outcome=outcome)

    def cleared_since(self, max_tries: int | None) -> bool:
        """Whether the task instance was cleared after a try last submitted or followed the job
        (its ``max_tries`` is now ``max_tries``) while that try still followed it; False when
        either is unknown, or when that try had ended and left the job running."""
        if self.left_running:
            return False
        return self.max_tries is not None and max_tries is not None and max_tries > self.max_tries


def known_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``data`` that name fields of the dataclass ``cls``; the others, which a newer
    version may have added, are dropped."""
    known = {f.name for f in fields(cls)}
    return {key: value for key, value in data.items() if key in known}
