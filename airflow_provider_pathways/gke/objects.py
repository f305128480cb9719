"""The Kubernetes objects a Pathways job is made of: the custom resources and their API coordinates,
the replicated jobs, containers, ports and images of its JobSet, the labels and names JobSet derives,
the fields a status read looks at, and which objects that read needs.

A job's name has at most 22 characters: JobSet writes ``<name>-pathways-head-0-0.<subdomain>`` into
the label ``jobset.sigs.k8s.io/coordinator`` of every Job and pod (``CoordinatorEndpoint`` in
``jobset_controller.go``; the subdomain defaults to the JobSet's name), a label value has at most 63,
and JobSet >= v0.11 checks this at admission (``validateCoordinatorLabelValue`` in
``jobset_webhook.go``): (63 - 19) / 2 = 22.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, TypedDict, TypeVar


@dataclass(frozen=True)
class CustomResource:
    """Group, version and plural of a custom resource."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def coordinates(self, namespace: str) -> Coordinates:
        """The keyword arguments of the Kubernetes clients' namespaced custom-object calls."""
        return Coordinates(group=self.group, version=self.version, namespace=namespace, plural=self.plural)

    def object_coordinates(self, namespace: str, name: str) -> ObjectCoordinates:
        """:meth:`coordinates` of one object."""
        return ObjectCoordinates(**self.coordinates(namespace), name=name)


class Coordinates(TypedDict):
    group: str
    version: str
    namespace: str
    plural: str


class ObjectCoordinates(Coordinates):
    name: str


class JobKind(str, Enum):
    """What the provider submits: a PathwaysJob (needs its controller) or the equivalent plain JobSet."""

    PATHWAYS_JOB = "PathwaysJob"
    JOBSET = "JobSet"

    @property
    def resource(self) -> CustomResource:
        return PATHWAYS_JOB if self is JobKind.PATHWAYS_JOB else JOBSET


#: The kinds of job objects, as ``kind`` strings.
JOB_KINDS = frozenset(kind.value for kind in JobKind)


def check_kind(kind: str) -> str:
    """``kind`` when it names a :class:`JobKind`; ValueError naming the argument otherwise."""
    if kind not in JOB_KINDS:
        raise ValueError(f"kind: {kind!r} must be 'PathwaysJob' or 'JobSet'")
    return kind


PATHWAYS_JOB = CustomResource(
    "pathways-job.pathways.domain", "v1", "pathwaysjobs", JobKind.PATHWAYS_JOB.value
)
JOBSET = CustomResource("jobset.x-k8s.io", "v1alpha2", "jobsets", JobKind.JOBSET.value)
KUEUE_WORKLOAD = CustomResource("kueue.x-k8s.io", "v1beta1", "workloads", "Workload")


def kueue_workload_name(jobset_name: str, jobset_uid: str) -> str:
    """The name Kueue gives a JobSet's Workload: ``jobset-<name>-`` and 5 hex digits of a SHA-1 over
    kind, group, name and uid (kueue ``workload_names.go`` ``GetWorkloadNameForOwnerWithGVK``)."""
    digest = hashlib.sha1(f"{JOBSET.kind}\n{JOBSET.group}\n{jobset_name}\n{jobset_uid}".encode()).hexdigest()
    prefix = f"{JOBSET.kind.lower()}-{jobset_name}"[: 253 - 1 - 5]
    return f"{prefix}-{digest[:5]}"


#: The replicated jobs of the JobSet a PathwaysJob becomes (pathwaysjob_controller.go).
HEAD_REPLICATED_JOB = "pathways-head"
WORKER_REPLICATED_JOB = "worker"
#: The container that runs the program unless the spec names another (the CRD's default).
MAIN_CONTAINER = "main"
#: Containers, ports and images of the Pathways components (pathwaysjob_controller.go); the IFRT
#: proxy serves on PROXY_PORT of the head pod.
PROXY_CONTAINER = "pathways-proxy"
RM_CONTAINER = "pathways-rm"
WORKER_CONTAINER = "pathways-worker"
SIDECAR_CONTAINER = "colocated-python-sidecar"
#: Every container of a Pathways component, whoever rendered the JobSet (the PathwaysJob
#: controller, xpk, pathways-utils: the same names); any other container of a head pod is the program's.
COMPONENT_CONTAINERS = frozenset({PROXY_CONTAINER, RM_CONTAINER, WORKER_CONTAINER, SIDECAR_CONTAINER})
PROXY_PORT = 29000
RM_PORT = 29001
WORKER_PORT = 29005
SERVER_IMAGE = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server"
PROXY_IMAGE = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server"

COORDINATOR_LABEL = "jobset.sigs.k8s.io/coordinator"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
#: Node labels of a TPU slice, which the workers' node selector names.
ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
#: Longest label value (and DNS label) Kubernetes accepts.
MAX_LABEL_VALUE = 63


