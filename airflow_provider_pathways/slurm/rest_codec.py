"""slurmrestd JSON (API v0.0.38 to v0.0.45): job records and errors."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_pathways.slurm.directives import expand_output_pattern
from airflow_provider_pathways.slurm.fields import (
    build_job,
    field_exit,
    field_number,
    field_text,
    field_time,
    first_node,
    pending_task_path,
)
from airflow_provider_pathways.slurm.job import SlurmJob, expand_task_ids


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
    job_id = field_number(record.get("job_id"))
    if job_id is None:
        raise ValueError("slurmrestd job record without job_id")
    array_job_id = field_number(record.get("array_job_id"))
    array_task_id = field_number(record.get("array_task_id"))
    task_string = field_text(record.get("array_task_string"))
    task_ids: list[int | None] = [array_task_id]
    if array_task_id is None and array_job_id and task_string:
        task_ids = list(expand_task_ids(task_string)) or [None]
    exit_code, exit_signal = field_exit(record.get("exit_code"))
    name = str(record.get("name") or "")
    work_dir = field_text(record.get("current_working_directory"))
    user = field_text(record.get("user_name"))
    node = field_text(record.get("batch_host")) or first_node(field_text(record.get("nodes")))
    raw_out = field_text(record.get("standard_output"))
    common: dict[str, Any] = {
        "job_id": job_id,
        "name": name,
        "raw_state": record.get("job_state"),
        "reason": field_text(record.get("state_reason")),
        "exit_code": exit_code,
        "exit_signal": exit_signal,
        "restarts": field_number(record.get("restart_cnt")) or 0,
        "array_job_id": array_job_id,
        "node_list": field_text(record.get("nodes")),
        "start_time": field_time(record.get("start_time")),
        "submit_time": field_time(record.get("submit_time")),
        "end_time": field_time(record.get("end_time")),
        "comment": field_text(record.get("comment")),
        "work_dir": work_dir,
        "partition": field_text(record.get("partition")),
        "user": user,
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
            std_out = pending_task_path(std_out, task_id)
        if work_dir and not std_out.startswith("/"):
            std_out = os.path.join(work_dir, std_out)
        jobs.append(build_job(array_task_id=task_id, std_out=std_out, **common))
    return jobs


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
