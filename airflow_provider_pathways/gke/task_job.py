"""A task instance's job: its deterministic name and Kubernetes-safe labels, its spec made ready for
the task instance (loaded from what the DAG gave, named, labelled with the task's identity and
Kueue's queue and priority, checked, rendered for its kind), and which task instance, and which of
its tries, a job on GKE belongs to.

A job carries its task instance's owner labels (``airflow.apache.org/{dag_id,task_id,run_id,
map_index}``, :func:`airflow_labels`); only that task instance adopts, follows, deletes or cancels
it. The try that follows it writes its try number into the annotation :data:`FOLLOWED_BY_TRY`, so
that an older try of the same task instance (a partitioned worker killed later) leaves it alone.
Deletes name the object's UID (and the resourceVersion the decision was taken on) as
preconditions: the API server refuses, with 409 Conflict, to delete another object that took the
name, or one a newer try marked meanwhile.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from airflow_provider_pathways.gke.objects import (
    MAX_JOB_NAME_LENGTH,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    JobKind,
)
from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.gke.spec.checks import label_value_error
from airflow_provider_pathways.sweep import format_states, parse_states
from airflow_provider_pathways.task_instance_state import TaskInstanceKey

LABEL_PREFIX = "airflow.apache.org"
_DIGEST_LENGTH = 8
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
DEFAULT_NAME_MAX_LENGTH = MAX_JOB_NAME_LENGTH


def _sha256(*parts: object) -> bytes:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()


def _digest(*parts: object, length: int = 8) -> str:
    return _sha256(*parts).hex()[:length]


def _base36_digest(*parts: object, length: int = _DIGEST_LENGTH) -> str:
    """``length`` base-36 characters of a SHA-256 (8 characters carry 41 bits)."""
    number = int.from_bytes(_sha256(*parts), "big")
    chars = []
    for _ in range(length):
        number, rest = divmod(number, 36)
        chars.append(_BASE36[rest])
    return "".join(chars)


def default_job_name(
    dag_id: str,
    task_id: str,
    run_id: str,
    map_index: int,
    max_length: int = DEFAULT_NAME_MAX_LENGTH,
    deployment: str = "",
) -> str:
    """
    Name that is the same for every try of one task instance and different across instances.

    ``<task-slug>-<8 base-36 characters of a hash of dag, task, run and map index>`` (and of the
    ``deployment``'s name when it is named: two deployments in one namespace with the same DAG ids):
    a DNS-1035 label of at most ``max_length`` (22) characters, so JobSet accepts it.
    """
    if max_length < _DIGEST_LENGTH + 2:
        raise ValueError(f"max_length: {max_length} leaves no room for the {_DIGEST_LENGTH}-character hash")
    named = (deployment,) if deployment else ()
    digest = _base36_digest(dag_id, task_id, run_id, map_index, *named)
    room = max_length - len(digest) - 1
    slug = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")
    slug = slug[:room].rstrip("-")
    if not slug or not slug[0].isalpha():
        slug = ("pw-" + slug)[:room].rstrip("-")
    return f"{slug}-{digest}"


def safe_label_value(value: object) -> str:
    """A valid label value for ``value``: unchanged if already valid, else sanitized with a hash."""
    text = str(value)
    if label_value_error(text) is None:
        return text
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("-_.")[:54].strip("-_.")
    return f"{cleaned}-{_digest(text)}" if cleaned else _digest(text)


def airflow_labels(dag_id: str, task_id: str, run_id: str, map_index: int) -> dict[str, str]:
    """Labels that tie a job to its task instance (safe values)."""
    return {
        f"{LABEL_PREFIX}/dag_id": safe_label_value(dag_id),
        f"{LABEL_PREFIX}/task_id": safe_label_value(task_id),
        f"{LABEL_PREFIX}/run_id": safe_label_value(run_id),
        f"{LABEL_PREFIX}/map_index": safe_label_value(map_index),
    }


@dataclass(frozen=True)
class TaskIdentity:
    """The task instance a job belongs to."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1

    def labels(self) -> dict[str, str]:
        return airflow_labels(self.dag_id, self.task_id, self.run_id, self.map_index)

    def default_name(self, deployment: str = "") -> str:
        return default_job_name(self.dag_id, self.task_id, self.run_id, self.map_index, deployment=deployment)

    def key(self) -> TaskInstanceKey:
        return (self.dag_id, self.task_id, self.run_id, self.map_index)

    def annotation(self) -> str:
        """The task instance, exactly, as :data:`TASK_INSTANCE_ANNOTATION` holds it (labels carry
        safe values only: a run id's ``:`` and ``+`` become a hash)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str | None) -> TaskIdentity | None:
        """The task instance :meth:`annotation` wrote; None when ``text`` is not one."""
        try:
            data = json.loads(text or "")
            identity = cls(
                str(data["dag_id"]), str(data["task_id"]), str(data["run_id"]), int(data["map_index"])
            )
        except (ValueError, TypeError, KeyError):
            return None
        return identity


#: Annotation naming the job's task instance exactly (JSON: ``dag_id``, ``task_id``, ``run_id``,
#: ``map_index``): a sweep reads its state.
TASK_INSTANCE_ANNOTATION = f"{LABEL_PREFIX}/task-instance"
#: Annotation listing the task instance states in which the job's task leaves it running on purpose
#: (:func:`~airflow_provider_pathways.sweep.left_running_when`): a sweep leaves it alone then.
LEFT_RUNNING_ANNOTATION = f"{LABEL_PREFIX}/left-running-when"
#: Label (a safe value) and annotation (exact) naming the Airflow deployment that made the job
#: (``[pathways] deployment_name``), when named: an owner label, so that deployments sharing a
#: namespace with the same DAG ids never take each other's jobs for their own; a sweep reads it.
DEPLOYMENT_LABEL = DEPLOYMENT_ANNOTATION = f"{LABEL_PREFIX}/deployment"
#: A label every job of this provider carries: the selector that lists them all.
TASK_LABEL = f"{LABEL_PREFIX}/task_id"


def load_spec(job: object) -> PathwaysJobSpec:
    """The spec from a ``PathwaysJobSpec``, a manifest mapping or YAML text; TypeError otherwise."""
    if isinstance(job, PathwaysJobSpec):
        return job
    if isinstance(job, Mapping):
        return PathwaysJobSpec.from_dict(dict(job))
    if isinstance(job, str):
        return PathwaysJobSpec.from_yaml(job)
    raise TypeError(f"job: expected a PathwaysJobSpec, a dict or YAML text, got {type(job).__name__}")


def place_spec(
    spec: PathwaysJobSpec,
    task: TaskIdentity,
    *,
    name: str | None,
    namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    queue_name: str | None = None,
    priority_class: str | None = None,
    left_running: Collection[str] | None = None,
    deployment: str = "",
) -> PathwaysJobSpec:
    """The spec named (given name, the spec's, else the task's default) and labelled: the spec's
    labels, then the task's, then the given ones, then Kueue's queue and priority class. Annotated
    with the spec's and the given annotations, then the task instance and, when given, the states in
    which the task leaves the job running (``left_running``) and the deployment that made it, when
    named, which a sweep reads (a named deployment also labels the job and names it apart)."""
    owner = {**task.labels(), **({DEPLOYMENT_LABEL: safe_label_value(deployment)} if deployment else {})}
    merged = {**(spec.labels or {}), **owner, **labels}
    own = {TASK_INSTANCE_ANNOTATION: task.annotation()}
    if left_running is not None:
        own[LEFT_RUNNING_ANNOTATION] = format_states(left_running)
    if deployment:
        own[DEPLOYMENT_ANNOTATION] = deployment
    if queue_name:
        merged[QUEUE_NAME_LABEL] = queue_name
    if priority_class:
        merged[PRIORITY_CLASS_LABEL] = priority_class
    return dataclasses.replace(
        spec,
        name=name or spec.name or task.default_name(deployment),
        namespace=namespace,
        labels=merged,
        annotations={**(spec.annotations or {}), **annotations, **own},
    )


def required_slices(spec: PathwaysJobSpec, min_slices: int | None) -> int:
    """Slices a ready job has up: ``min_slices``, else ``numSlices - elasticSlices``."""
    if min_slices is not None:
        return int(min_slices)
    return spec.workers.num_slices - (spec.controller.elastic_slices or 0)


def min_slices_problem(spec: PathwaysJobSpec, min_slices: int | None) -> str | None:
    """``min_slices`` outside 1..numSlices."""
    needed = required_slices(spec, min_slices)
    if 1 <= needed <= spec.workers.num_slices:
        return None
    return f"min_slices: {needed} must be between 1 and numSlices ({spec.workers.num_slices})"


def manifest_for(spec: PathwaysJobSpec, kind: str) -> dict[str, Any]:
    """The object to create: the PathwaysJob, or the JobSet it stands for."""
    return spec.to_jobset() if kind == JobKind.JOBSET.value else spec.to_pathwaysjob()


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
    """Whether ``obj`` carries every one of the ``owner`` labels (and there is at least one), and no
    deployment label when ``owner`` has none (an unnamed deployment's task instance)."""
    labels = _metadata(obj).get("labels") or {}
    if DEPLOYMENT_LABEL in labels and DEPLOYMENT_LABEL not in owner:
        return False
    return bool(owner) and all(labels.get(k) == v for k, v in owner.items())


def owner_selector(owner: Mapping[str, str]) -> str:
    """The label selector that finds a task instance's jobs (as :func:`carries_owner_labels` judges)."""
    unnamed = [] if DEPLOYMENT_LABEL in owner else [f"!{DEPLOYMENT_LABEL}"]
    return ",".join([*(f"{k}={v}" for k, v in sorted(owner.items())), *unnamed])


def task_instance_of(obj: Mapping[str, Any]) -> TaskIdentity | None:
    """The task instance the job belongs to, from its annotation; None without one."""
    return TaskIdentity.from_annotation(
        (_metadata(obj).get("annotations") or {}).get(TASK_INSTANCE_ANNOTATION)
    )


def left_running_of(obj: Mapping[str, Any]) -> frozenset[str] | None:
    """The states in which the job's task leaves it running; None when it names none."""
    return parse_states((_metadata(obj).get("annotations") or {}).get(LEFT_RUNNING_ANNOTATION))


def deployment_of(obj: Mapping[str, Any]) -> str:
    """The Airflow deployment that made the job, from its annotation; "" when unnamed."""
    return str((_metadata(obj).get("annotations") or {}).get(DEPLOYMENT_ANNOTATION) or "")


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
