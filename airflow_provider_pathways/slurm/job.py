"""One Slurm job (or array task) as the cluster reports it.

Its states (which are ends, which are active, one reading of a reported state), the field values
every record format shares (numbers, times, exit codes), the one builder of a job record, the
marker of the task instance that submitted it, and job records from ``scontrol -o show job`` text.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from typing import Any

from airflow_provider_pathways.reattach_rules import known_fields
from airflow_provider_pathways.sweep import format_states, parse_states

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


#: Fields added after 0.1.0: a job's dict (trigger events, XCom) leaves them out when unset.
_ADDED_AFTER_0_1_0 = frozenset({"user"})


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
    #: The user the job runs as (None when the record does not say).
    user: str | None = None
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
            elif value is None and f.name in _ADDED_AFTER_0_1_0:
                continue  # left out when unknown, as 0.1.0 wrote the job
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SlurmJob:
        """Inverse of :meth:`to_dict`; unknown keys are ignored."""
        values = known_fields(cls, data)
        for key in ("start_time", "submit_time", "end_time"):
            if isinstance(values.get(key), str):
                values[key] = datetime.fromisoformat(values[key])
        values["flags"] = frozenset(values.get("flags") or ())
        return cls(**values)


#: What a submitted job's ``--comment`` starts with: the task instance that submitted it.
TASK_INSTANCE_MARKER = "airflow-task-instance="


def task_instance_marker(
    dag_id: str, task_id: str, run_id: str, map_index: int | None, deployment: str = ""
) -> str:
    """The ``--comment`` every job a task instance submits carries (a digest: run ids are long, and
    comments are shown to everyone on the cluster), so that a later try finds a job whose
    submission answer never reached the try that submitted it. A named ``deployment``
    (``[pathways] deployment_name``) is part of it: deployments sharing a Slurm user with the same
    DAG ids (and so the same run ids of scheduled runs) never take each other's jobs for their own."""
    parts = [dag_id, task_id, run_id, str(-1 if map_index is None else map_index)]
    identity = "\0".join([*parts, deployment] if deployment else parts)
    return TASK_INSTANCE_MARKER + hashlib.sha256(identity.encode()).hexdigest()[:24]


def is_marked(comment: str | None, marker: str) -> bool:
    """Whether a job's comment names the task instance of ``marker`` (with or without a try)."""
    return comment is not None and (comment == marker or comment.startswith(marker + " "))


#: The role a submitted job's comment gives after the marker: the Pathways service job, or any
#: other job (a workload). Jobs submitted otherwise, or by an earlier version of this provider, say
#: none.
SERVICE_ROLE = "pathways-service"
JOB_ROLE = "job"


def marked_comment(
    marker: str, role: str | None = None, try_number: int | None = None, owner: str | None = None
) -> str:
    """``<marker>[ role=<role>][ try=<n>][ <owner>]``: the comment of a job the marker's task
    instance submitted (``role``), that try ``try_number`` of it follows, and whose task instance
    and policy ``owner`` (:func:`owner_words`) names for a sweep."""
    return " ".join(
        [
            marker,
            *([f"role={role}"] if role else []),
            *([f"try={try_number}"] if try_number else []),
            *([owner] if owner else []),
        ]
    )


def following_comment(marker: str, try_number: int, role: str | None = None, owner: str | None = None) -> str:
    """The comment of a job that try ``try_number`` of the marker's task instance follows: an older
    try of it (superseded, then killed) leaves the job alone. The job keeps its ``role`` and owner."""
    return marked_comment(marker, role, try_number, owner)


def owner_words(
    dag_id: str, task_id: str, map_index: int | None, left_running: Collection[str], deployment: str = ""
) -> str:
    """``dag=<dag_id> task=<task_id> map=<index> keep=<states>[ dep=<deployment>]``: the task
    instance whose state a sweep reads (its run is the one whose marker digest matches: run ids stay
    off the cluster, where every user sees comments; Airflow's ids hold no spaces), the states in
    which its task leaves the job running (:func:`~airflow_provider_pathways.sweep.left_running_when`)
    and the Airflow deployment that submitted it, when named."""
    index = -1 if map_index is None else map_index
    words = f"dag={dag_id} task={task_id} map={index} keep={format_states(left_running)}"
    return f"{words} dep={deployment}" if deployment else words


def comment_fields(comment: str | None) -> dict[str, str] | None:
    """The ``key=value`` words after this provider's marker in a job's comment; None when the
    comment carries no marker of this provider."""
    words = (comment or "").split()
    if not words or not words[0].startswith(TASK_INSTANCE_MARKER):
        return None
    return dict(word.split("=", 1) for word in words[1:] if "=" in word)


def comment_role(comment: str | None) -> str | None:
    """The role this provider gave a job it submitted (:data:`SERVICE_ROLE`, :data:`JOB_ROLE`), from
    the job's comment; None for a job it did not mark with one."""
    return (comment_fields(comment) or {}).get("role")


def followed_by_try(comment: str | None, marker: str) -> int | None:
    """The try of the marker's task instance that follows the job, from its comment; None when no
    try marked it."""
    if not is_marked(comment, marker):
        return None
    value = (comment_fields(comment) or {}).get("try", "")
    return int(value) if value.isdigit() else None


@dataclass(frozen=True)
class CommentOwner:
    """The task instance a job's comment names (but its run: the marker's digest holds it) and the
    states in which its task leaves the job running."""

    marker: str
    dag_id: str
    task_id: str
    map_index: int
    left_running: frozenset[str] | None
    #: The Airflow deployment that submitted the job ("": unnamed).
    deployment: str = ""

    def is_run(self, run_id: str) -> bool:
        """Whether the job is of this task instance's run ``run_id``."""
        marker = task_instance_marker(self.dag_id, self.task_id, run_id, self.map_index, self.deployment)
        return marker == self.marker


