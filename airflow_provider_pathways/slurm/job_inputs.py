"""The arguments of the Slurm operators, checked before anything is submitted: the script, the
environment and, for the Pathways service job, its slices and bucket."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_provider_pathways.cache.location import bucket_name_error
from airflow_provider_pathways.slurm.submit import ENV_NAME

#: A TPU slice topology as ``start_pathways.sh`` takes it: ``2x4``, ``2x2x2``.
SLICE_SHAPE = re.compile(r"^[1-9][0-9]*x[1-9][0-9]*(x[1-9][0-9]*)?$")
#: The service job's variables, each set by its own argument.
SERVICE_VARIABLES = ("SLICE_SHAPE", "MIN_SLICES", "MAX_SLICES", "GCS_BUCKET")
_SCALARS = (str, int, float, bool)


def environment_problems(environment: Mapping[str, Any]) -> list[str]:
    """Variable names that are not names, values that are not text (or a number or bool)."""
    problems = []
    for key, value in environment.items():
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            problems.append(f"environment: {key!r} is not a valid variable name (letters, digits, _)")
        if not isinstance(value, _SCALARS):
            problems.append(
                f"environment[{key!r}]: must be a string (or a number or bool), got {type(value).__name__}"
            )
    return problems


def environment_text(environment: Mapping[str, Any]) -> dict[str, str]:
    """The environment as strings: native templating renders ``"3"`` as ``3`` and ``"true"`` as
    ``True``; a variable always arrives as text (``3``, ``true``)."""
    return {
        key: ("true" if value else "false") if isinstance(value, bool) else str(value)
        for key, value in environment.items()
    }


def script_problems(script: str | None, script_path: str | None) -> list[str]:
    """Exactly one of the script's text or its path on the cluster."""
    if bool(script) == bool(script_path):
        return ["script / script_path: give exactly one (script text to upload, or a path on the cluster)"]
    return []


def service_problems(
    *, slice_shape: Any, min_slices: Any, max_slices: Any, gcs_bucket: Any, environment: Mapping[str, Any]
) -> list[str]:
    """Problems with the service job's own arguments, each naming the argument and the fix."""
    problems = []
    if not isinstance(slice_shape, str) or not SLICE_SHAPE.fullmatch(slice_shape):
        problems.append(f"slice_shape: {slice_shape!r} is not a topology like 2x4 or 2x2x2")
    slices: list[int] = []
    for field, value in (("min_slices", min_slices), ("max_slices", max_slices)):
        try:
            number = int(value)
        except (TypeError, ValueError):
            problems.append(f"{field}: {value!r} is not an integer")
            continue
        if number < 1:
            problems.append(f"{field}: {number} must be >= 1")
        slices.append(number)
    if len(slices) == 2 and slices[0] > slices[1]:
        problems.append(f"min_slices: {slices[0]} is more than max_slices ({slices[1]}); lower min_slices")
    bucket = str(gcs_bucket or "")
    if bucket.startswith("gs://"):
        problems.append(f"gcs_bucket: {bucket!r} must be a bucket name without gs://")
    elif error := bucket_name_error(bucket):
        problems.append(f"gcs_bucket: {bucket!r} {error}")
    for key in SERVICE_VARIABLES:
        if key in environment:
            problems.append(f"environment[{key!r}]: set it with the {key.lower()} argument instead")
    return problems


def service_environment(
    environment: Mapping[str, Any], *, slice_shape: str, min_slices: Any, max_slices: Any, gcs_bucket: str
) -> dict[str, str]:
    """The service job's environment: the user's, then the four variables of ``start_pathways.sh``."""
    return {
        **environment_text(environment),
        "SLICE_SHAPE": str(slice_shape),
        "MIN_SLICES": str(int(min_slices)),
        "MAX_SLICES": str(int(max_slices)),
        "GCS_BUCKET": str(gcs_bucket),
    }


def array_size_problem(max_slices: Any, limit: int | None) -> str | None:
    """``max_slices`` beyond the cluster's ``MaxArraySize`` (None: unknown, not checked)."""
    if limit is None or int(max_slices) <= limit:
        return None
    return (
        f"max_slices: {int(max_slices)} is more than the cluster's MaxArraySize ({limit}), the most "
        "array tasks (slices) one job array can have; lower max_slices or ask the cluster's "
        "administrators to raise MaxArraySize"
    )
