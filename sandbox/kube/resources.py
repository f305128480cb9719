"""The API resources the stand-in serves: group, version, plural, kind and allowed verbs."""

from __future__ import annotations

from dataclasses import dataclass

READ_VERBS = frozenset({"get", "list", "watch"})
ALL_VERBS = READ_VERBS | {"create", "update", "patch", "delete", "deletecollection"}


@dataclass(frozen=True)
class ResourceType:
    """One served resource type."""

    group: str
    version: str
    plural: str
    kind: str
    verbs: frozenset[str]
    namespaced: bool = True
    status_subresource: bool = False
    default_propagation: str = "Background"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``plural.group`` as the API server names a resource in messages (``pods`` for core)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """``Kind.group`` as used in ``Invalid`` messages."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


PODS = ResourceType("", "v1", "pods", "Pod", READ_VERBS | {"delete", "deletecollection"})
EVENTS = ResourceType("", "v1", "events", "Event", READ_VERBS)
JOBS = ResourceType(
    "batch",
    "v1",
    "jobs",
    "Job",
    READ_VERBS | {"delete", "deletecollection"},
    status_subresource=True,
    # batch/v1 Jobs orphan their pods by default when deleted through the API.
    default_propagation="Orphan",
)
JOBSETS = ResourceType("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", ALL_VERBS, status_subresource=True)
PATHWAYSJOBS = ResourceType(
    "pathways-job.pathways.domain", "v1", "pathwaysjobs", "PathwaysJob", ALL_VERBS, status_subresource=True
)
WORKLOADS = ResourceType(
    "kueue.x-k8s.io", "v1beta1", "workloads", "Workload", READ_VERBS | {"delete"}, status_subresource=True
)

RESOURCES: tuple[ResourceType, ...] = (PODS, EVENTS, JOBS, JOBSETS, PATHWAYSJOBS, WORKLOADS)
BY_PLURAL: dict[str, ResourceType] = {rt.plural: rt for rt in RESOURCES}
BY_PATH: dict[tuple[str, str, str], ResourceType] = {
    (rt.group, rt.version, rt.plural): rt for rt in RESOURCES
}

SHORT_NAMES: dict[str, list[str]] = {"pods": ["po"], "events": ["ev"], "jobsets": ["js"]}


def groups() -> dict[str, list[str]]:
    """API groups (excluding core) and their versions."""
    out: dict[str, list[str]] = {}
    for rt in RESOURCES:
        if rt.group:
            out.setdefault(rt.group, [])
            if rt.version not in out[rt.group]:
                out[rt.group].append(rt.version)
    return out
