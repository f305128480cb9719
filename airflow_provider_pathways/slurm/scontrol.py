"""Job records from ``scontrol -o show job`` text."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from airflow_provider_pathways.slurm.fields import (
    build_job,
    field_number,
    field_text,
    field_time,
    pending_task_path,
)
from airflow_provider_pathways.slurm.job import SlurmJob, expand_task_ids

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
