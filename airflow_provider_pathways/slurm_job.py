"""Transport-independent model of a Slurm job: parsing of slurmrestd JSON (v0.0.38 to v0.0.45) and
``scontrol -o show job`` text, submission input validation, and the one mapping of a job to an outcome.

Standard library only (``airflow_provider_pathways.failures`` is imported lazily by :func:`job_outcome`),
so importing this module is fast and pulls in neither Airflow nor any network library.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_pathways.failures import FailureClass

# ---------------------------------------------------------------------------------------------
# States
# ---------------------------------------------------------------------------------------------

#: Base states after which a job never runs again.
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
#: States of a job that is queued or running (phases such as COMPLETING included).
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "CONFIGURING",
        "COMPLETING",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
        "POWER_UP_NODE",
        "UPDATE_DB",
    }
)
#: Flags that mean "the job was put back into the queue".
REQUEUE_FLAGS = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
# Flags Slurm's own state string shows instead of the base state (job_state_string order).
_PHASE_FLAGS = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING")
# Names a 22.05 state string may carry that are really flags on top of a base state.
_FLAG_STATE_BASES = {
    "REQUEUED": "PENDING",
    "REQUEUE_HOLD": "PENDING",
    "REQUEUE_FED": "PENDING",
}
_BASE_STATES = TERMINAL_STATES | {"PENDING", "RUNNING", "SUSPENDED"}

# Slurm's NO_VAL / INFINITE markers as they leak into plain integers.
_NO_VALUES = {0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF, 0xFFFE, 0xFFFF}


class JobOutcome(str, Enum):
    """Where a job stands for the caller: still going, done well, or done badly."""

    ACTIVE = "active"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


# ---------------------------------------------------------------------------------------------
# Errors (plain exceptions: the hook's callers decide how to report them)
# ---------------------------------------------------------------------------------------------


class SlurmError(RuntimeError):
    """Something went wrong talking to Slurm. Messages never contain tokens, keys or passwords."""


class SlurmConnectionError(SlurmError):
    """The cluster (slurmrestd or sshd) could not be reached or the SSH session failed."""


class SlurmHostKeyError(SlurmConnectionError):
    """The SSH server's host key is unknown or does not match known_hosts."""


class SlurmAuthError(SlurmError):
    """slurmrestd or sshd refused the credentials."""


