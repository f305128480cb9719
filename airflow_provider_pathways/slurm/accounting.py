"""Job records from accounting (slurmdbd over slurmrestd, or sacct): the ends of jobs slurmctld has purged."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_pathways.slurm.job import (
    SlurmJob,
    build_job,
    expand_task_ids,
    field_exit,
    field_mapping,
    field_number,
    field_text,
    field_time,
    first_node,
    scontrol_exit,
    scontrol_time,
)
from airflow_provider_pathways.slurm.submit import expand_output_pattern

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


def jobs_from_slurmdb(payload: Mapping[str, Any]) -> list[SlurmJob]:
    """Every record of a ``GET /slurmdb/vX/job/{id}`` answer: one per attempt of a requeued job
    (Slurm 24.11 returns the first attempt as ``PENDING``/``REQUEUED`` with restarts 0 and the
    last one with the true end), marked ``source="accounting"``."""
    jobs = []
    for record in payload.get("jobs") or []:
        if not isinstance(record, Mapping):
            continue
        job_id = field_number(record.get("job_id"))
        if job_id is None:
            continue
        state, times, array = (field_mapping(record.get(key)) for key in ("state", "time", "array"))
        comment = record.get("comment")
        if isinstance(comment, Mapping):
            comment = comment.get("job")
        exit_code, exit_signal = field_exit(record.get("exit_code"))
        array_job_id = field_number(array.get("job_id"))
        array_task_id = field_number(array.get("task_id"))
        name = str(record.get("name") or "")
        work_dir = field_text(record.get("working_directory"))
        std_out = field_text(record.get("stdout_expanded")) or field_text(record.get("stdout"))
        if std_out is not None and "%" in std_out:
            std_out = expand_output_pattern(
                std_out,
                job_id=job_id,
                array_job_id=array_job_id or None,
                array_task_id=array_task_id,
                name=name,
                user=field_text(record.get("user")),
                node=first_node(field_text(record.get("nodes"))),
            )
        if std_out and work_dir and not std_out.startswith("/"):
            std_out = os.path.join(work_dir, std_out)
        job = build_job(
            job_id=job_id,
            name=name,
            raw_state=state.get("current"),
            reason=field_text(state.get("reason")),
            exit_code=exit_code,
            exit_signal=exit_signal,
            restarts=field_number(record.get("restart_cnt")) or 0,
            array_job_id=array_job_id,
            array_task_id=array_task_id,
            node_list=field_text(record.get("nodes")),
            start_time=field_time(times.get("start")),
            submit_time=field_time(times.get("submission")),
            end_time=field_time(times.get("end")),
            comment=field_text(comment),
            std_out=std_out,
            work_dir=work_dir,
            partition=field_text(record.get("partition")),
            user=field_text(record.get("user")),
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
        exit_code, exit_signal = scontrol_exit(f["ExitCode"])
        job_id = int(raw_id)
        name = f["JobName"]
        work_dir = field_text(f["WorkDir"])
        for task_id in task_ids:
            std_out = field_text(f["StdOut"])
            if std_out is not None and "%" in std_out:
                std_out = expand_output_pattern(
                    std_out,
                    job_id=job_id,
                    array_job_id=array_job_id,
                    array_task_id=task_id,
                    name=name,
                    user=field_text(f["User"]),
                    node=first_node(field_text(f["NodeList"])),
                )
            if std_out and work_dir and not std_out.startswith("/"):
                std_out = os.path.join(work_dir, std_out)
            job = build_job(
                job_id=job_id,
                name=name,
                raw_state=_sacct_state(f["State"]),
                reason=field_text(f["Reason"]),
                exit_code=exit_code,
                exit_signal=exit_signal,
                restarts=field_number(f["Restarts"]) or 0,
                array_job_id=array_job_id,
                array_task_id=task_id,
                node_list=field_text(f["NodeList"]) if f["NodeList"] != "None assigned" else None,
                start_time=scontrol_time(f["Start"]),
                submit_time=scontrol_time(f["Submit"]),
                end_time=scontrol_time(f["End"]),
                comment=field_text(f["Comment"]),
                std_out=std_out,
                work_dir=work_dir,
                partition=field_text(f["Partition"]),
                user=field_text(f["User"]),
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
