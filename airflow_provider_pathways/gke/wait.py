"""What a wait on a Pathways job follows, and the checks of its arguments."""

from __future__ import annotations

from enum import Enum

from airflow_provider_pathways.gke.resources import JobKind


class WaitUntil(str, Enum):
    """How long an operator or trigger follows a job."""

    CREATED = "created"
    READY = "ready"
    FINISHED = "finished"


def validate_wait_arguments(*, name: str, wait_until: str, min_slices: int | None, kind: str) -> None:
    """Raise ValueError naming the argument when a wait is ill-defined."""
    if not name:
        raise ValueError("name: the job name is empty; pass the name of the PathwaysJob to follow")
    if wait_until not in {w.value for w in WaitUntil}:
        raise ValueError(f"wait_until: {wait_until!r} is not one of 'created', 'ready', 'finished'")
    if min_slices is not None and (not isinstance(min_slices, int) or min_slices < 1):
        raise ValueError(f"min_slices: {min_slices!r} must be an integer >= 1")
    if kind not in {k.value for k in JobKind}:
        raise ValueError(f"kind: {kind!r} must be 'PathwaysJob' or 'JobSet'")
