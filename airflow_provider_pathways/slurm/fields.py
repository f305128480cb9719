"""Field values every Slurm record format shares (numbers, times, exit codes), and the one
builder of a job record."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from airflow_provider_pathways.slurm.job import SlurmJob
from airflow_provider_pathways.slurm.states import TERMINAL_STATES, normalize_state

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
