"""The sections of a PathwaysJob spec: workers, controller, custom components."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_pathways.gke.spec.fields import load_section, render_fields, strip_none

# (CRD key, attribute) pairs in the order they are rendered.
WORKER_FIELDS = (
    ("type", "type"),
    ("topology", "topology"),
    ("numSlices", "num_slices"),
    ("maxSliceRestarts", "max_slice_restarts"),
    ("terminationGracePeriodSeconds", "termination_grace_period_seconds"),
    ("priorityClassName", "priority_class_name"),
    ("nodeSelector", "node_selector"),
)
CONTROLLER_FIELDS = (
    ("deploymentMode", "deployment_mode"),
    ("mainContainerName", "main_container_name"),
    ("elasticSlices", "elastic_slices"),
    ("enableMetricsCollection", "enable_metrics_collection"),
    ("template", "template"),
)
COMPONENT_FIELDS = (
    ("componentType", "component_type"),
    ("image", "image"),
    ("customFlags", "custom_flags"),
    ("customEnv", "custom_env"),
)
WORKER_REQUIRED = ("type", "topology")
COMPONENT_REQUIRED = ("componentType",)


@dataclass
class WorkerSpec:
    """``spec.workers[0]``: the TPU slices (machine type, topology, count) the workers run on."""

    type: str
    topology: str
    num_slices: int = 1
    max_slice_restarts: int | None = None
    termination_grace_period_seconds: int | None = None
    priority_class_name: str | None = None
    node_selector: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The CRD form of this worker entry."""
        return render_fields(self, WORKER_FIELDS, always=("type", "topology", "numSlices"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "spec.workers[0]") -> WorkerSpec:
        """Load a CRD worker entry; raise PathwaysSpecError for unknown or missing fields."""
        return load_section(cls, data, WORKER_FIELDS, path, "a worker", WORKER_REQUIRED)


@dataclass
class ControllerSpec:
    """``spec.controller``: deployment mode and the user's pod template (``None`` = headless)."""

    deployment_mode: str = "default"
    main_container_name: str = "main"
    elastic_slices: int | None = None
    enable_metrics_collection: bool | None = None
    template: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The CRD form of the controller; the template is copied without null entries."""
        out = render_fields(self, CONTROLLER_FIELDS, always=("deploymentMode", "mainContainerName"))
        if self.template is not None:
            out["template"] = strip_none(self.template)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "spec.controller") -> ControllerSpec:
        """Load a CRD controller mapping; raise PathwaysSpecError for unknown fields."""
        return load_section(cls, data, CONTROLLER_FIELDS, path, "the controller")

    @property
    def containers(self) -> list[Any]:
        """The template's containers, or ``[]`` when there is no usable template."""
        spec = self.template.get("spec") if isinstance(self.template, Mapping) else None
        containers = spec.get("containers") if isinstance(spec, Mapping) else None
        return list(containers) if isinstance(containers, list) else []


@dataclass
class CustomComponent:
    """``spec.customComponents[i]``: image, extra flags and env for one Pathways component."""

    component_type: str
    image: str | None = None
    custom_flags: list[str] | None = None
    custom_env: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The CRD form of this component."""
        out = render_fields(self, COMPONENT_FIELDS, always=("componentType",))
        if self.custom_env is not None:
            out["customEnv"] = strip_none(self.custom_env)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "spec.customComponents[0]") -> CustomComponent:
        """Load a CRD custom component; raise PathwaysSpecError for unknown or missing fields."""
        return load_section(cls, data, COMPONENT_FIELDS, path, "a custom component", COMPONENT_REQUIRED)
