"""Transport-independent model of a Slurm job: parsing of slurmrestd JSON (v0.0.38 to v0.0.44) and
``scontrol -o show job`` text, submission input validation, and the one mapping of a job to an outcome.

Standard library only (``airflow_provider_pathways.failures`` is imported lazily by :func:`job_outcome`),
so importing this module is fast and pulls in neither Airflow nor any network library.
"""

from __future__ import annotations

import os
import re
import shlex
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
    * ``FAILED`` (``NonZeroExitCode``, ``RaisedSignal``), ``OUT_OF_MEMORY`` and ``SPECIAL_EXIT`` →
      FAILED, ``USER_PROGRAM_FAILED``; the message has the exit code or signal. A ``FAILED`` job
      with another reason (e.g. a launch failure) → FAILED, ``UNKNOWN``.
    * ``PREEMPTED``, ``NODE_FAIL``, ``BOOT_FAIL`` → FAILED, ``PREEMPTED``.
    * A requeued job that waits to run again (flag ``REQUEUED``, or ``PENDING`` with restarts) →
      **ACTIVE with** ``PREEMPTED``: Slurm will run it again under the same id, so it is not a
      failure, but the class and message report the preemption. A requeued job that runs again
      is plain ACTIVE (the message counts the restarts).
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
    if state in ("PREEMPTED", "NODE_FAIL", "BOOT_FAIL"):
        what = {
            "PREEMPTED": "was preempted",
            "NODE_FAIL": "lost its node",
            "BOOT_FAIL": "could not boot its node",
        }
        return JobOutcome.FAILED, FailureClass.PREEMPTED, f"{label} {what[state]} ({state}){because}"
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
    the ``REQUEUED`` flag (what v0.0.40+ would report and 22.05 does not).
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
        if work_dir and not std_out.startswith("/"):
            std_out = os.path.join(work_dir, std_out)
        jobs.append(_finish(array_task_id=task_id, std_out=std_out, **common))
    return jobs


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


SUPPORTED_API_VERSIONS = tuple(f"v0.0.{n}" for n in range(44, 37, -1))  # newest first


# ---------------------------------------------------------------------------------------------
# scontrol -o show job
# ---------------------------------------------------------------------------------------------

# Keys ``scontrol show job`` prints (22.05 to 25.x). Inside a free-text value only these end it.
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
    OOMKillStep SelinuxContext ResvPorts StepMgrEnabled TimeMinimum""".split()  # noqa: SIM905
)
# Values that may contain spaces (names, comments, paths); scontrol turns spaces in Reason into "_".
_FREE_TEXT_KEYS = frozenset(
    {"JobName", "Comment", "AdminComment", "SystemComment", "WorkDir", "StdErr", "StdIn", "StdOut"}
    | {"Command", "Extra", "Container", "Features", "Prefer", "MailUser"}
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
    return [_finish(array_task_id=task_id, **common) for task_id in task_ids]


# ---------------------------------------------------------------------------------------------
# Submission input
# ---------------------------------------------------------------------------------------------

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ARRAY_SPEC = re.compile(r"\d+(-\d+(:\d+)?)?(,\d+(-\d+(:\d+)?)?)*(%\d+)?")
_SIMPLE_NAME = re.compile(r"[A-Za-z0-9_.,+@-]+")
_OPTION_NAME = re.compile(r"[a-z][a-z0-9-]*")
_TIME_LIMIT = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
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
    text = str(value).strip()
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
            limit_text = str(time_limit).strip() if isinstance(time_limit, str) else str(time_limit)
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
        for key, value in self.extra_options.items():
            args.append(f"--{key}={value}" if value != "" else f"--{key}")
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
            elif name in _DIRECTIVE_EXTRA_OPTIONS:
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
_FLAG_OPTIONS = frozenset({"requeue", "no-requeue", "hold"})
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
# Directives passed to slurmrestd as job fields (see rest_submit_body); others are reported.
_DIRECTIVE_EXTRA_OPTIONS = frozenset({"cpus-per-task", "ntasks", "constraint", "dependency", "hold"})


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


_REST_OPTION_NAMES = {
    "ntasks": "tasks",
    "mem": "memory_per_node",
    "mem-per-cpu": "memory_per_cpu",
    "constraint": "constraints",
    "ntasks-per-node": "tasks_per_node",
    "gpus-per-node": "gpus_per_node",
    "exclusive": "exclusive",
}
# v0.0.39+ fields that are {set, infinite, number} objects.
_REST_NUMBER_FIELDS = frozenset(
    {"tasks", "cpus_per_task", "memory_per_node", "memory_per_cpu", "tasks_per_node", "time_minimum", "nice"}
)


def rest_submit_body(
    request: SubmitRequest,
    *,
    api_version: str,
    script: str,
    environment: Mapping[str, str],
    working_directory: str,
) -> dict[str, Any]:
    """The ``POST /slurm/vX/job/submit`` body for any supported API version (the one place where
    submission differs by version): v0.0.38 wants ``environment`` as an object and plain numbers;
    v0.0.39+ a ``K=V`` list, ``{set, infinite, number}`` numbers and the script inside ``job``."""
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
    if request.requeue is not None:
        job["requeue"] = request.requeue
    mode = "append" if request.open_mode_append else "truncate"
    job["open_mode"] = [mode.upper()] if new else mode
    for key, value in request.extra_options.items():
        name = _REST_OPTION_NAMES.get(key, key.replace("-", "_"))
        job[name] = _rest_value(value, number if name in _REST_NUMBER_FIELDS else None)
    if new:
        job["script"] = script
        return {"job": job}
    return {"script": script, "job": job}


def _rest_value(value: str, number: Any) -> Any:
    if value == "":
        return True
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if re.fullmatch(r"-?\d+", value):
        return number(int(value)) if number else int(value)
    return value
