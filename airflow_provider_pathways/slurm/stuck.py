"""A Slurm job that will not end by itself: held, or requeued over and over; when a wait on it ends.

Slurm keeps such a job ``PENDING`` for ever: a batch job whose launch failed ``MaxBatchRequeue``
times in a row is requeued held (reason ``launch_failed_requeued_held``), a job an administrator
holds (``JobHeldAdmin``) or that was held (``JobHeldUser``: ``scontrol hold``, ``sbatch --hold``,
``scontrol requeuehold``) waits for ``scontrol release``, and a job preempted with
``PreemptMode=REQUEUE`` or on a flapping node is requeued without limit. A wait on it ends:

* at once for ``launch_failed_requeued_held``: Slurm already retried the launch;
* after ``hold_timeout`` seconds (default :data:`DEFAULT_HOLD_TIMEOUT`, one hour) of an unbroken
  hold;
* once it was requeued more than ``max_requeues`` times (default :data:`DEFAULT_MAX_REQUEUES`).

The job is then cancelled by its caller and the wait fails with the reason (an infrastructure
failure for a hold, whose program did not run; a preemption for requeues).
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_provider_pathways.outcomes import FailureClass
from airflow_provider_pathways.slurm.job import SlurmJob

DEFAULT_HOLD_TIMEOUT = 3600.0
DEFAULT_MAX_REQUEUES = 10

#: Pending reasons of a job Slurm will not start until someone releases it, in a user's words.
HOLD_REASONS = {
    "launch_failed_requeued_held": "its launch failed repeatedly and Slurm requeued it held",
    "JobHeldAdmin": "an administrator holds it",
    "JobHeldUser": "it is held (scontrol hold, sbatch --hold or scontrol requeuehold)",
}
_LAUNCH_HELD = "launch_failed_requeued_held"


@dataclass
class StuckJobWatch:
    """Follows one job across looks and says when waiting for it is pointless.

    :param hold_timeout: seconds a hold may last before the wait ends (``None``: no bound).
    :param max_requeues: requeues after which the wait ends (``None``: no bound).
    """

    hold_timeout: float | None = DEFAULT_HOLD_TIMEOUT
    max_requeues: int | None = DEFAULT_MAX_REQUEUES
    held_since: float | None = None

    def __post_init__(self) -> None:
        if self.hold_timeout is not None and self.hold_timeout < 0:
            raise ValueError(f"hold_timeout: {self.hold_timeout!r} must be >= 0 seconds (or None)")
        if self.max_requeues is not None and self.max_requeues < 0:
            raise ValueError(f"max_requeues: {self.max_requeues!r} must be >= 0 (or None)")

    def stuck(self, job: SlurmJob, now: float) -> tuple[FailureClass, str] | None:
        """The failure class and message when the wait for ``job`` (seen at epoch ``now``) must end;
        None while it may still end by itself."""
        if job.terminal:
            self.held_since = None
            return None
        label = f"Slurm job {job.display_id}" + (f" ({job.name})" if job.name else "")
        if self.max_requeues is not None and job.restarts > self.max_requeues:
            return (
                FailureClass.PREEMPTED,
                f"{label} was requeued {job.restarts} times (preempted or its node failed), more than "
                f"max_requeues ({self.max_requeues}); it is {job.state} again",
            )
        reason = job.reason or ""
        if reason not in HOLD_REASONS and "REQUEUE_HOLD" not in job.flags:
            self.held_since = None
            return None
        why = HOLD_REASONS.get(reason, HOLD_REASONS["JobHeldUser"])
        if reason == _LAUNCH_HELD:
            return (
                FailureClass.INFRASTRUCTURE,
                f"{label} will not start: {why} ({reason}); its program never ran",
            )
        if self.held_since is None:
            self.held_since = now
        held_for = now - self.held_since
        if self.hold_timeout is None or held_for < self.hold_timeout:
            return None
        return (
            FailureClass.INFRASTRUCTURE,
            f"{label} will not start: {why} ({reason or 'REQUEUE_HOLD'}) and stayed held for "
            f"{held_for:.0f}s, longer than hold_timeout ({self.hold_timeout:g}s); release it with "
            "scontrol release, or raise hold_timeout",
        )
