"""Which task instance, and which of its tries, a job on GKE belongs to.

A job carries its task instance's owner labels (``airflow.apache.org/{dag_id,task_id,run_id,
map_index}``, :func:`~airflow_provider_pathways.gke.naming.airflow_labels`); only that task
instance adopts, follows, deletes or cancels it. The try that follows it writes its try number
into the annotation :data:`FOLLOWED_BY_TRY`, so that an older try of the same task instance (a
partitioned worker killed later) leaves it alone. Deletes name the object's UID (and the
resourceVersion the decision was taken on) as preconditions: the API server refuses, with 409
Conflict, to delete another object that took the name, or one a newer try marked meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from airflow_provider_pathways.gke.naming import LABEL_PREFIX, MAX_JOB_NAME_LENGTH

#: Annotation naming the try number of the try that follows the job.
FOLLOWED_BY_TRY = f"{LABEL_PREFIX}/followed-by-try"
#: Attempts at a delete whose preconditions failed because the object changed meanwhile.
RELEASE_ATTEMPTS = 5


def owner_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    """The owner labels among ``labels`` (a task's own, from its placed spec)."""
    return {k: v for k, v in (labels or {}).items() if k.startswith(f"{LABEL_PREFIX}/")}


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def carries_owner_labels(obj: Mapping[str, Any], owner: Mapping[str, str]) -> bool:
    """Whether ``obj`` carries every one of the ``owner`` labels (and there is at least one)."""
    labels = _metadata(obj).get("labels") or {}
    return bool(owner) and all(labels.get(k) == v for k, v in owner.items())


def owner_selector(owner: Mapping[str, str]) -> str:
    """The label selector that finds a task instance's jobs."""
    return ",".join(f"{k}={v}" for k, v in sorted(owner.items()))


def followed_by_try(obj: Mapping[str, Any]) -> int | None:
    """The try number that follows the job, from its annotation; None when unmarked."""
    value = (_metadata(obj).get("annotations") or {}).get(FOLLOWED_BY_TRY)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def follow_mark(try_number: int) -> dict[str, Any]:
    """The merge patch with which a try marks the job it follows."""
    return {"metadata": {"annotations": {FOLLOWED_BY_TRY: str(try_number)}}}


@dataclass(frozen=True)
class JobRef:
    """One job object: where it is, its kind, and (once known) its UID."""

    name: str
    namespace: str
    kind: str
    uid: str | None = None

    def to_id(self) -> dict[str, Any]:
        """The job's id as ``task_state_store`` keeps it."""
        ident: dict[str, Any] = {"name": self.name, "namespace": self.namespace, "kind": self.kind}
        if self.uid:
            ident["uid"] = self.uid
        return ident

    @classmethod
    def from_id(cls, ident: Any, default_kind: str) -> JobRef | None:
        """The job from a kept id; None when it is not one."""
        if not isinstance(ident, Mapping) or not ident.get("name") or not ident.get("namespace"):
            return None
        kind = str(ident.get("kind") or default_kind)
        return cls(str(ident["name"]), str(ident["namespace"]), kind, ident.get("uid"))

    @classmethod
    def of(cls, obj: Mapping[str, Any], kind: str) -> JobRef:
        """The job ``obj`` is."""
        md = _metadata(obj)
        return cls(str(md.get("name")), str(md.get("namespace")), kind, md.get("uid"))

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def is_this_job(obj: Mapping[str, Any] | None, ref: JobRef, owner: Mapping[str, str]) -> bool:
    """Whether ``obj`` is the job ``ref`` names (same UID when it is known) and belongs to the task
    instance with the ``owner`` labels."""
    if obj is None or not carries_owner_labels(obj, owner):
        return False
    return ref.uid is None or _metadata(obj).get("uid") == ref.uid


class Release(str, Enum):
    """What a try may do with a job it followed and now wants gone."""

    DELETE = "delete"
    GONE = "gone"
    NOT_OURS = "not ours"
    SUPERSEDED = "superseded"


def describe_release(release: Release, ref: JobRef, reason: str) -> str:
    """The log line for what became of a job a try wanted gone."""
    if release is Release.DELETE:
        return f"Deleted {ref} ({reason})"
    if release is Release.GONE:
        return f"Already gone: {ref} ({reason})"
    if release is Release.SUPERSEDED:
        return f"Left {ref} alone ({reason}): a newer try of this task instance follows it"
    return f"Left {ref} alone ({reason}): it is no longer this task instance's job"


def release_verdict(
    obj: Mapping[str, Any] | None, ref: JobRef, owner: Mapping[str, str], try_number: int | None
) -> Release:
    """Delete the job only when it is still ours and no newer try than ``try_number`` follows it."""
    if obj is None:
        return Release.GONE
    if not is_this_job(obj, ref, owner):
        return Release.NOT_OURS
    follower = followed_by_try(obj)
    if try_number is not None and follower is not None and follower > try_number:
        return Release.SUPERSEDED
    return Release.DELETE


def delete_preconditions(obj: Mapping[str, Any]) -> dict[str, str]:
    """``DeleteOptions.preconditions`` that hold only for ``obj`` exactly as it was read."""
    md = _metadata(obj)
    return {"uid": str(md.get("uid")), "resourceVersion": str(md.get("resourceVersion"))}


def fresh_job_name(name: str, try_number: int, max_length: int = MAX_JOB_NAME_LENGTH) -> str:
    """The name of a fresh job of try ``try_number`` whose task instance keeps an ended job named
    ``name``: ``<name>-<try>``, the name shortened to fit ``max_length``."""
    suffix = f"-{try_number}"
    return name[: max_length - len(suffix)].rstrip("-") + suffix