class SlurmApiError(SlurmError):
    """slurmrestd answered with an error."""

    def __init__(self, message: str, *, status: int | None = None, errors: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.errors = list(errors)


class SlurmCommandError(SlurmError):
    """A Slurm command run over SSH failed."""

    def __init__(self, message: str, *, exit_status: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.exit_status = exit_status
        self.stderr = stderr


# ---------------------------------------------------------------------------------------------
# The job model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlurmJob:
    """One Slurm job (or one array task) as the cluster reports it.

    ``exit_code``/``exit_signal`` are only set for ended jobs, ``start_time`` only once the job
    started (not Slurm's expected start of a pending job) and ``end_time`` only for ended jobs.
    Tasks of an array that Slurm has not started yet share the array's record: their ``job_id`` is
    that record's id until they get their own.
    """

    job_id: int
    name: str
    state: str
    flags: frozenset[str] = frozenset()
    reason: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    restarts: int = 0
    array_job_id: int | None = None
    array_task_id: int | None = None
    node_list: str | None = None
    start_time: datetime | None = None
    submit_time: datetime | None = None
    end_time: datetime | None = None
    comment: str | None = None
    std_out: str | None = None
    work_dir: str | None = None
    partition: str | None = None
    #: Who reported the job: ``slurmctld`` (it still knows the job) or ``accounting`` (slurmdbd,
    #: after slurmctld forgot the finished job, MinJobAge later).
    source: str = "slurmctld"

    @property
    def terminal(self) -> bool:
        """The job ended and will not run again."""
        return self.state in TERMINAL_STATES

    @property
    def active(self) -> bool:
        """The job is queued, running or finishing."""
        return not self.terminal

    @property
    def requeued(self) -> bool:
        """The job was put back into the queue (preemption, node failure, ``scontrol requeue``)
        and has not started again yet."""
        if self.terminal:
            return False
        return bool(self.flags & REQUEUE_FLAGS) or (self.state == "PENDING" and self.restarts > 0)

    @property
    def display_id(self) -> str:
        """``12_3`` for an array task, else ``12``."""
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.job_id)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (datetimes as ISO 8601 strings, flags as a sorted list)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, frozenset):
                value = sorted(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SlurmJob:
        """Inverse of :meth:`to_dict`; unknown keys are ignored."""
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {k: v for k, v in data.items() if k in known}
        for key in ("start_time", "submit_time", "end_time"):
            if isinstance(values.get(key), str):
                values[key] = datetime.fromisoformat(values[key])
        values["flags"] = frozenset(values.get("flags") or ())
        return cls(**values)


def job_outcome(job: SlurmJob) -> tuple[JobOutcome, FailureClass | None, str]:
    """Map a job to ``(outcome, failure class, message)``; the only place this mapping lives.

    * ``COMPLETED`` → SUCCEEDED.
    * A launch failure: the program never started (reason ``JobLaunchFailure``, 22.05; or, 24.11
      and later, an exit "signal" that is a slurmd error code, ``0:53`` for ``ESLURMD_IO_ERROR``
      when the output file cannot be opened; see :data:`SLURMD_LAUNCH_ERRORS`) → FAILED,
      ``INFRASTRUCTURE``.
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
    from airflow_provider_pathways.failures import FailureClass

    label = f"Slurm job {job.display_id}" + (f" ({job.name})" if job.name else "")
    because = f" ({job.reason})" if job.reason else ""
    state = job.state
    if state == "COMPLETED":
        return JobOutcome.SUCCEEDED, None, f"{label} completed"
    launch_error = launch_failure(job)
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


# ---------------------------------------------------------------------------------------------
# Shared normalisation
# ---------------------------------------------------------------------------------------------


def normalize_state(raw: str | Sequence[str] | None, *, restarts: int = 0) -> tuple[str, frozenset[str]]:
    """Base state and flags from a 22.05 state string or a v0.0.40+ ``job_state`` list.

    Phase flags (``COMPLETING``, ``CONFIGURING`` ...) become the state, as ``scontrol`` shows them;
    ``REQUEUED``-like states become ``PENDING`` plus the flag; a ``PENDING`` job with restarts gets
    the ``REQUEUED`` flag (22.05 to 26.05 do not report one for a job waiting after a requeue).
    ``PENDING`` with ``COMPLETING`` is a job on its way back into the queue (preempted with
    ``PreemptMode=REQUEUE``, ``scontrol requeue``, node failure; seen on 24.11 and 26.05 for about a
    second): ``COMPLETING`` with the ``REQUEUED`` flag, never an end.
    """
    if raw is None:
        items: list[str] = []
    elif isinstance(raw, str):
        items = [raw]
    else:
        items = [str(item) for item in raw]
    items = [item.strip().upper() for item in items if item and item.strip()]
    base = next((item for item in items if item in _BASE_STATES), None)
    flags = {item for item in items if item != base}
    state = base
    if base == "PENDING" and "COMPLETING" in flags:
        flags.add("REQUEUED")
    for phase in _PHASE_FLAGS:
        if phase in flags:
            state = phase
            flags.discard(phase)
            break
    if state is None:
        first = items[0] if items else "UNKNOWN"
        if first in _FLAG_STATE_BASES:
            state = _FLAG_STATE_BASES[first]
            flags.add(first)
        else:
            state = first
            flags.discard(first)
    if state == "PENDING" and restarts > 0:
        flags.add("REQUEUED")
    return state, frozenset(flags)


def _number(value: Any) -> int | None:
    """A plain integer, or the number of a v0.0.39+ ``{set, infinite, number}`` object; None if unset."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return None if number in _NO_VALUES else number


def _timestamp(value: Any) -> datetime | None:
    number = _number(value)
    if not number or number <= 0:
        return None
    return datetime.fromtimestamp(number, tz=timezone.utc)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    if text in ("", "(null)", "None", "N/A"):
        return None
    return text


def decode_wait_status(status: int | None) -> tuple[int | None, int | None]:
    """``(return code, signal)`` from a raw wait status as v0.0.38/v0.0.39 report ``exit_code``."""
    if status is None:
        return None, None
    signal = status & 0x7F
    if signal and signal != 0x7F:
        return 0, signal
    return (status >> 8) & 0xFF, 0


def _exit(value: Any) -> tuple[int | None, int | None]:
    """Exit code and signal from any REST version's ``exit_code``."""
    if isinstance(value, Mapping) and ("return_code" in value or "status" in value or "signal" in value):
        return_code = _number(value.get("return_code"))
        signal_info = value.get("signal")
        signal = None
        if isinstance(signal_info, Mapping):
            signal = _number(signal_info.get("id", signal_info.get("signal_id")))
        elif signal_info is not None:
            signal = _number(signal_info)
        if return_code is None and signal:  # "SIGNALED" leaves return_code unset: 0, as scontrol shows
            return_code = 0
        return return_code, signal or 0
    return decode_wait_status(_number(value))


_OUTPUT_PATTERN = re.compile(r"%(\d*)([%AajJNnstuxb])")


def expand_output_pattern(
    pattern: str,
    *,
    job_id: int,
    array_job_id: int | None,
    array_task_id: int | None,
    name: str,
    user: str | None,
    node: str | None,
) -> str:
    """Expand Slurm's filename patterns (``%j``, ``%A``, ``%a``, ``%x``, ``%u``, ``%N`` ...)."""

    def replace(match: re.Match[str]) -> str:
        width, letter = match.group(1), match.group(2)
        values: dict[str, Any] = {
            "%": "%",
            "A": array_job_id if array_job_id is not None else job_id,
            "a": array_task_id if array_task_id is not None else 4294967294,
            "j": job_id,
            "J": job_id,
            "N": node or "",
            "n": 0,
            "s": "batch",
            "t": 0,
            "u": user or "",
            "x": name,
            "b": (array_task_id or 0) % 10,
        }
        value = values[letter]
        if letter == "%":
            return "%"
        if isinstance(value, int) and width:
            return str(value).zfill(int(width))
        return str(value)

    return _OUTPUT_PATTERN.sub(replace, pattern)


def expand_task_ids(task_string: str) -> list[int]:
    """Task ids of an array expression such as ``0-7``, ``1,3,5-9:2`` or ``2-3%2``."""
    spec = task_string.split("%", 1)[0].strip()
    ids: list[int] = []
    if not spec:
        return ids
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        step = 1
        if ":" in part:
            part, step_text = part.split(":", 1)
            step = int(step_text)
        if "-" in part:
            first, last = (int(x) for x in part.split("-", 1))
            ids.extend(range(first, last + 1, max(step, 1)))
        else:
            ids.append(int(part))
    return ids


def _finish(
    *,
    job_id: int,
    name: str,
    raw_state: str | Sequence[str] | None,
    reason: str | None,
    exit_code: int | None,
    exit_signal: int | None,
    restarts: int,
    array_job_id: int | None,
    array_task_id: int | None,
    node_list: str | None,
    start_time: datetime | None,
    submit_time: datetime | None,
    end_time: datetime | None,
    comment: str | None,
    std_out: str | None,
    work_dir: str | None,
    partition: str | None,
) -> SlurmJob:
    state, flags = normalize_state(raw_state, restarts=restarts)
    terminal = state in TERMINAL_STATES
    if not array_job_id or array_job_id == 0:
        array_job_id = None
        array_task_id = None
    return SlurmJob(
        job_id=job_id,
        name=name,
        state=state,
        flags=flags,
        reason=reason,
        exit_code=exit_code if terminal else None,
        exit_signal=exit_signal if terminal else None,
        restarts=restarts,
        array_job_id=array_job_id,
        array_task_id=array_task_id,
        node_list=node_list,
        start_time=start_time if state != "PENDING" else None,
        submit_time=submit_time,
        end_time=end_time if terminal else None,
        comment=comment,
        std_out=std_out,
        work_dir=work_dir,
        partition=partition,
    )


# ---------------------------------------------------------------------------------------------
# slurmrestd JSON (all versions: the shape decides, not the version string)
# ---------------------------------------------------------------------------------------------


def jobs_from_rest(payload: Mapping[str, Any]) -> list[SlurmJob]:
    """Every job record of a ``GET /slurm/vX/job/{id}`` answer, pending array ranges expanded."""
    jobs: list[SlurmJob] = []
    for record in payload.get("jobs") or []:
        jobs.extend(_rest_records(record))
    return jobs


def job_from_rest(record: Mapping[str, Any]) -> SlurmJob:
    """One REST job record (the first task if it stands for several pending array tasks)."""
    return _rest_records(record)[0]


def _rest_records(record: Mapping[str, Any]) -> list[SlurmJob]:
    job_id = _number(record.get("job_id"))
    if job_id is None:
        raise ValueError("slurmrestd job record without job_id")
    array_job_id = _number(record.get("array_job_id"))
    array_task_id = _number(record.get("array_task_id"))
    task_string = _text(record.get("array_task_string"))
    task_ids: list[int | None] = [array_task_id]
    if array_task_id is None and array_job_id and task_string:
        task_ids = list(expand_task_ids(task_string)) or [None]
    exit_code, exit_signal = _exit(record.get("exit_code"))
    name = str(record.get("name") or "")
    work_dir = _text(record.get("current_working_directory"))
    user = _text(record.get("user_name"))
    node = _text(record.get("batch_host")) or _first_node(_text(record.get("nodes")))
    raw_out = _text(record.get("standard_output"))
    common: dict[str, Any] = {
        "job_id": job_id,
        "name": name,
        "raw_state": record.get("job_state"),
        "reason": _text(record.get("state_reason")),
        "exit_code": exit_code,
        "exit_signal": exit_signal,
        "restarts": _number(record.get("restart_cnt")) or 0,
        "array_job_id": array_job_id,
        "node_list": _text(record.get("nodes")),
        "start_time": _timestamp(record.get("start_time")),
        "submit_time": _timestamp(record.get("submit_time")),
        "end_time": _timestamp(record.get("end_time")),
        "comment": _text(record.get("comment")),
        "work_dir": work_dir,
        "partition": _text(record.get("partition")),
    }
    jobs = []
    for task_id in task_ids:
        pattern = raw_out or ("slurm-%A_%a.out" if array_job_id else "slurm-%j.out")
        std_out = expand_output_pattern(
            pattern,
            job_id=job_id,
            array_job_id=array_job_id,
            array_task_id=task_id,
            name=name,
            user=user,
            node=node,
        )
        if len(task_ids) > 1:
            std_out = _pending_task_path(std_out, task_id)
        if work_dir and not std_out.startswith("/"):
            std_out = os.path.join(work_dir, std_out)
        jobs.append(_finish(array_task_id=task_id, std_out=std_out, **common))
    return jobs


# slurmctld 24.11+ expands the output path of a record that stands for pending array tasks with
# NO_VAL as the task id ("slice-12_4294967294.out"); each task's own file has its id there.
_NO_VAL_TASK = "_4294967294"


def _pending_task_path(path: str, task_id: int | None) -> str:
    if task_id is None or _NO_VAL_TASK not in path:
        return path
    return path.replace(_NO_VAL_TASK, f"_{task_id}")


def _first_node(node_list: str | None) -> str | None:
    if not node_list:
        return None
    match = re.match(r"([^,\[]+)(?:\[(\d+))?", node_list)
    if not match:
        return node_list
    return match.group(1) + (match.group(2) or "")


def rest_errors_text(errors: Iterable[Any]) -> str:
    """One line describing slurmrestd's ``errors`` list (any version's field names)."""
    parts = []
    for error in errors or ():
        if isinstance(error, Mapping):
            text = error.get("description") or error.get("error") or ""
            number = error.get("error_number", error.get("error_code"))
            label = error.get("error") if error.get("description") else None
            piece = str(text)
            if label and label != text:
                piece += f" ({label})"
            if number not in (None, 0, -1):
                piece += f" [{number}]"
            parts.append(piece)
        else:
            parts.append(str(error))
    return "; ".join(p for p in parts if p) or "no error details"


#: slurm_errno ESLURM_INVALID_JOB_ID: the job id is unknown (never existed or purged).
ESLURM_INVALID_JOB_ID = 2017
#: slurm_errno ESLURM_ALREADY_DONE: the job already ended.
ESLURM_ALREADY_DONE = 2021


def rest_error_numbers(errors: Iterable[Any]) -> set[int]:
    """The ``error_number``/``error_code`` values of slurmrestd's ``errors`` list."""
    numbers = set()
    for error in errors or ():
        if isinstance(error, Mapping):
            number = error.get("error_number", error.get("error_code"))
            if isinstance(number, int):
                numbers.add(number)
    return numbers


def api_version_number(version: str) -> int:
    """``v0.0.40`` → 40."""
    match = re.fullmatch(r"v0\.0\.(\d+)", version)
    if not match:
        raise ValueError(f"not a slurmrestd API version: {version!r} (expected e.g. 'v0.0.40')")
    return int(match.group(1))


#: slurmrestd API versions the provider speaks, newest first: v0.0.38 (Slurm 22.05) to v0.0.45 (26.05).
SUPPORTED_API_VERSIONS = tuple(f"v0.0.{n}" for n in range(45, 37, -1))
SUPPORTED_API_RANGE = f"{SUPPORTED_API_VERSIONS[-1]}..{SUPPORTED_API_VERSIONS[0]}"


# ---------------------------------------------------------------------------------------------
# Accounting (slurmdbd): what the cluster still knows once slurmctld forgot a job
# ---------------------------------------------------------------------------------------------

#: ``sacct`` fields the SSH transport asks for, in this order (``--format``); JobName, Comment and
#: the paths may contain anything but the field separator below.
SACCT_FIELDS = (
    "JobIDRaw",
    "JobID",
    "State",
    "ExitCode",
    "Reason",
    "Restarts",
    "Submit",
    "Start",
    "End",
    "Partition",
    "NodeList",
    "WorkDir",
    "StdOut",
    "User",
    "JobName",
    "Comment",
)
#: ``sacct --delimiter``: a control character no job name or path contains in practice.
SACCT_DELIMITER = "\x1f"
_SACCT_JOB_ID = re.compile(r"([0-9]+)(?:_([0-9]+|\[[^\]]*\]))?(?:\+[0-9]+)?", re.ASCII)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def jobs_from_slurmdb(payload: Mapping[str, Any]) -> list[SlurmJob]:
    """Every record of a ``GET /slurmdb/vX/job/{id}`` answer: one per attempt of a requeued job
    (Slurm 24.11 returns the first attempt as ``PENDING``/``REQUEUED`` with restarts 0 and the
    last one with the true end), marked ``source="accounting"``."""
    jobs = []
    for record in payload.get("jobs") or []:
        if not isinstance(record, Mapping):
            continue
        job_id = _number(record.get("job_id"))
        if job_id is None:
            continue
        state, times, array = (_mapping(record.get(key)) for key in ("state", "time", "array"))
        comment = record.get("comment")
        if isinstance(comment, Mapping):
            comment = comment.get("job")
        exit_code, exit_signal = _exit(record.get("exit_code"))
        array_job_id = _number(array.get("job_id"))
        array_task_id = _number(array.get("task_id"))
        name = str(record.get("name") or "")
        work_dir = _text(record.get("working_directory"))
        std_out = _text(record.get("stdout_expanded")) or _text(record.get("stdout"))
        if std_out is not None and "%" in std_out:
            std_out = expand_output_pattern(
                std_out,
                job_id=job_id,
                array_job_id=array_job_id or None,
                array_task_id=array_task_id,
                name=name,
                user=_text(record.get("user")),
                node=_first_node(_text(record.get("nodes"))),
            )
        if std_out and work_dir and not std_out.startswith("/"):
            std_out = os.path.join(work_dir, std_out)
        job = _finish(
            job_id=job_id,
            name=name,
            raw_state=state.get("current"),
            reason=_text(state.get("reason")),
            exit_code=exit_code,
            exit_signal=exit_signal,
            restarts=_number(record.get("restart_cnt")) or 0,
            array_job_id=array_job_id,
            array_task_id=array_task_id,
            node_list=_text(record.get("nodes")),
            start_time=_timestamp(times.get("start")),
            submit_time=_timestamp(times.get("submission")),
            end_time=_timestamp(times.get("end")),
            comment=_text(comment),
            std_out=std_out,
            work_dir=work_dir,
            partition=_text(record.get("partition")),
        )
        jobs.append(dataclasses.replace(job, source="accounting"))
    return jobs


def _sacct_state(text: str) -> str:
    """``CANCELLED by 0`` → ``CANCELLED``."""
    return text.split(" ", 1)[0] if text else text


def jobs_from_sacct(text: str) -> list[SlurmJob]:
    """The job records of ``sacct -P -n --delimiter=<SACCT_DELIMITER> --format=<SACCT_FIELDS>``
    output, with ``SLURM_TIME_FORMAT=%s``; step lines (``123.batch``) are skipped. Without ``-X``
    and with ``-D`` sacct lists every attempt of a requeued job (the first one ``REQUEUED``, the
    last one with the true end), marked ``source="accounting"``."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split(SACCT_DELIMITER)
        if len(values) < len(SACCT_FIELDS):
            continue
        if len(values) > len(SACCT_FIELDS):  # a Comment that contains the separator
            values = [*values[: len(SACCT_FIELDS) - 1], SACCT_DELIMITER.join(values[len(SACCT_FIELDS) - 1 :])]
        f = dict(zip(SACCT_FIELDS, values, strict=True))
        raw_id = f["JobIDRaw"]
        if not raw_id.isascii() or not raw_id.isdigit():
            continue  # a step: 123.batch, 123.extern, 123.0
        display = _SACCT_JOB_ID.fullmatch(f["JobID"])
        array_job_id: int | None = None
        task_ids: list[int | None] = [None]
        if display and display.group(2):
            array_job_id = int(display.group(1))
            task = display.group(2)
            task_ids = [int(task)] if task.isdigit() else ([*expand_task_ids(task.strip("[]"))] or [None])
        exit_code, exit_signal = _scontrol_exit(f["ExitCode"])
        job_id = int(raw_id)
        name = f["JobName"]
        work_dir = _text(f["WorkDir"])
        for task_id in task_ids:
            std_out = _text(f["StdOut"])
            if std_out is not None and "%" in std_out:
                std_out = expand_output_pattern(
                    std_out,
                    job_id=job_id,
                    array_job_id=array_job_id,
                    array_task_id=task_id,
                    name=name,
                    user=_text(f["User"]),
                    node=_first_node(_text(f["NodeList"])),
                )
            if std_out and work_dir and not std_out.startswith("/"):
                std_out = os.path.join(work_dir, std_out)
            job = _finish(
                job_id=job_id,
                name=name,
                raw_state=_sacct_state(f["State"]),
                reason=_text(f["Reason"]),
                exit_code=exit_code,
                exit_signal=exit_signal,
                restarts=_number(f["Restarts"]) or 0,
                array_job_id=array_job_id,
                array_task_id=task_id,
                node_list=_text(f["NodeList"]) if f["NodeList"] != "None assigned" else None,
                start_time=_scontrol_time(f["Start"]),
                submit_time=_scontrol_time(f["Submit"]),
                end_time=_scontrol_time(f["End"]),
                comment=_text(f["Comment"]),
                std_out=std_out,
                work_dir=work_dir,
                partition=_text(f["Partition"]),
            )
            jobs.append(dataclasses.replace(job, source="accounting"))
    return jobs


def latest_attempts(jobs: Iterable[SlurmJob]) -> list[SlurmJob]:
    """One record per job (array task), its last attempt: accounting keeps one record per run of a
    requeued job, and only the last one has the true end. Order of first appearance is kept."""
    latest: dict[tuple[int, int | None], SlurmJob] = {}

    def rank(job: SlurmJob) -> tuple[int, float, float]:
        submitted = job.submit_time.timestamp() if job.submit_time else 0.0
        started = job.start_time.timestamp() if job.start_time else 0.0
        return job.restarts, submitted, started

    for job in jobs:
        key = (job.job_id, job.array_task_id)
        if key not in latest or rank(job) >= rank(latest[key]):
            latest[key] = job
    return list(latest.values())


class SlurmJobLost(SlurmError):
    """A job this caller submitted is gone: slurmctld no longer knows it (MinJobAge after its end,
    300 s by default) and the cluster keeps no accounting, or accounting has no record of it. Its
    end is unknown; callers treat it as an infrastructure failure, never as success."""

    failure_class = "infrastructure"

    def __init__(self, job_id: int, *, accounting: bool) -> None:
        where = (
            "and accounting (slurmdbd) has no record of it"
            if accounting
            else "and the cluster keeps no accounting"
        )
        super().__init__(f"job {job_id} is no longer known to slurmctld {where}; its end is unknown")
        self.job_id = job_id
        self.accounting = accounting


# ---------------------------------------------------------------------------------------------
# scontrol -o show job
# ---------------------------------------------------------------------------------------------

# Keys ``scontrol show job`` prints (22.05 to 26.05; 24.11 adds ReqTRES, AllocTRES, FailedNode, 26.05
# Exclusive and SubmitLine). Inside a free-text value only these end it.
_SCONTROL_KEYS = frozenset(
    """JobId ArrayJobId ArrayTaskId ArrayTaskThrottle HetJobId HetJobOffset HetJobIdSet JobName UserId
    GroupId MCS_label Priority Nice Account QOS WCKey JobState Reason Dependency Requeue Restarts
    BatchFlag Reboot ExitCode DerivedExitCode RunTime TimeLimit TimeMin SubmitTime EligibleTime
    AccrueTime StartTime EndTime Deadline PreemptEligibleTime PreemptTime SuspendTime
    SecsPreSuspend LastSchedEval Scheduler Partition AllocNode:Sid ReqNodeList ExcNodeList NodeList
    BatchHost NumNodes NumCPUs NumTasks CPUs/Task ReqB:S:C:T TRES Socks/Node NtasksPerN:B:S:C
    CoreSpec MinCPUsNode MinMemoryNode MinMemoryCPU MinTmpDiskNode Features ClusterFeatures Prefer
    DelayBoot Reservation OverSubscribe Contiguous Licenses LicensesAlloc Network Command WorkDir
    AdminComment SystemComment Comment StdErr StdIn StdOut Power MailUser MailType TresPerNode
    TresPerTask TresPerJob TresPerSocket CpusPerTres MemPerTres TresBind TresFreq NtasksPerTRES
    Container ContainerID Extra BurstBuffer BurstBufferState CpuFreqMin CpuFreqMax CpuFreqGov
    Switches Wait-for-Switch KillOInInvalidDependent CronJob CrontabSpec CrontabFailed Segment
    OOMKillStep SelinuxContext ResvPorts StepMgrEnabled TimeMinimum ReqTRES AllocTRES FailedNode
    Exclusive SubmitLine""".split()  # noqa: SIM905
)
# Values that may contain spaces (names, comments, paths); scontrol turns spaces in Reason into "_".
_FREE_TEXT_KEYS = frozenset(
    {"JobName", "Comment", "AdminComment", "SystemComment", "WorkDir", "StdErr", "StdIn", "StdOut"}
    | {"Command", "Extra", "Container", "Features", "Prefer", "MailUser", "SubmitLine"}
)
_KEY_AT = re.compile(r"(?:(?<=\s)|^)([A-Za-z][A-Za-z0-9_:/\-]*)=")


def parse_scontrol_record(line: str) -> dict[str, str]:
    """Fields of one ``scontrol -o show job`` line; names, comments and paths may contain spaces
    and ``=`` (a key inside them only splits when it is a known key not seen yet)."""
    fields_: dict[str, str] = {}
    key: str | None = None
    start = 0
    for match in _KEY_AT.finditer(line):
        candidate = match.group(1)
        if candidate in fields_ or candidate == key:
            continue
        if key is not None and key in _FREE_TEXT_KEYS and candidate not in _SCONTROL_KEYS:
            continue
        if key is not None:
            fields_[key] = line[start : match.start()].strip()
        key = candidate
        start = match.end()
    if key is not None:
        fields_[key] = line[start:].strip()
    return fields_


def _scontrol_exit(value: str | None) -> tuple[int | None, int | None]:
    if not value or ":" not in value:
        return None, None
    code, _, signal = value.partition(":")
    try:
        return int(code), int(signal)
    except ValueError:
        return None, None


def _scontrol_time(value: str | None) -> datetime | None:
    """Times as printed with ``SLURM_TIME_FORMAT=%s`` (epoch seconds); None for Unknown/None."""
    text = _text(value)
    if text is None or text == "Unknown":
        return None
    if text.isdigit():
        return _timestamp(int(text))
    try:  # ISO local time of the cluster, as printed without SLURM_TIME_FORMAT: assume UTC.
        return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def jobs_from_scontrol(text: str) -> list[SlurmJob]:
    """Every record of ``scontrol -o show job`` output, pending array ranges expanded."""
    jobs: list[SlurmJob] = []
    for line in text.splitlines():
        if not line.strip().startswith("JobId="):
            continue
        jobs.extend(_scontrol_records(parse_scontrol_record(line)))
    return jobs


def _scontrol_records(f: Mapping[str, str]) -> list[SlurmJob]:
    job_id = _number(f.get("JobId"))
    if job_id is None:
        raise ValueError(f"scontrol record without a numeric JobId: {f.get('JobId')!r}")
    array_job_id = _number(f.get("ArrayJobId"))
    task_text = _text(f.get("ArrayTaskId"))
    task_ids: list[int | None] = [None]
    if task_text:
        task_ids = [int(task_text)] if task_text.isdigit() else (list(expand_task_ids(task_text)) or [None])
    exit_code, exit_signal = _scontrol_exit(f.get("ExitCode"))
    common: dict[str, Any] = {
        "job_id": job_id,
        "name": f.get("JobName", ""),
        "raw_state": f.get("JobState"),
        "reason": _text(f.get("Reason")),
        "exit_code": exit_code,
        "exit_signal": exit_signal,
        "restarts": _number(f.get("Restarts")) or 0,
        "array_job_id": array_job_id,
        "node_list": _text(f.get("NodeList")),
        "start_time": _scontrol_time(f.get("StartTime")),
        "submit_time": _scontrol_time(f.get("SubmitTime")),
        "end_time": _scontrol_time(f.get("EndTime")),
        "comment": _text(f.get("Comment")),
        "std_out": _text(f.get("StdOut")),
        "work_dir": _text(f.get("WorkDir")),
        "partition": _text(f.get("Partition")),
    }
    if len(task_ids) > 1 and common["std_out"]:
        return [
            _finish(
                array_task_id=task_id, **{**common, "std_out": _pending_task_path(common["std_out"], task_id)}
            )
            for task_id in task_ids
        ]
    return [_finish(array_task_id=task_id, **common) for task_id in task_ids]


# ---------------------------------------------------------------------------------------------
# Submission input
# ---------------------------------------------------------------------------------------------

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ARRAY_SPEC = re.compile(r"[0-9]+(-[0-9]+(:[0-9]+)?)?(,[0-9]+(-[0-9]+(:[0-9]+)?)?)*(%[0-9]+)?")
_SIMPLE_NAME = re.compile(r"[A-Za-z0-9_.,+@-]+")
_OPTION_NAME = re.compile(r"[a-z][a-z0-9-]*")
_TIME_LIMIT = re.compile(r"(?:([0-9]+)-)?([0-9]+)(?::([0-9]+))?(?::([0-9]+))?")
DEFAULT_JOB_NAME = "airflow-slurm-job"
# sbatch options that have their own parameter or that the hook controls.
_RESERVED_OPTIONS = frozenset(
    {"parsable", "job-name", "partition", "account", "qos", "time", "chdir", "output", "error", "array"}
    | {"comment", "requeue", "no-requeue", "open-mode", "wrap", "export", "export-file", "help", "usage"}
)


def parse_time_limit(value: str | int) -> int | None:
    """Minutes of a Slurm time limit (``90``, ``1:30:00``, ``2-12``, ``UNLIMITED``); None = unlimited.

    Seconds round up to whole minutes, as Slurm does.
    """
    if isinstance(value, bool):
        raise ValueError("time_limit must be minutes (int) or a Slurm time string, not a bool")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"time_limit must be a positive number of minutes, got {value}")
        return value
    text = str(value)
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    match = _TIME_LIMIT.fullmatch(text)
    if not match:
        raise ValueError(
            f"time_limit {value!r} is not a Slurm time "
            "(minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED)"
        )
    days, a, b, c = match.groups()
    if days is not None:
        hours, minutes, seconds = int(a), int(b or 0), int(c or 0)
        total = int(days) * 86400 + hours * 3600 + minutes * 60 + seconds
    elif c is not None:
        total = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:
        total = int(a) * 60 + int(b)
    else:
        total = int(a) * 60
    minutes_total = -(-total // 60)
    if minutes_total <= 0:
        raise ValueError(f"time_limit {value!r} must be longer than zero")
    return minutes_total


@dataclass(frozen=True)
class SubmitRequest:
    """Validated input of ``SlurmHook.submit_job`` (see there); build it with :meth:`build`."""

    script: str | None
    script_path: str | None
    job_name: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None
    time_limit_minutes: int | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    working_directory: str | None = None
    output: str | None = None
    error: str | None = None
    array: str | None = None
    comment: str | None = None
    requeue: bool | None = None
    open_mode_append: bool = True
    extra_options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        *,
        script: str | None = None,
        script_path: str | None = None,
        job_name: str | None = None,
        partition: str | None = None,
        account: str | None = None,
        qos: str | None = None,
        time_limit: str | int | None = None,
        environment: Mapping[str, str] | None = None,
        working_directory: str | None = None,
        output: str | None = None,
        error: str | None = None,
        array: str | None = None,
        comment: str | None = None,
        requeue: bool | None = None,
        open_mode_append: bool = True,
        extra_options: Mapping[str, str] | None = None,
    ) -> SubmitRequest:
        """Check every field; raises ValueError/TypeError naming the bad field."""
        if (script is None) == (script_path is None):
            raise ValueError(
                "give exactly one of script (the script text) or script_path (a path on the cluster)"
            )
        if script is not None:
            _check_str("script", script, allow_newlines=True)
            if not script.strip():
                raise ValueError("script is empty")
            if not script.startswith("#!"):
                raise ValueError(
                    "script must start with a '#!' line (e.g. '#!/bin/bash'), as sbatch requires"
                )
        if script_path is not None:
            _check_str("script_path", script_path)
            if not script_path.strip():
                raise ValueError("script_path is empty")
        if job_name is not None:
            _check_str("job_name", job_name)
        for name, value in (("partition", partition), ("account", account), ("qos", qos)):
            if value is not None and not _SIMPLE_NAME.fullmatch(str(value)):
                raise ValueError(f"{name} {value!r} is not a valid Slurm name")
        limit_text: str | None = None
        limit_minutes: int | None = None
        if time_limit is not None:
            limit_minutes = parse_time_limit(time_limit)
            limit_text = str(time_limit)
        env = dict(environment or {})
        for key, value in env.items():
            if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
                raise ValueError(f"environment variable name {key!r} is not valid (letters, digits, _)")
            if not isinstance(value, str):
                raise TypeError(f"environment[{key!r}] must be a string, got {type(value).__name__}")
            if "\0" in value:
                raise ValueError(f"environment[{key!r}] contains a NUL byte")
        for name, value in (("working_directory", working_directory), ("output", output), ("error", error)):
            if value is not None:
                _check_str(name, value)
        if array is not None and not _ARRAY_SPEC.fullmatch(str(array)):
            raise ValueError(f"array {array!r} is not a Slurm array spec (e.g. '0-7', '1,3,5-9:2', '0-15%4')")
        if comment is not None:
            _check_str("comment", comment)
        if requeue is not None and not isinstance(requeue, bool):
            raise TypeError("requeue must be True, False or None")
        options = dict(extra_options or {})
        for key, value in options.items():
            if not isinstance(key, str) or not _OPTION_NAME.fullmatch(key):
                raise ValueError(
                    f"extra_options key {key!r} must be an sbatch long option name like 'cpus-per-task'"
                )
            if key in _RESERVED_OPTIONS:
                raise ValueError(
                    f"extra_options[{key!r}] is not allowed: use the submit_job parameter instead"
                )
            if not isinstance(value, str):
                raise TypeError(f"extra_options[{key!r}] must be a string ('' for a flag)")
            _check_str(f"extra_options[{key!r}]", value)
            if key in MAPPED_OPTIONS:
                check_option(key, value)
        return cls(
            script=script,
            script_path=script_path,
            job_name=job_name,
            partition=partition,
            account=account,
            qos=qos,
            time_limit=limit_text,
            time_limit_minutes=limit_minutes,
            environment=env,
            working_directory=working_directory,
            output=output,
            error=error,
            array=str(array) if array is not None else None,
            comment=comment,
            requeue=requeue,
            open_mode_append=open_mode_append,
            extra_options=options,
        )

    @property
    def display_name(self) -> str:
        """The job name Slurm will show when no ``#SBATCH`` directive sets one."""
        if self.job_name:
            return self.job_name
        return os.path.basename(self.script_path) if self.script_path else DEFAULT_JOB_NAME

    def as_kwargs(self) -> dict[str, Any]:
        """The arguments of :meth:`build` that produce this request."""
        kwargs = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "time_limit_minutes"}
        kwargs["environment"] = dict(self.environment)
        kwargs["extra_options"] = dict(self.extra_options)
        return kwargs

    def sbatch_options(self, directives: Mapping[str, str] | None = None) -> list[str]:
        """``sbatch`` arguments (without the script); paths must already be expanded.

        Parameters given to ``submit_job`` become options (they override ``#SBATCH`` lines, as on
        the command line); the defaults (job name of script text, ``--open-mode=append``) are only
        added when no directive in ``directives`` sets that option.
        """
        directives = directives or {}
        args = ["--parsable"]
        if self.job_name is not None:
            args.append(f"--job-name={self.job_name}")
        elif self.script is not None and "job-name" not in directives:
            args.append(f"--job-name={DEFAULT_JOB_NAME}")
        for option, value in (
            ("partition", self.partition),
            ("account", self.account),
            ("qos", self.qos),
            ("time", self.time_limit),
            ("chdir", self.working_directory),
            ("output", self.output),
            ("error", self.error),
            ("array", self.array),
            ("comment", self.comment),
        ):
            if value is not None:
                args.append(f"--{option}={value}")
        if self.requeue is not None:
            args.append("--requeue" if self.requeue else "--no-requeue")
        if not self.open_mode_append:
            args.append("--open-mode=truncate")
        elif "open-mode" not in directives:
            args.append("--open-mode=append")
        args += sbatch_option_args(self.extra_options)
        return args

    def with_directives(self, directives: Mapping[str, str]) -> tuple[SubmitRequest, list[str]]:
        """For slurmrestd, which ignores ``#SBATCH`` lines: fill the parameters not given to
        ``submit_job`` from the directives it can express. Returns the request and the
        directives it could not apply (``--name`` strings)."""
        kwargs = self.as_kwargs()
        ignored = []
        for name, value in directives.items():
            target = _DIRECTIVE_FIELDS.get(name)
            if target == "requeue":
                if kwargs["requeue"] is None:
                    kwargs["requeue"] = name == "requeue"
            elif target == "open_mode_append":
                if kwargs["open_mode_append"] and value.strip().lower() == "truncate":
                    kwargs["open_mode_append"] = False
            elif target is not None:
                if kwargs[target] is None:
                    kwargs[target] = value
            elif name in MAPPED_OPTIONS:
                kwargs["extra_options"].setdefault(name, value)
            else:
                ignored.append(f"--{name}")
        try:
            return SubmitRequest.build(**kwargs), ignored
        except (ValueError, TypeError) as err:
            raise ValueError(
                f"an #SBATCH line of {self.script_path or 'the script'} is not usable: {err}"
            ) from None


