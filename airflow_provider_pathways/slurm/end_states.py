"""What a Slurm job's state means for its caller.

The one mapping of a job to an outcome and, for failures, a failure class; whether a Pathways slice
was lost while a workload ran (the workload's failure is then a preemption, as on GKE, not the
program's fault); and when a wait on a job that will not end by itself (held, or requeued over and
over) ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from airflow_provider_pathways.reattach_rules import FailureClass
from airflow_provider_pathways.slurm.job import ACTIVE_STATES, SlurmJob


class JobOutcome(str, Enum):
    """Where a job stands for the caller: still going, done well, or done badly."""

    ACTIVE = "active"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


def job_outcome(job: SlurmJob) -> tuple[JobOutcome, FailureClass | None, str]:
    """Map a job to ``(outcome, failure class, message)``; the only place this mapping lives.

    * ``COMPLETED`` → SUCCEEDED.
    * A launch failure: the program never started (reason ``JobLaunchFailure``, 22.05; or, 24.11
      and later, an exit "signal" that is a slurmd error code; see :data:`SLURMD_LAUNCH_ERRORS`)
      → FAILED, ``INFRASTRUCTURE``; except ``0:53``, ``ESLURMD_IO_ERROR``: the job's own
      ``--output``/``--error`` file cannot be opened (its directory does not exist or is not
      writable), a mistake in the submission that a retry repeats → FAILED, ``SPEC_REJECTED``.
    * ``FAILED`` (``NonZeroExitCode``, ``RaisedSignal``), ``OUT_OF_MEMORY`` and ``SPECIAL_EXIT`` →
      FAILED, ``USER_PROGRAM_FAILED``; the message has the exit code or signal. A ``FAILED`` job
      with another reason → FAILED, ``UNKNOWN``.
    * ``PREEMPTED`` → FAILED, ``PREEMPTED``.
    * ``NODE_FAIL`` (a job that may not be requeued lost its node), ``BOOT_FAIL`` → FAILED,
      ``INFRASTRUCTURE``.
    * A requeued job that waits to run again (flag ``REQUEUED``, or ``PENDING`` with restarts, or
      ``COMPLETING`` on its way back to ``PENDING``) → **ACTIVE with** ``PREEMPTED``: Slurm will run
      it again under the same id, so it is not an end, but the class and message report the
      preemption. A requeued job that runs again is plain ACTIVE (the message counts the restarts).
    * ``TIMEOUT``, ``CANCELLED``, ``DEADLINE``, ``REVOKED`` → FAILED, ``UNKNOWN`` with the reason.
    * Everything else (``PENDING``, ``RUNNING``, ``SUSPENDED``, ``CONFIGURING``, ``COMPLETING``,
      unknown states) → ACTIVE, no class.
    """
    label = f"Slurm job {job.display_id}" + (f" ({job.name})" if job.name else "")
    because = f" ({job.reason})" if job.reason else ""
    state = job.state
    if state == "COMPLETED":
        return JobOutcome.SUCCEEDED, None, f"{label} completed"
    launch_error = launch_failure(job)
    if launch_error is not None and job.exit_signal in _SUBMISSION_LAUNCH_SIGNALS:
        return (
            JobOutcome.FAILED,
            FailureClass.SPEC_REJECTED,
            f"{label} never started its program: {launch_error} ({state}, exit code "
            f"{job.exit_code}:{job.exit_signal}); check that the directory of --output/--error "
            f"(output_path) exists on the compute nodes and the job's user may write there{because}",
        )
    if launch_error is not None:
        return (
            JobOutcome.FAILED,
            FailureClass.INFRASTRUCTURE,
            f"{label} never started its program: the cluster failed to launch it ({launch_error}; "
            f"{state}, exit code {job.exit_code}:{job.exit_signal}){because}",
        )
    if state in ("FAILED", "OUT_OF_MEMORY", "SPECIAL_EXIT"):
        exit_text = _exit_text(job)
        if state == "OUT_OF_MEMORY":
            return (
                JobOutcome.FAILED,
                FailureClass.USER_PROGRAM_FAILED,
                f"{label} ran out of memory, {exit_text}",
            )
        if state == "SPECIAL_EXIT" or _user_failure(job):
            return (
                JobOutcome.FAILED,
                FailureClass.USER_PROGRAM_FAILED,
                f"{label} failed{because}, {exit_text}",
            )
        return JobOutcome.FAILED, FailureClass.UNKNOWN, f"{label} failed{because}, {exit_text}"
    if state == "PREEMPTED":
        return JobOutcome.FAILED, FailureClass.PREEMPTED, f"{label} was preempted (PREEMPTED){because}"
    if state in ("NODE_FAIL", "BOOT_FAIL"):
        what = "lost its node" if state == "NODE_FAIL" else "could not boot its node"
        return JobOutcome.FAILED, FailureClass.INFRASTRUCTURE, f"{label} {what} ({state}){because}"
    if state == "TIMEOUT":
        return JobOutcome.FAILED, FailureClass.UNKNOWN, f"{label} reached its time limit (TIMEOUT){because}"
    if state == "CANCELLED":
        return JobOutcome.FAILED, FailureClass.UNKNOWN, f"{label} was cancelled{because}"
    if state in ("DEADLINE", "REVOKED"):
        return JobOutcome.FAILED, FailureClass.UNKNOWN, f"{label} ended {state}{because}"
    if job.requeued:
        return (
            JobOutcome.ACTIVE,
            FailureClass.PREEMPTED,
            f"{label} was requeued (preempted or its node failed; restarts: {job.restarts}) "
            f"and is {state} again{because}",
        )
    restarted = f", restarted {job.restarts} time(s)" if job.restarts else ""
    if state not in ACTIVE_STATES:
        return JobOutcome.ACTIVE, None, f"{label} is in unknown Slurm state {state}{because}{restarted}"
    return JobOutcome.ACTIVE, None, f"{label} is {state}{because}{restarted}"


#: slurmd's errors for a batch job it could not launch (``slurm/slurm_errno.h``, the same numbers
#: in 22.05, 24.11 and 26.05). slurmctld stores such an error as the job's wait status, which reads
#: back as "exit code 0, signal error & 0x7f" (``ExitCode=0:53`` for ESLURMD_IO_ERROR = 4021).
SLURMD_LAUNCH_ERRORS = {
    4004: "ESLURMD_INVALID_JOB_CREDENTIAL",
    4005: "ESLURMD_UID_NOT_FOUND",
    4006: "ESLURMD_GID_NOT_FOUND",
    4007: "ESLURMD_CREDENTIAL_EXPIRED",
    4008: "ESLURMD_CREDENTIAL_REVOKED",
    4009: "ESLURMD_CREDENTIAL_REPLAYED",
    4010: "ESLURMD_CREATE_BATCH_DIR_ERROR",
    4011: "ESLURMD_MODIFY_BATCH_DIR_ERROR",
    4012: "ESLURMD_CREATE_BATCH_SCRIPT_ERROR",
    4013: "ESLURMD_MODIFY_BATCH_SCRIPT_ERROR",
    4014: "ESLURMD_SETUP_ENVIRONMENT_ERROR",
    4015: "ESLURMD_SHARED_MEMORY_ERROR",
    4016: "ESLURMD_SET_UID_OR_GID_ERROR",
    4017: "ESLURMD_SET_SID_ERROR",
    4018: "ESLURMD_CANNOT_SPAWN_IO_THREAD",
    4019: "ESLURMD_FORK_FAILED",
    4020: "ESLURMD_EXECVE_FAILED",
    4021: "ESLURMD_IO_ERROR: the job's output or error file could not be opened",
    4022: "ESLURMD_PROLOG_FAILED",
    4031: "ESLURMD_CONTAINER_RUNTIME_INVALID",
    4032: "ESLURMD_CPU_BIND_ERROR",
    4033: "ESLURMD_CPU_LAYOUT_ERROR",
}
_LAUNCH_SIGNALS = {code & 0x7F: name for code, name in SLURMD_LAUNCH_ERRORS.items()}
#: Launch errors caused by the submission itself, not the node: ESLURMD_IO_ERROR.
_SUBMISSION_LAUNCH_SIGNALS = frozenset({4021 & 0x7F})


def launch_failure(job: SlurmJob) -> str | None:
    """What kept an ended job's program from starting, or None. The evidence is an exit "signal"
    that is a slurmd launch error (all versions; 24.11 and later call it ``RaisedSignal:53``).
    22.05's reason ``JobLaunchFailure`` alone is not: it also gives it to a batch script killed by a
    signal (``kill -9 $$``: JobLaunchFailure, ExitCode=0:9, seen on the sandbox), so it counts only
    without any exit code or signal."""
    if not job.terminal or job.state == "COMPLETED":
        return None
    if job.exit_code in (0, None) and job.exit_signal in _LAUNCH_SIGNALS:
        return _LAUNCH_SIGNALS[job.exit_signal]
    if job.reason == "JobLaunchFailure" and not job.exit_code and not job.exit_signal:
        return "JobLaunchFailure"
    return None


def _user_failure(job: SlurmJob) -> bool:
    reason = job.reason or ""
    if reason in ("", "NonZeroExitCode") or reason.startswith("RaisedSignal"):
        return True
    return bool(job.exit_code) or bool(job.exit_signal)


def _exit_text(job: SlurmJob) -> str:
    code = job.exit_code if job.exit_code is not None else "unknown"
    if job.exit_signal:
        return f"exit code {code}, killed by signal {job.exit_signal}"
    return f"exit code {code}"


#: States of a worker array task (or attempt) that mean its slice was taken away.
LOST_SLICE_STATES = frozenset({"PREEMPTED", "NODE_FAIL", "BOOT_FAIL"})
#: How many of the output's last lines may hold the program's final error.
DATA_LOSS_TAIL_LINES = 5
_SLACK = timedelta(seconds=1)  # Slurm reports whole seconds


def slice_lost_during(
    workload: SlurmJob, worker_tasks: Iterable[SlurmJob], output_tail: str = ""
) -> str | None:
    """Why a slice was lost while ``workload`` ran (its start to its end), or None.

    On Slurm the slices are the tasks of the worker array the service job submitted (one per TPU
    slice, ``run_worker_slice.sh``). The workload only talks to the IFRT proxy: when a slice goes,
    its program fails (Pathways reports a lost slice as ``DATA_LOSS``). Evidence, from what Slurm
    reports:

    - a worker array task (or one attempt of it, from accounting) that ended ``PREEMPTED``,
      ``NODE_FAIL`` or ``BOOT_FAIL`` while the workload ran;
    - a worker array task that was requeued (preemption with ``PreemptMode=REQUEUE``, a node
      failure, ``scontrol requeue``) while the workload ran, or waits to start again: Slurm sets a
      requeued job's submit time to the moment of the requeue and holds it about two minutes
      (``BeginTime``), so a slice requeued under the workload may start again only after the
      workload ended;
    - when Slurm shows none of the slices (their records are gone), the workload's output ending in
      a ``DATA_LOSS`` error (the last lines, where the program died). Where Slurm shows the slices
      and none was lost, a ``DATA_LOSS`` is the program's own: no lost slice is behind it.
    """
    started, ended = workload.start_time, workload.end_time
    if started is None:
        return None

    def during(moment: datetime | None) -> bool:
        return (
            moment is not None and started - _SLACK <= moment and (ended is None or moment <= ended + _SLACK)
        )

    tasks = list(worker_tasks)
    for task in tasks:
        if task.state in LOST_SLICE_STATES and during(task.end_time):
            return f"slice {task.display_id} ended {task.state} while the workload ran"
        if task.restarts > 0 and (task.requeued or during(task.submit_time) or during(task.start_time)):
            return f"slice {task.display_id} was requeued while the workload ran (restarts {task.restarts})"
    last = [line for line in output_tail.splitlines() if line.strip()][-DATA_LOSS_TAIL_LINES:]
    if not tasks and any("DATA_LOSS" in line for line in last):
        return "the program ended with DATA_LOSS (how Pathways reports a lost slice)"
    return None


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
    """Follows one job across looks and says when waiting for it is pointless: a job that will not
    end by itself, held or requeued over and over.

    Slurm keeps such a job ``PENDING`` for ever: a batch job whose launch failed ``MaxBatchRequeue``
    times in a row is requeued held (reason ``launch_failed_requeued_held``), a job an administrator
    holds (``JobHeldAdmin``) or that was held (``JobHeldUser``: ``scontrol hold``,
    ``sbatch --hold``, ``scontrol requeuehold``) waits for ``scontrol release``, and a job preempted
    with ``PreemptMode=REQUEUE`` or on a flapping node is requeued without limit. A wait on it ends:

    * at once for ``launch_failed_requeued_held``: Slurm already retried the launch;
    * after ``hold_timeout`` seconds (default :data:`DEFAULT_HOLD_TIMEOUT`, one hour) of an
      unbroken hold;
    * once it was requeued more than ``max_requeues`` times (default
      :data:`DEFAULT_MAX_REQUEUES`).

    The job is then cancelled by its caller and the wait fails with the reason (an infrastructure
    failure for a hold, whose program did not run; a preemption for requeues).

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
