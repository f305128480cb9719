"""Fields of Kubernetes objects as status reading needs them: conditions, labels, replicas."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def find_condition(obj: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return condition
    return None


def true_conditions(obj: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """Conditions with status True, looked up by type (never by position)."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return {c.get("type", ""): c for c in conditions if str(c.get("status")) == "True"}


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def replicas_of(jobset: Mapping[str, Any], replicated_job: str) -> int:
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if rjob.get("name") == replicated_job:
            return int(rjob.get("replicas", 1))
    return 0


def reason_text(condition: Mapping[str, Any]) -> str:
    reason = condition.get("reason") or ""
    message = condition.get("message") or ""
    return f"{reason}: {message}" if reason and message else reason or message
