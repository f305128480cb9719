"""The Kubernetes objects that make up a Pathways job, and which of them a status read needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_pathways.gke.resources import (
    JOBSET,
    CustomResource,
    JobKind,
)
from airflow_provider_pathways.gke.status import (
    HEAD_REPLICATED_JOB,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
    WORKER_REPLICATED_JOB,
    PathwaysJobStatus,
    Phase,
)


@dataclass(frozen=True)
class StatusOptions:
    """How to read a job's status: its kind and the names inside its JobSet."""

    kind: JobKind = JobKind.PATHWAYS_JOB
    worker_replicated_job: str = WORKER_REPLICATED_JOB
    head_replicated_job: str = HEAD_REPLICATED_JOB
    main_container: str = "main"


DEFAULT_STATUS_OPTIONS = StatusOptions()


def job_selector(name: str, replicated_job: str | None = None) -> str:
    selector = f"{JOBSET_NAME_LABEL}={name}"
    return f"{selector},{REPLICATED_JOB_LABEL}={replicated_job}" if replicated_job else selector


def owned_by_jobset(obj: Mapping[str, Any], name: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("name") == name and ref.get("kind") == JOBSET.kind for ref in refs)


def needs_detail(status: PathwaysJobStatus) -> bool:
    return status.phase in (Phase.FAILED, Phase.SUSPENDED, Phase.QUEUED)


def job_events(items: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Events about the job itself or its Jobs and pods (``<name>-...``)."""
    return [
        e
        for e in items
        if (e.get("involvedObject") or {}).get("name") == name
        or str((e.get("involvedObject") or {}).get("name", "")).startswith(f"{name}-")
    ]


# Lines of the program's log read when the job failed (to see a DATA_LOSS from a lost slice).
FAILURE_LOG_LINES = 50


def watched_resources(options: StatusOptions) -> list[CustomResource]:
    """The custom resources whose objects decide the job's status."""
    if options.kind is JobKind.PATHWAYS_JOB:
        return [options.kind.resource, JOBSET]
    return [JOBSET]