def head_pod_name(name: str, head_replicated_job: str = HEAD_REPLICATED_JOB) -> str:
    """``<name>-<head>-0-0``: the head pod's hostname (first Job, first pod of the head)."""
    return f"{name}-{head_replicated_job}-0-0"


def coordinator_label_value(name: str, head_replicated_job: str = HEAD_REPLICATED_JOB) -> str:
    """What JobSet writes into ``jobset.sigs.k8s.io/coordinator``: ``<name>-<head>-0-0.<name>``,
    the head pod's in-cluster DNS name."""
    return f"{head_pod_name(name, head_replicated_job)}.{name}"


def max_job_name_length(head_replicated_job: str = HEAD_REPLICATED_JOB) -> int:
    """Longest name whose coordinator label value fits in 63 characters (22 for ``pathways-head``)."""
    return (MAX_LABEL_VALUE - len(coordinator_label_value("", head_replicated_job))) // 2


#: Longest Pathways job name a current JobSet accepts.
MAX_JOB_NAME_LENGTH = max_job_name_length()


def proxy_address(name: str, head_replicated_job: str = HEAD_REPLICATED_JOB, port: int = PROXY_PORT) -> str:
    """The in-cluster gRPC address of the IFRT proxy of job ``name`` (on the head pod)."""
    return f"grpc://{coordinator_label_value(name, head_replicated_job)}:{port}"


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


def parse_time(stamp: object) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp as the API server writes them; None if unreadable."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def reason_text(condition: Mapping[str, Any]) -> str:
    reason = condition.get("reason") or ""
    message = condition.get("message") or ""
    return f"{reason}: {message}" if reason and message else reason or message


@dataclass(frozen=True)
class StatusOptions:
    """How to read a job's status: its kind and the names inside its JobSet."""

    kind: JobKind = JobKind.PATHWAYS_JOB
    worker_replicated_job: str = WORKER_REPLICATED_JOB
    head_replicated_job: str = HEAD_REPLICATED_JOB
    main_container: str = MAIN_CONTAINER
    #: The job object's UID when known: another object under its name counts as gone.
    uid: str | None = None

    @classmethod
    def for_task(cls, task: Any, main_container: str = MAIN_CONTAINER) -> StatusOptions:
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


def owner_references(obj: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return ((obj or {}).get("metadata") or {}).get("ownerReferences") or []


def _owned_by_uid(obj: Mapping[str, Any] | None, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in owner_references(obj))


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
    return any(ref.get("name") == name and ref.get("kind") == JOBSET.kind for ref in owner_references(obj))


def job_events(items: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Events about the job itself or its Jobs and pods (``<name>-...``)."""
    return [
        e
        for e in items
        if (e.get("involvedObject") or {}).get("name") == name
        or str((e.get("involvedObject") or {}).get("name", "")).startswith(f"{name}-")
    ]


def watched_resources(options: StatusOptions) -> list[CustomResource]:
    """The custom resources whose objects decide the job's status."""
    if options.kind is JobKind.PATHWAYS_JOB:
        return [options.kind.resource, JOBSET]
    return [JOBSET]


def own_workload_name(name: str, jobset: Mapping[str, Any] | None) -> str | None:
    """The name Kueue gives the JobSet's Workload, when the JobSet (its uid) is known."""
    uid = ((jobset or {}).get("metadata") or {}).get("uid")
    return kueue_workload_name(name, uid) if uid else None


def program_container(pod: Mapping[str, Any], main_container: str) -> str | None:
    """The container of ``pod`` that runs the program: ``main_container`` when the pod has it; else
    its only regular container that is no Pathways component (xpk names it after ``--docker-name``,
    ``jax-tpu`` by default: xpk ``docker_container.py``); None when there is none (a worker pod, a
    headless job) or several."""
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    if main_container in names:
        return main_container
    others = [name for name in names if name and name not in COMPONENT_CONTAINERS]
    return others[0] if len(others) == 1 else None


def log_pods(pods: Iterable[Mapping[str, Any]], main_container: str) -> list[tuple[str, str]]:
    """The pods that run the program and its container there (:func:`program_container`), newest
    first: where the program's log is."""
    running = [(pod, program_container(pod, main_container)) for pod in pods]
    running.sort(
        key=lambda item: (item[0].get("metadata") or {}).get("creationTimestamp") or "", reverse=True
    )
    return [(pod["metadata"]["name"], container) for pod, container in running if container is not None]


def log_request(pod: str, namespace: str, container: str, tail_lines: int) -> dict[str, Any]:
    """The keyword arguments of both clients' ``read_namespaced_pod_log`` for the last lines, raw."""
    return {
        "name": pod,
        "namespace": namespace,
        "container": container,
        "tail_lines": tail_lines,
        "_preload_content": False,
    }