_SHORT_OPTIONS = {
    "J": "job-name",
    "p": "partition",
    "A": "account",
    "q": "qos",
    "t": "time",
    "D": "chdir",
    "o": "output",
    "e": "error",
    "a": "array",
    "c": "cpus-per-task",
    "n": "ntasks",
    "C": "constraint",
    "d": "dependency",
    "H": "hold",
}
# Options without a value (a value only with "=": --exclusive=user).
_FLAG_OPTIONS = frozenset({"requeue", "no-requeue", "hold", "exclusive"})
_DIRECTIVE_FIELDS = {
    "job-name": "job_name",
    "partition": "partition",
    "account": "account",
    "qos": "qos",
    "time": "time_limit",
    "chdir": "working_directory",
    "output": "output",
    "error": "error",
    "array": "array",
    "comment": "comment",
    "requeue": "requeue",
    "no-requeue": "requeue",
    "open-mode": "open_mode_append",
}


def parse_sbatch_directives(script_head: str) -> dict[str, str]:
    """Long option name → value of the ``#SBATCH`` lines sbatch would read (``""`` for flags;
    short options are translated for the common ones, a later line wins)."""
    options: dict[str, str] = {}
    for line in sbatch_directives(script_head):
        try:
            tokens = shlex.split(line[len("#SBATCH") :], comments=True)
        except ValueError:
            continue
        index = 0
        while index < len(tokens):
            token = tokens[index]
            index += 1
            if token.startswith("--"):
                name, equals, value = token[2:].partition("=")
            elif token.startswith("-") and len(token) >= 2:
                name = _SHORT_OPTIONS.get(token[1], f"-{token[1]}")
                value = token[2:].removeprefix("=")
                equals = "=" if value else ""
            else:
                continue
            takes_value = name not in _FLAG_OPTIONS
            if takes_value and not equals and index < len(tokens) and not tokens[index].startswith("-"):
                value = tokens[index]
                index += 1
            options[name] = value
    return options


