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
    UNKNOWN = "unknown"

    @property
    def retryable(self) -> bool:
        """Preemption and infrastructure failures are worth a retry; a rejected spec or a failing
        program is not."""
        return self in (FailureClass.PREEMPTED, FailureClass.INFRASTRUCTURE)

    @property
    def final(self) -> bool:
        """A failure no retry can mend: the program failed or the spec was refused."""
        return self in (FailureClass.USER_PROGRAM_FAILED, FailureClass.SPEC_REJECTED)
