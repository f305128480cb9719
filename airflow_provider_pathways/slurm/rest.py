"""slurmrestd JSON (API v0.0.38 to v0.0.45): job records, errors, the ``POST /slurm/vX/job/submit``
body for every supported version, and the other answers read (a refused token, a ping)."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from airflow_provider_pathways.slurm.job import (
    SlurmJob,
    build_job,
    expand_task_ids,
    field_exit,
    field_number,
    field_text,
    field_time,
    first_node,
    pending_task_path,
)
from airflow_provider_pathways.slurm.settings import api_version_number
from airflow_provider_pathways.slurm.submit import SubmitRequest, expand_output_pattern, rest_option_fields


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


def jwt_problem(token: str, login: str) -> str:
    """What is visibly wrong with a JWT (expiry, user), without revealing it."""
    parts = token.split(".")
    if len(parts) != 3:
        return "the token is not a JWT"
    try:
        padded = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, TypeError):
        return "the token is not a readable JWT"
    if not isinstance(claims, dict):
        return "the token is not a readable JWT"
    problems = []
    exp = claims.get("exp")
    if isinstance(exp, (int, float)) and exp < time.time():
        problems.append(f"it expired at {datetime.fromtimestamp(exp, tz=timezone.utc).isoformat()}")
    user = claims.get("sun")
    if isinstance(user, str) and user != login:
        problems.append(f"it was issued for user {user!r}, not {login!r}")
    return "; ".join(problems) or "it may be invalid, expired or signed with another key"


def ping_answered(payload: Any) -> bool:
    """A ``/slurm/vX/ping`` answer in which slurmctld responded: ``ping: UP`` (v0.0.38), ``pinged:
    UP`` / ``responding: true`` (v0.0.40+); 24.11+ answer 200 even when slurmctld refused the token."""
    pings = payload.get("pings") if isinstance(payload, Mapping) else None
    if not isinstance(pings, list) or not pings:
        return False
    for ping in pings:
        if not isinstance(ping, Mapping):
            continue
        if ping.get("responding") is True or "UP" in (ping.get("ping"), ping.get("pinged")):
            return True
    return False