def _check_str(name: str, value: Any, *, allow_newlines: bool = False) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{name} contains a NUL byte")
    if not allow_newlines and ("\n" in value or "\r" in value):
        raise ValueError(f"{name} must be a single line")


def path_wrapper_script(script_path: str) -> str:
    """A batch script that ``exec``s ``script_path`` (REST has no ``sbatch <path>``)."""
    return f'#!/bin/bash\nexec {shlex.quote(script_path)} "$@"\n'


def sbatch_directives(script_head: str) -> list[str]:
    """The ``#SBATCH`` lines sbatch would read: those before the first command line."""
    directives = []
    for index, line in enumerate(script_head.splitlines()):
        stripped = line.strip()
        if index == 0 and stripped.startswith("#!"):
            continue
        if not stripped or stripped.startswith("#"):
            if re.match(r"#SBATCH\s", stripped):
                directives.append(stripped)
            continue
        break
    return directives


# ---------------------------------------------------------------------------------------------
# sbatch options: checked once, mapped per transport and slurmrestd API version
# ---------------------------------------------------------------------------------------------

_A = re.ASCII
_DEPENDENCY_TYPES = "after|afterany|afterburstbuffer|aftercorr|afternotok|afterok"
_DEPENDENCY_ITEM = rf"(?:(?:{_DEPENDENCY_TYPES})(?::[0-9]+(?:_[0-9]+)?(?:\+[0-9]+)?)+|singleton)"
_OPTION_VALUES: dict[str, re.Pattern[str]] = {
    # sbatch(1) and src/common/slurm_opt.c / proc_args.c of Slurm 22.05 to 26.05.
    "dependency": re.compile(
        rf"{_DEPENDENCY_ITEM}(?:,{_DEPENDENCY_ITEM})*|{_DEPENDENCY_ITEM}(?:\?{_DEPENDENCY_ITEM})+", _A
    ),
    "exclusive": re.compile(r"|user|mcs|topo", _A),
    "nodes": re.compile(r"[1-9][0-9]*(?:-[1-9][0-9]*)?", _A),
    "ntasks": re.compile(r"[1-9][0-9]*", _A),
    "cpus-per-task": re.compile(r"[1-9][0-9]*", _A),
    "ntasks-per-node": re.compile(r"[1-9][0-9]*", _A),
    "mem": re.compile(r"[0-9]+[KMGTkmgt]?", _A),  # str_to_mbytes: MB by default, K rounded up
    "mem-per-cpu": re.compile(r"[0-9]+[KMGTkmgt]?", _A),
    "gres": re.compile(
        r"none|(?:gres/)?[A-Za-z][A-Za-z0-9_.-]*(?::[A-Za-z0-9_.-]+)*(?:,(?:gres/)?[A-Za-z][A-Za-z0-9_.-]*(?::[A-Za-z0-9_.-]+)*)*",
        _A,
    ),
    "constraint": re.compile(r"[A-Za-z0-9_.:*&|!()\[\]-]+", _A),
    "reservation": re.compile(r"[A-Za-z0-9_.+@-]+(?:,[A-Za-z0-9_.+@-]+)*", _A),
    "hold": re.compile(r"", _A),
}
#: Signal names sbatch knows (proc_args.c ``signals_mapping``), with or without ``SIG``, any case.
SIGNAL_NAMES = {
    "HUP": 1, "INT": 2, "QUIT": 3, "ABRT": 6, "KILL": 9, "USR1": 10, "USR2": 12, "PIPE": 13, "ALRM": 14,
    "TERM": 15, "CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22, "URG": 23, "XCPU": 24,
}  # fmt: skip
_SIGNAL = re.compile(r"(?:(B|R|BR|RB):)?(?:SIG)?([A-Z][A-Z0-9]*|[0-9]+)(?:@([0-9]+))?", _A | re.IGNORECASE)
# ``now+N[unit]`` (Slurm's parse_time: seconds by default).
_BEGIN_UNITS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
    **dict.fromkeys(("w", "week", "weeks"), 604800),
}
_BEGIN_RELATIVE = re.compile(
    rf"now(?:\+([0-9]+)({'|'.join(sorted(_BEGIN_UNITS, key=len, reverse=True))})?)?", _A
)
#: sbatch options the hook maps to every transport and API version (or refuses before submission
#: when one version cannot express a value); more pass through to ``sbatch`` over SSH only.
MAPPED_OPTIONS = frozenset({*_OPTION_VALUES, "begin", "signal"})
# A job record's option value after checking: what each transport needs.
_MEM = re.compile(r"([0-9]+)([KMGTkmgt]?)", _A)


