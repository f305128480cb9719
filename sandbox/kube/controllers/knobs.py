"""Behaviour knobs read from ``sandbox.pathways.dev/*`` annotations on a PathwaysJob or JobSet.

A PathwaysJob's annotations are copied to its JobSet when the JobSet is created, and the simulated
JobSet, Job and kubelet controllers read the knobs from the JobSet, so the same annotations work for
both modes. Invalid values fall back to the default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.kube.webhooks import FEATURE_GATES, feature_gates

PREFIX = "sandbox.pathways.dev/"

SLICE_DELAY = PREFIX + "slice-delay-seconds"
HEAD_DELAY = PREFIX + "head-delay-seconds"
PROGRAM_SECONDS = PREFIX + "program-seconds"
PROGRAM_EXIT_CODE = PREFIX + "program-exit-code"
PROGRAM_LOG = PREFIX + "program-log"
MAX_READY_SLICES = PREFIX + "max-ready-slices"
DELETE_PODS_AFTER_FAILURE = PREFIX + "delete-pods-after-failure"
MAIN_CONTAINER = PREFIX + "main-container"
JOBSET_FEATURE_GATES = FEATURE_GATES  # defined with the JobSet webhook, which reads it at admission

DEFAULT_PROGRAM_LOG = (
    "Initializing pathwaysutils; JAX_PLATFORMS=proxy JAX_BACKEND_TARGET={backend}",
    "Connected to the Pathways proxy; {slices} slice(s) available",
    "Number of JAX devices is {devices}",
    "step 1: loss=2.3026",
    "step 2: loss=1.2040",
    "step 3: loss=0.6931",
)


@dataclass(frozen=True)
class Knobs:
    """Simulation settings for one JobSet."""

    slice_delay: float = 0.05
    head_delay: float = 0.05
    program_seconds: float = 0.3
    program_exit_code: int = 0
    program_log: tuple[str, ...] | None = None
    max_ready_slices: int | None = None
    delete_pods_after_failure: bool = False
    main_container: str | None = None
    #: JobSet feature gates on for this JobSet (``RestartJob``, ``ElasticJobSet``, ``InPlaceRestart``).
    jobset_feature_gates: frozenset[str] = frozenset()


def _float(value: str | None, default: float) -> float:
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default


def _int(value: str | None, default: int | None) -> int | None:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def knobs_for(obj: dict[str, Any] | None) -> Knobs:
    """Knobs from an object's annotations."""
    notes = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    log = notes.get(PROGRAM_LOG)
    return Knobs(
        slice_delay=_float(notes.get(SLICE_DELAY), Knobs.slice_delay),
        head_delay=_float(notes.get(HEAD_DELAY), Knobs.head_delay),
        program_seconds=_float(notes.get(PROGRAM_SECONDS), Knobs.program_seconds),
        program_exit_code=_int(notes.get(PROGRAM_EXIT_CODE), 0) or 0,
        program_log=tuple(log.splitlines()) if log is not None else None,
        max_ready_slices=_int(notes.get(MAX_READY_SLICES), None),
        delete_pods_after_failure=str(notes.get(DELETE_PODS_AFTER_FAILURE, "")).strip().lower()
        in ("true", "1", "yes"),
        main_container=notes.get(MAIN_CONTAINER) or None,
        jobset_feature_gates=feature_gates(obj),
    )
