"""Where a job stands in Kueue: its own Workload, deactivation and the queued state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_pathways.gke.object_fields import find_condition, reason_text, true_conditions
from airflow_provider_pathways.gke.resources import JobKind
from airflow_provider_pathways.gke.status import PathwaysJobStatus


def own_workload(workloads: list[Mapping[str, Any]], jobset: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JobSet's Kueue Workload (owned by it), the newest if several."""
    md = jobset.get("metadata") or {}
    owned = [
        w
        for w in workloads
        if any(
            ref.get("kind") == JobKind.JOBSET.value
            and ref.get("name") == md.get("name")
            and ref.get("uid") in (None, md.get("uid"))
            for ref in (w.get("metadata") or {}).get("ownerReferences") or []
        )
    ]
    owned.sort(key=lambda w: (w.get("metadata") or {}).get("creationTimestamp") or "")
    return owned[-1] if owned else None


def deactivation(workload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Workload's deactivation (``spec.active: false``), as its ``Evicted`` condition or a stand-in."""
    evicted = true_conditions(workload).get("Evicted")
    reason = str((evicted or {}).get("reason") or "")
    if (workload.get("spec") or {}).get("active") is False or reason.startswith(
        ("Deactivated", "InactiveWorkload")
    ):
        return evicted or {"reason": "Deactivated", "message": "spec.active is false"}
    return None


def queued_state(jobset: Mapping[str, Any], workload: Mapping[str, Any] | None) -> tuple[str, str | None]:
    """(message, queued since) of a JobSet Kueue has not admitted (again)."""
    created = (jobset.get("metadata") or {}).get("creationTimestamp")
    if workload is None:
        return "waiting for Kueue to create its Workload", created
    reserved = find_condition(workload, "QuotaReserved")
    evicted = true_conditions(workload).get("Evicted")
    since = None
    if reserved is not None and reserved.get("status") != "True":
        since = reserved.get("lastTransitionTime")
    since = since or (workload.get("metadata") or {}).get("creationTimestamp") or created
    if evicted:
        return (
            f"evicted by Kueue after it ran ({reason_text(evicted)}) and requeued; "
            "waiting to be admitted again",
            since,
        )
    if reserved is not None and reserved.get("status") != "True":
        return f"waiting for quota ({reason_text(reserved)})", since
    return "waiting for Kueue to admit it", since


def queue_time_left(status: PathwaysJobStatus | None, queue_timeout: float | None) -> float | None:
    """Seconds until ``queue_timeout`` while the job is queued (0: timed out); None when it does
    not apply."""
    queued_for = status.queued_for() if status is not None else None
    if queue_timeout is None or queued_for is None:
        return None
    return max(queue_timeout - queued_for, 0.0)