@dataclass(frozen=True)
class Signal:
    """``--signal=[{R|B}:]<sig>[@<sig_time>]``: which signal, how long before the end, to whom."""

    number: int
    name: str
    seconds: int = 60
    batch_only: bool = False
    reservation: bool = False

    @property
    def sbatch(self) -> str:
        prefix = ("B" if self.batch_only else "") + ("R" if self.reservation else "")
        return f"{prefix}{':' if prefix else ''}{self.name}@{self.seconds}"


def parse_signal(value: str) -> Signal:
    """A ``--signal`` value as sbatch reads it (``get_signal_opts`` in proc_args.c): a signal name
    or number from 1 to 64, sent ``sig_time`` seconds (default 60, at most 65535) before the end."""
    match = _SIGNAL.fullmatch(value)
    if not match:
        raise ValueError(f"signal {value!r} is not [{{B|R}}:]<signal>[@<seconds>] (e.g. 'B:USR1@300')")
    scope, signal, seconds = match.groups()
    if signal.isdigit():
        number = int(signal)
        if not 1 <= number <= 64:
            raise ValueError(f"signal {value!r}: signal numbers go from 1 to 64")
        name = next((k for k, v in SIGNAL_NAMES.items() if v == number), str(number))
    else:
        name = signal.upper()
        if name not in SIGNAL_NAMES:
            raise ValueError(f"signal {value!r}: unknown signal name (known: {', '.join(SIGNAL_NAMES)})")
        number = SIGNAL_NAMES[name]
    delay = int(seconds) if seconds is not None else 60
    if delay > 0xFFFF:
        raise ValueError(f"signal {value!r}: at most 65535 seconds before the end")
    scope = (scope or "").upper()
    return Signal(number, name, delay, batch_only="B" in scope, reservation="R" in scope)