def comment_owner(comment: str | None) -> CommentOwner | None:
    """The owner :func:`owner_words` wrote into the comment; None when it names none (a job this
    provider did not mark, or marked before it named owners)."""
    fields = comment_fields(comment)
    if fields is None or not {"dag", "task", "map"} <= fields.keys():
        return None
    try:
        map_index = int(fields["map"])
    except ValueError:
        return None
    marker = (comment or "").split()[0]
    return CommentOwner(
        marker,
        fields["dag"],
        fields["task"],
        map_index,
        parse_states(fields.get("keep")),
        fields.get("dep", ""),
    )


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


# Slurm's NO_VAL / INFINITE markers as they leak into plain integers.
NO_VALUES = {0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF, 0xFFFE, 0xFFFF}


def field_number(value: Any) -> int | None:
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
    return None if number in NO_VALUES else number


def field_time(value: Any) -> datetime | None:
    number = field_number(value)
    if not number or number <= 0:
        return None
    return datetime.fromtimestamp(number, tz=timezone.utc)


def field_text(value: Any) -> str | None:
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


def field_exit(value: Any) -> tuple[int | None, int | None]:
    """Exit code and signal from any REST version's ``exit_code``."""
    if isinstance(value, Mapping) and ("return_code" in value or "status" in value or "signal" in value):
        return_code = field_number(value.get("return_code"))
        signal_info = value.get("signal")
        signal = None
        if isinstance(signal_info, Mapping):
            signal = field_number(signal_info.get("id", signal_info.get("signal_id")))
        elif signal_info is not None:
            signal = field_number(signal_info)
        if return_code is None and signal:  # "SIGNALED" leaves return_code unset: 0, as scontrol shows
            return_code = 0
        return return_code, signal or 0
    return decode_wait_status(field_number(value))


def build_job(
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
    user: str | None = None,
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
        user=user,
    )


def field_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


# slurmctld 24.11+ expands the output path of a record that stands for pending array tasks with
# NO_VAL as the task id ("slice-12_4294967294.out"); each task's own file has its id there.
NO_VAL_TASK = "_4294967294"


def pending_task_path(path: str, task_id: int | None) -> str:
    if task_id is None or NO_VAL_TASK not in path:
        return path
    return path.replace(NO_VAL_TASK, f"_{task_id}")


def first_node(node_list: str | None) -> str | None:
    if not node_list:
        return None
    match = re.match(r"([^,\[]+)(?:\[(\d+))?", node_list)
    if not match:
        return node_list
    return match.group(1) + (match.group(2) or "")


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


def scontrol_exit(value: str | None) -> tuple[int | None, int | None]:
    if not value or ":" not in value:
        return None, None
    code, _, signal = value.partition(":")
    try:
        return int(code), int(signal)
    except ValueError:
        return None, None


def scontrol_time(value: str | None) -> datetime | None:
    """Times as printed with ``SLURM_TIME_FORMAT=%s`` (epoch seconds); None for Unknown/None."""
    text = field_text(value)
    if text is None or text == "Unknown":
        return None
    if text.isdigit():
        return field_time(int(text))
    try:  # ISO local time of the cluster, as printed without SLURM_TIME_FORMAT: assume UTC.
        return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def scontrol_user(value: str | None) -> str | None:
    """The user name of ``UserId=name(uid)``."""
    text = field_text(value)
    return text.split("(", 1)[0] or None if text else None


def jobs_from_scontrol(text: str) -> list[SlurmJob]:
    """Every record of ``scontrol -o show job`` output, pending array ranges expanded."""
    jobs: list[SlurmJob] = []
    for line in text.splitlines():
        if not line.strip().startswith("JobId="):
            continue
        jobs.extend(_scontrol_records(parse_scontrol_record(line)))
    return jobs


def _scontrol_records(f: Mapping[str, str]) -> list[SlurmJob]:
    job_id = field_number(f.get("JobId"))
    if job_id is None:
        raise ValueError(f"scontrol record without a numeric JobId: {f.get('JobId')!r}")
    array_job_id = field_number(f.get("ArrayJobId"))
    task_text = field_text(f.get("ArrayTaskId"))
    task_ids: list[int | None] = [None]
    if task_text:
        task_ids = [int(task_text)] if task_text.isdigit() else (list(expand_task_ids(task_text)) or [None])
    exit_code, exit_signal = scontrol_exit(f.get("ExitCode"))
    common: dict[str, Any] = {
        "job_id": job_id,
        "name": f.get("JobName", ""),
        "raw_state": f.get("JobState"),
        "reason": field_text(f.get("Reason")),
        "exit_code": exit_code,
        "exit_signal": exit_signal,
        "restarts": field_number(f.get("Restarts")) or 0,
        "array_job_id": array_job_id,
        "node_list": field_text(f.get("NodeList")),
        "start_time": scontrol_time(f.get("StartTime")),
        "submit_time": scontrol_time(f.get("SubmitTime")),
        "end_time": scontrol_time(f.get("EndTime")),
        "comment": field_text(f.get("Comment")),
        "std_out": field_text(f.get("StdOut")),
        "work_dir": field_text(f.get("WorkDir")),
        "partition": field_text(f.get("Partition")),
        "user": scontrol_user(f.get("UserId")),
    }
    if len(task_ids) > 1 and common["std_out"]:
        return [
            build_job(
                array_task_id=task_id, **{**common, "std_out": pending_task_path(common["std_out"], task_id)}
            )
            for task_id in task_ids
        ]
    return [build_job(array_task_id=task_id, **common) for task_id in task_ids]
