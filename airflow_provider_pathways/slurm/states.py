"""Slurm job states: which are ends, which are active, and one reading of a reported state."""

from __future__ import annotations

from collections.abc import Sequence

#: Base states after which a job never runs again.
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
#: States of a job that is queued or running (phases such as COMPLETING included).
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "CONFIGURING",
        "COMPLETING",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
        "POWER_UP_NODE",
        "UPDATE_DB",
    }
)
#: Flags that mean "the job was put back into the queue".
REQUEUE_FLAGS = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
# Flags Slurm's own state string shows instead of the base state (job_state_string order).
_PHASE_FLAGS = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING")
# Names a 22.05 state string may carry that are really flags on top of a base state.
_FLAG_STATE_BASES = {
    "REQUEUED": "PENDING",
    "REQUEUE_HOLD": "PENDING",
    "REQUEUE_FED": "PENDING",
}
_BASE_STATES = TERMINAL_STATES | {"PENDING", "RUNNING", "SUSPENDED"}


def normalize_state(raw: str | Sequence[str] | None, *, restarts: int = 0) -> tuple[str, frozenset[str]]:
    """Base state and flags from a 22.05 state string or a v0.0.40+ ``job_state`` list.

    Phase flags (``COMPLETING``, ``CONFIGURING`` ...) become the state, as ``scontrol`` shows them;
    ``REQUEUED``-like states become ``PENDING`` plus the flag; a ``PENDING`` job with restarts gets
    the ``REQUEUED`` flag (22.05 to 26.05 do not report one for a job waiting after a requeue).
    ``PENDING`` with ``COMPLETING`` is a job on its way back into the queue (preempted with
    ``PreemptMode=REQUEUE``, ``scontrol requeue``, node failure; seen on 24.11 and 26.05 for about a
    second): ``COMPLETING`` with the ``REQUEUED`` flag, never an end.
    """
    if raw is None:
        items: list[str] = []
    elif isinstance(raw, str):
        items = [raw]
    else:
        items = [str(item) for item in raw]
    items = [item.strip().upper() for item in items if item and item.strip()]
    base = next((item for item in items if item in _BASE_STATES), None)
    flags = {item for item in items if item != base}
    state = base
    if base == "PENDING" and "COMPLETING" in flags:
        flags.add("REQUEUED")
    for phase in _PHASE_FLAGS:
        if phase in flags:
            state = phase
            flags.discard(phase)
            break
    if state is None:
        first = items[0] if items else "UNKNOWN"
        if first in _FLAG_STATE_BASES:
            state = _FLAG_STATE_BASES[first]
            flags.add(first)
        else:
            state = first
            flags.discard(first)
    if state == "PENDING" and restarts > 0:
        flags.add("REQUEUED")
    return state, frozenset(flags)