def parse_begin(value: str, now: float | None = None) -> float:
    """Epoch seconds of a ``--begin`` value: ``now``, ``now+N[unit]`` (seconds by default; units
    seconds, minutes, hours, days, weeks) or an ISO 8601 time with its UTC offset
    (``2026-01-01T10:00:00+00:00``; without an offset the cluster's time zone would decide, so it is
    refused)."""
    now = time.time() if now is None else now
    match = _BEGIN_RELATIVE.fullmatch(value)
    if match:
        count, unit = match.groups()
        if count is None:
            return now
        return now + int(count) * _BEGIN_UNITS[unit or "s"]
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or not re.fullmatch(r"[0-9T:.+Z -]+", value, _A):
        raise ValueError(
            f"begin {value!r} is not 'now', 'now+<N>[seconds|minutes|hours|days|weeks]' or an ISO 8601 "
            "time with a UTC offset (e.g. '2026-01-01T10:00:00+00:00')"
        )
    if moment.tzinfo is None:
        raise ValueError(
            f"begin {value!r} has no UTC offset: the cluster's time zone would decide; add one "
            "(e.g. '+00:00')"
        )
    return moment.timestamp()


def check_option(name: str, value: str) -> None:
    """Refuse a bad value of a mapped sbatch option, naming the option (before any submission)."""
    if name == "begin":
        parse_begin(value)
    elif name == "signal":
        parse_signal(value)
    elif name in _OPTION_VALUES and not _OPTION_VALUES[name].fullmatch(value):
        shown = "a flag ('')" if name == "hold" else "not valid"
        raise ValueError(f"extra_options[{name!r}] = {value!r} is {shown} for sbatch --{name}")


