"""What a retry does with the job an earlier try of the same task instance submitted.

One rule set for GKE and Slurm: a job still running or queued is followed; one that succeeded is
reported without running it again; one that ended by preemption, eviction, node loss or another
infrastructure failure (or for a reason nobody could classify) is replaced by a fresh job; one
whose program failed or whose spec was refused fails the task at once, and the program never runs
twice; one the cluster forgot before anyone saw its end (its outcome is unknown: the program may
have run) fails the task too, unless the user asked for a resubmission in that case.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from airflow_provider_pathways.failure_class import FailureClass


class Verdict(str, Enum):
    """Where a submitted job stands, judged the same way for every backend."""

    ACTIVE = "active"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class JobJudgement:
    """A job's verdict, and for a failure its class and the cluster's words."""

    verdict: Verdict
    failure: FailureClass | None = None
    message: str = ""

    def __post_init__(self) -> None:
        if (self.verdict is Verdict.FAILED) != (self.failure is not None):
            raise ValueError("a failure class goes with a FAILED verdict, and only with it")

    @classmethod
    def active(cls, message: str = "") -> JobJudgement:
        return cls(Verdict.ACTIVE, None, message)

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


def reattach_action(judgement: JobJudgement) -> ReattachAction:
    """The action for a job an earlier try submitted, from its judgement."""
    if judgement.verdict is Verdict.ACTIVE:
        return ReattachAction.FOLLOW
    if judgement.verdict is Verdict.SUCCEEDED:
        return ReattachAction.REPORT_SUCCESS
    assert judgement.failure is not None
    if judgement.failure.final:
        return ReattachAction.FAIL
    return ReattachAction.REPLACE
