"""Why a Pathways job did not succeed: the failure taxonomy every backend maps its states to."""

from __future__ import annotations

from enum import Enum


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