def _mbytes(value: str) -> int:
    """``str_to_mbytes``: MB by default, K rounded up, G and T multiplied."""
    match = _MEM.fullmatch(value)
    if not match:
        raise ValueError(f"{value!r} is not a memory size")
    number, unit = int(match.group(1)), match.group(2).upper()
    if unit == "K":
        return -(-number // 1024)
    return number * {"": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]


def sbatch_option_args(options: Mapping[str, str], *, now: float | None = None) -> list[str]:
    """``--name=value`` arguments for sbatch; ``begin`` becomes ``now+<seconds>`` (an absolute time
    needs no time zone on the login node), ``signal`` its canonical form."""
    args = []
    for key, value in options.items():
        if key == "begin":
            delay = max(0, math.ceil(parse_begin(value, now) - (time.time() if now is None else now)))
            value = f"now+{delay}" if delay else "now"
        elif key == "signal":
            value = parse_signal(value).sbatch
        args.append(f"--{key}={value}" if value != "" else f"--{key}")
    return args


def rest_option_fields(
    options: Mapping[str, str], api_version: str, *, now: float | None = None
) -> dict[str, Any]:
    """Job fields of ``POST /slurm/vX/job/submit`` for the mapped sbatch options, as that API
    version's job description names them (the served OpenAPI documents of Slurm 22.05: v0.0.38
    takes sbatch's own option strings; 24.11 and 26.05: v0.0.40 to v0.0.45 take typed fields).
    Raises ValueError naming the option when this version cannot express it."""
    version = api_version_number(api_version)
    new = version >= 39
    clock = time.time() if now is None else now
    fields_: dict[str, Any] = {}

    def struct(number: int) -> dict[str, Any]:
        return {"set": True, "infinite": False, "number": number}

    for key, value in options.items():
        if key not in MAPPED_OPTIONS:
            raise ValueError(
                f"extra_options[{key!r}]: slurmrestd {api_version} submissions cannot carry sbatch --{key} "
                f"(mapped: {', '.join(sorted(MAPPED_OPTIONS))}); use the SSH transport or drop it"
            )
        if key == "begin":
            moment = max(clock, parse_begin(value, clock))
            if new:
                fields_["begin_time"] = struct(math.ceil(moment))
            else:
                delay = math.ceil(moment - clock)
                fields_["begin_time"] = f"now+{delay}" if delay > 0 else "now"
        elif key == "signal":
            signal = parse_signal(value)
            if new:
                fields_["kill_warning_signal"] = signal.name
                fields_["kill_warning_delay"] = struct(signal.seconds)
                flags = ["BATCH_JOB"] * signal.batch_only + ["RESERVATION_JOB"] * signal.reservation
                if flags:
                    fields_["kill_warning_flags"] = flags
            elif signal.batch_only:
                # slurm_opt.c takes "B:" only inside sbatch (get_signal_opts: run_in_daemon("sbatch")),
                # so slurmrestd 22.05 refuses it ("Invalid SIGNAL specification").
                raise ValueError(
                    f"extra_options['signal'] = {value!r}: slurmrestd {api_version} cannot signal the batch "
                    "shell only ('B:'); use the SSH transport or a signal for the job's steps"
                )
            else:
                fields_["signal"] = signal.sbatch
        elif key == "exclusive":
            if value == "topo" and version < 41:
                raise ValueError(
                    f"extra_options['exclusive'] = 'topo' needs slurmrestd v0.0.41 (Slurm 24.05) or later, "
                    f"not {api_version}"
                )
            if new:
                fields_["shared"] = [value or "none"]
            else:
                fields_["exclusive"] = value or "exclusive"
        elif key in ("nodes", "dependency", "reservation"):
            fields_[key] = value
        elif key == "constraint":
            fields_["constraints"] = value
        elif key == "ntasks":
            fields_["tasks" if new else "ntasks"] = int(value)
        elif key == "ntasks-per-node":
            fields_["tasks_per_node" if new else "ntasks_per_node"] = int(value)
        elif key == "cpus-per-task":
            fields_["cpus_per_task"] = int(value)
        elif key in ("mem", "mem-per-cpu"):
            name = "memory_per_node" if key == "mem" else "memory_per_cpu"
            fields_[name] = struct(_mbytes(value)) if new else value
        elif key == "gres":
            if value == "none":
                continue
            if new:  # sbatch turns --gres into the job's tres_per_node, each item prefixed "gres/"
                items = value.split(",")
                fields_["tres_per_node"] = ",".join(
                    i if i.startswith("gres/") else f"gres/{i}" for i in items
                )
            else:
                fields_["gres"] = value
        elif key == "hold":
            fields_["hold"] = True
    return fields_


def rest_submit_body(
    request: SubmitRequest,
    *,
    api_version: str,
    script: str,
    environment: Mapping[str, str],
    working_directory: str,
    now: float | None = None,
) -> dict[str, Any]:
    """The ``POST /slurm/vX/job/submit`` body for any supported API version (the one place where
    submission differs by version): v0.0.38 wants ``environment`` as an object and sbatch's own
    option strings; v0.0.39+ a ``K=V`` list, ``{set, infinite, number}`` numbers and the script
    inside ``job``. ``requeue=False`` is ``no_requeue: true`` on v0.0.38, whose ``requeue`` field
    sets requeue whatever its value (``arg_set_data_requeue`` in Slurm 22.05's slurm_opt.c)."""
    version = api_version_number(api_version)
    new = version >= 39

    def number(value: int | None) -> Any:
        if not new:
            return value
        if value is None:
            return {"set": True, "infinite": True, "number": 0}
        return {"set": True, "infinite": False, "number": value}

    job: dict[str, Any] = {
        "name": request.display_name,
        "current_working_directory": working_directory,
        "environment": (
            [f"{k}={v}" for k, v in environment.items()] if new else {k: v for k, v in environment.items()}
        ),
    }
    for key, value in (
        ("partition", request.partition),
        ("account", request.account),
        ("qos", request.qos),
        ("standard_output", request.output),
        ("standard_error", request.error),
        ("array", request.array),
        ("comment", request.comment),
    ):
        if value is not None:
            job[key] = value
    if request.time_limit is not None:
        if request.time_limit_minutes is None:
            job["time_limit"] = number(None) if new else 0xFFFFFFFF
        else:
            job["time_limit"] = number(request.time_limit_minutes)
    if request.requeue is True or (request.requeue is False and new):
        job["requeue"] = request.requeue
    elif request.requeue is False:
        job["no_requeue"] = True
    mode = "append" if request.open_mode_append else "truncate"
    job["open_mode"] = [mode.upper()] if new else mode
    job.update(rest_option_fields(request.extra_options, api_version, now=now))
    if new:
        job["script"] = script
        return {"job": job}
    return {"script": script, "job": job}
