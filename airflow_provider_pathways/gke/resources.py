"""Kubernetes resources a Pathways job is made of: API coordinates and derived names."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import Enum
from typing import TypedDict

from airflow_provider_pathways.gke.naming import HEAD_REPLICATED_JOB, coordinator_label_value

#: The IFRT proxy's port on the head pod (pathwaysjob_controller.go).
PROXY_PORT = 29000


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


PATHWAYS_JOB = CustomResource("pathways-job.pathways.domain", "v1", "pathwaysjobs", "PathwaysJob")
JOBSET = CustomResource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
KUEUE_WORKLOAD = CustomResource("kueue.x-k8s.io", "v1beta1", "workloads", "Workload")


class JobKind(str, Enum):
    """What the provider submits: a PathwaysJob (needs its controller) or the equivalent plain JobSet."""

    PATHWAYS_JOB = "PathwaysJob"
    JOBSET = "JobSet"

    @property
    def resource(self) -> CustomResource:
        return PATHWAYS_JOB if self is JobKind.PATHWAYS_JOB else JOBSET


def proxy_address(name: str, head_replicated_job: str = HEAD_REPLICATED_JOB, port: int = PROXY_PORT) -> str:
    """The in-cluster gRPC address of the IFRT proxy of job ``name`` (on the head pod)."""
    return f"grpc://{coordinator_label_value(name, head_replicated_job)}:{port}"


def kueue_workload_name(jobset_name: str, jobset_uid: str) -> str:
    """The name Kueue gives a JobSet's Workload: ``jobset-<name>-`` and 5 hex digits of a SHA-1 over
    kind, group, name and uid (kueue ``workload_names.go`` ``GetWorkloadNameForOwnerWithGVK``)."""
    digest = hashlib.sha1(f"{JOBSET.kind}\n{JOBSET.group}\n{jobset_name}\n{jobset_uid}".encode()).hexdigest()
    prefix = f"{JOBSET.kind.lower()}-{jobset_name}"[: 253 - 1 - 5]
    return f"{prefix}-{digest[:5]}"
