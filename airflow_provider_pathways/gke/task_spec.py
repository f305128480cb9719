"""A job spec made ready for one task instance: loaded from what the DAG gave, named, labelled
with the task's identity and Kueue's queue and priority, checked, and rendered for its kind."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_pathways.gke.naming import airflow_labels, default_job_name
from airflow_provider_pathways.gke.resources import JobKind
from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.gke.status import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL


@dataclass(frozen=True)
class TaskIdentity:
    """The task instance a job belongs to."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1

    def labels(self) -> dict[str, str]:
        return airflow_labels(self.dag_id, self.task_id, self.run_id, self.map_index)

    def default_name(self) -> str:
        return default_job_name(self.dag_id, self.task_id, self.run_id, self.map_index)


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
) -> PathwaysJobSpec:
    """The spec named (given name, the spec's, else the task's default) and labelled: the spec's
    labels, then the task's, then the given ones, then Kueue's queue and priority class."""
    merged = {**(spec.labels or {}), **task.labels(), **labels}
    if queue_name:
        merged[QUEUE_NAME_LABEL] = queue_name
    if priority_class:
        merged[PRIORITY_CLASS_LABEL] = priority_class
    return dataclasses.replace(
        spec,
        name=name or spec.name or task.default_name(),
        namespace=namespace,
        labels=merged,
        annotations={**(spec.annotations or {}), **annotations},
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
