"""The one mapping of a Slurm job to an outcome and, for failures, a failure class."""

from __future__ import annotations

from enum import Enum

from airflow_provider_pathways.outcomes import FailureClass
from airflow_provider_pathways.slurm.job import SlurmJob
from airflow_provider_pathways.slurm.states import ACTIVE_STATES


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
