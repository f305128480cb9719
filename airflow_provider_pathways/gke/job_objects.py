"""The Kubernetes objects that make up a Pathways job, and which of them a status read needs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_provider_pathways.gke.naming import HEAD_REPLICATED_JOB, WORKER_REPLICATED_JOB
from airflow_provider_pathways.gke.resources import (
    JOBSET,
    CustomResource,
    JobKind,
    kueue_workload_name,
)
from airflow_provider_pathways.gke.status import (
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
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
    #: The job object's UID when known: another object under its name counts as gone.
    uid: str | None = None

    @classmethod
    def for_task(cls, task: Any, main_container: str = "main") -> StatusOptions:
        """The options of an operator, sensor or trigger with ``kind``, ``worker_replicated_job``
        and ``head_replicated_job`` attributes."""
        return cls(
            kind=JobKind(task.kind),
            worker_replicated_job=task.worker_replicated_job,
            head_replicated_job=task.head_replicated_job,
            main_container=main_container,
        )


DEFAULT_STATUS_OPTIONS = StatusOptions()


_Object = TypeVar("_Object", bound=Mapping[str, Any])


def _uid(obj: Mapping[str, Any] | None) -> str | None:
    return (obj.get("metadata") or {}).get("uid") if obj else None


def _owned_by_uid(obj: Mapping[str, Any] | None, uid: str) -> bool:
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)


def the_job_objects(
    options: StatusOptions, pathways_job: _Object | None, jobset: _Object | None
) -> tuple[_Object | None, _Object | None]:
    """The PathwaysJob and JobSet read under the job's name that are the job ``options.uid``
    names (a PathwaysJob's JobSet is owned by it): another job that took the name is not it."""
    uid = options.uid
    if uid is None:
        return pathways_job, jobset
    if options.kind is JobKind.JOBSET:
        return None, jobset if _uid(jobset) == uid else None
    own = pathways_job if _uid(pathways_job) == uid else None
    return own, jobset if _owned_by_uid(jobset, uid) else None


def job_selector(name: str, replicated_job: str | None = None) -> str:
    selector = f"{JOBSET_NAME_LABEL}={name}"
    return f"{selector},{REPLICATED_JOB_LABEL}={replicated_job}" if replicated_job else selector


def owned_by_jobset(obj: Mapping[str, Any], name: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("name") == name and ref.get("kind") == JOBSET.kind for ref in refs)


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


@dataclass(frozen=True)
class DetailPlan:
    """What a status read needs beyond the job's own objects."""

    objects: bool = False  # pods, Jobs and Kueue Workloads
    events: bool = False
    log: bool = False  # the program's last lines


def details_needed(
    status: PathwaysJobStatus, *, jobset: Mapping[str, Any] | None, pathways_job: Mapping[str, Any] | None
) -> DetailPlan:
    """A failed, suspended or queued JobSet needs its pods, Jobs and Workloads (a failure also its
    events and log, to tell preemption from the program's own failure); a PathwaysJob that failed
    without a JobSet needs its events (why the controller could not create it)."""
    failed = status.phase is Phase.FAILED
    if status.phase in (Phase.FAILED, Phase.SUSPENDED, Phase.QUEUED) and jobset is not None:
        return DetailPlan(objects=True, events=failed, log=failed)
    return DetailPlan(events=failed and pathways_job is not None)


def own_workload_name(name: str, jobset: Mapping[str, Any] | None) -> str | None:
    """The name Kueue gives the JobSet's Workload, when the JobSet (its uid) is known."""
    uid = ((jobset or {}).get("metadata") or {}).get("uid")
    return kueue_workload_name(name, uid) if uid else None


def log_pods(pods: Iterable[Mapping[str, Any]], container: str) -> list[str]:
    """Names of the pods that run ``container``, newest first: where the program's log is."""
    running = [
        pod
        for pod in pods
        if container in {c.get("name") for c in (pod.get("spec") or {}).get("containers") or []}
    ]
    running.sort(key=lambda pod: (pod.get("metadata") or {}).get("creationTimestamp") or "", reverse=True)
    return [pod["metadata"]["name"] for pod in running]


def log_request(pod: str, namespace: str, container: str, tail_lines: int) -> dict[str, Any]:
    """The keyword arguments of both clients' ``read_namespaced_pod_log`` for the last lines, raw."""
    return {
        "name": pod,
        "namespace": namespace,
        "container": container,
        "tail_lines": tail_lines,
        "_preload_content": False,
    }
