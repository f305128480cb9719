"""What a wait on a Pathways job follows, and the checks of its arguments."""

from __future__ import annotations

from enum import Enum

from airflow_provider_pathways.gke.resources import JobKind
from airflow_provider_pathways.gke.status import PathwaysJobStatus, Phase


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


def wait_is_over(
    status: PathwaysJobStatus, *, wait_until: str, min_slices: int | None, fail_on_suspend: bool
) -> bool:
    """The wait ends: the job ended, or was suspended (with ``fail_on_suspend``), or, waiting for
    ``ready``, has ``min_slices`` (default: all) slices ready."""
    if status.terminal:
        return True
    if status.phase is Phase.SUSPENDED:
        return fail_on_suspend
    need = min_slices or status.slices_total
    return wait_until == WaitUntil.READY.value and need > 0 and status.ready_for(need)


def wait_succeeded(status: PathwaysJobStatus, wait_until: str) -> bool:
    """The wait's success: waiting for the end, the job succeeded; waiting for ``ready``, it is
    alive and not suspended (one that ended, even successfully, before it was seen ready has
    nothing ready to offer); waiting for ``created``, it exists and did not fail."""
    if wait_until == WaitUntil.READY.value:
        return not status.terminal and status.phase is not Phase.SUSPENDED
    if status.phase is Phase.SUCCEEDED:
        return True
    waits_for_end = wait_until == WaitUntil.FINISHED.value
    return not waits_for_end and not status.terminal and status.phase is not Phase.SUSPENDED


def ended_before_ready(status: PathwaysJobStatus, wait_until: str) -> str | None:
    """Why a wait for ``ready`` failed although the job did not: it succeeded first."""
    if wait_until != WaitUntil.READY.value or status.phase is not Phase.SUCCEEDED:
        return None
    return (
        f"{status.namespace}/{status.name} ended (succeeded) before it was seen ready: "
        "wait_until='ready' is for a job that keeps running (a Pathways cluster for later tasks); "
        "use wait_until='finished' for a program that ends"
    )
