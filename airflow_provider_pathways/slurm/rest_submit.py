"""The ``POST /slurm/vX/job/submit`` body, for every supported API version."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_pathways.slurm.options import rest_option_fields
from airflow_provider_pathways.slurm.settings import api_version_number
from airflow_provider_pathways.slurm.submit import SubmitRequest


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
