"""Typed model of a PathwaysJob (``pathways-job.pathways.domain/v1``): its sections (workers,
controller, custom components), loading from a manifest, rendering and derived values.

Parsing and validation are separate: ``from_dict``/``from_yaml`` reject only what the model cannot hold
(unknown fields, a missing ``workers`` or ``controller``, a ``workers`` list without exactly one entry,
another kind), each problem named by its field path; ``validate(kind=...)`` checks values: the CRD's
schema first, then the rules of the kind of job that is submitted. Unset optional fields are ``None``
and are left out when rendering, so a loaded manifest renders back equal.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import yaml

from airflow_provider_pathways.gke import tpu
from airflow_provider_pathways.gke.objects import (
    ACCELERATOR_LABEL,
    HEAD_REPLICATED_JOB,
    JOBSET,
    MAIN_CONTAINER,
    PATHWAYS_JOB,
    WORKER_REPLICATED_JOB,
    JobKind,
    coordinator_label_value,
    proxy_address,
)
from airflow_provider_pathways.gke.spec import yaml_io
from airflow_provider_pathways.gke.spec.checks import (
    PathwaysSpecError,
    SpecProblem,
    max_name_length,
    missing_name_problem,
)
from airflow_provider_pathways.gke.spec.validation import device_type_problem, spec_problems

API_VERSION = PATHWAYS_JOB.api_version
KIND = PATHWAYS_JOB.kind
JOBSET_API_VERSION = JOBSET.api_version

# Metadata a live object carries that says nothing about the desired job; ignored when loading.
_LIVE_METADATA_KEYS = frozenset(
    {
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
        "ownerReferences",
        "finalizers",
    }
)


def strip_none(value: Any) -> Any:
    """A deep copy without ``None``-valued mapping entries (the API server prunes them too)."""
    if isinstance(value, Mapping):
        return {k: strip_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_none(v) for v in value]
    return copy.deepcopy(value)


def render_fields(
    obj: object, fields: Sequence[tuple[str, str]], always: Sequence[str] = ()
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, attr in fields:
        value = getattr(obj, attr)
        if value is not None or key in always:
            out[key] = copy.deepcopy(value)
    return out


def unknown_keys(
    data: Mapping[str, Any], allowed: Sequence[str], path: str, problems: list[SpecProblem], what: str
) -> None:
    for key in data:
        if key in allowed or (path == "metadata" and key in _LIVE_METADATA_KEYS):
            continue
        close = difflib.get_close_matches(str(key), list(allowed), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        problems.append(
            SpecProblem(
                f"{path}.{key}" if path else str(key),
                f"is not a field of {what}",
                f"{hint}remove it; valid fields are {', '.join(allowed)}",
            )
        )


def read_fields(
    data: Mapping[str, Any],
    fields: Sequence[tuple[str, str]],
    path: str,
    problems: list[SpecProblem],
    what: str,
    required: Sequence[str] = (),
) -> dict[str, Any]:
    """Keyword arguments for a dataclass from a CRD mapping; null values count as unset."""
    unknown_keys(data, [key for key, _ in fields], path, problems, what)
    for key in required:
        if data.get(key) is None:
            problems.append(SpecProblem(f"{path}.{key}", "is missing", f"set {key}; the CRD requires it"))
    return {attr: copy.deepcopy(data[key]) for key, attr in fields if data.get(key) is not None}


_T = TypeVar("_T")


def build_section(
    cls: Callable[..., _T],
    data: Mapping[str, Any],
    fields: Sequence[tuple[str, str]],
    path: str,
    problems: list[SpecProblem],
    what: str,
    required: Sequence[str] = (),
) -> _T | None:
    """An instance from a CRD mapping, or None (with the reasons in ``problems``)."""
    before = len(problems)
    kwargs = read_fields(data, fields, path, problems, what, required)
    return cls(**kwargs) if len(problems) == before else None


def load_section(
    cls: Callable[..., _T],
    data: Mapping[str, Any],
    fields: Sequence[tuple[str, str]],
    path: str,
    what: str,
    required: Sequence[str] = (),
) -> _T:
    problems: list[SpecProblem] = []
    built = build_section(cls, data, fields, path, problems, what, required)
    if built is None:
        raise PathwaysSpecError(problems)
    return built


def as_mapping(value: Any, path: str, problems: list[SpecProblem]) -> Mapping[str, Any] | None:
    if isinstance(value, Mapping):
        return value
    problems.append(
        SpecProblem(path, f"must be a mapping, not {type(value).__name__}", "write it as key: value pairs")
    )
    return None


def as_list(value: Any, path: str, problems: list[SpecProblem]) -> list[Any] | None:
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return list(value)
    problems.append(
        SpecProblem(path, f"must be a list, not {type(value).__name__}", "write it as a YAML list")
    )
    return None


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
    main_container_name: str = MAIN_CONTAINER
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


METADATA_FIELDS = (
    ("name", "name"),
    ("namespace", "namespace"),
    ("labels", "labels"),
    ("annotations", "annotations"),
)
SPEC_KEYS = ("maxRestarts", "pathwaysVersion", "pathwaysDir", "customComponents", "workers", "controller")
MANIFEST_KEYS = ("apiVersion", "kind", "metadata", "spec", "status")


def check_identity(data: Mapping[str, Any]) -> None:
    """Raise at once for another apiVersion or kind: nothing else about such a document is useful."""
    problems: list[SpecProblem] = []
    kind = data.get("kind")
    if kind is not None and kind != KIND:
        fix = f"load a {KIND} manifest (apiVersion {API_VERSION})"
        if kind == JobKind.JOBSET.value:
            fix += "; JobSets are rendered from a PathwaysJobSpec with to_jobset(), not loaded"
        problems.append(SpecProblem("kind", f"is {kind!r}, not {KIND!r}", fix))
    api_version = data.get("apiVersion")
    if api_version is not None and api_version != API_VERSION:
        problems.append(
            SpecProblem(
                "apiVersion", f"is {api_version!r}, not {API_VERSION!r}", f"set apiVersion: {API_VERSION}"
            )
        )
    if problems:
        raise PathwaysSpecError(problems)


def parse_spec(spec: Mapping[str, Any], problems: list[SpecProblem]) -> dict[str, Any]:
    """Constructor keywords for the spec part of a PathwaysJobSpec; structural problems go to ``problems``."""
    unknown_keys(spec, SPEC_KEYS, "spec", problems, "a PathwaysJob spec")
    kwargs: dict[str, Any] = {}
    for key, attr in (
        ("maxRestarts", "max_restarts"),
        ("pathwaysVersion", "pathways_version"),
        ("pathwaysDir", "pathways_dir"),
    ):
        if spec.get(key) is not None:
            kwargs[attr] = copy.deepcopy(spec[key])

    workers = spec.get("workers")
    if workers is None:
        problems.append(
            SpecProblem("spec.workers", "is missing", "add exactly one worker entry (type, topology)")
        )
    elif (entries := as_list(workers, "spec.workers", problems)) is not None:
        if len(entries) != 1:
            problems.append(
                SpecProblem(
                    "spec.workers",
                    f"has {len(entries)} entries; a PathwaysJob takes exactly one",
                    "keep a single worker entry (one machine type and topology per job)",
                )
            )
        elif (entry := as_mapping(entries[0], "spec.workers[0]", problems)) is not None:
            worker = build_section(
                WorkerSpec, entry, WORKER_FIELDS, "spec.workers[0]", problems, "a worker", WORKER_REQUIRED
            )
            if worker is not None:
                kwargs["workers"] = worker

    controller = spec.get("controller")
    if controller is None:
        problems.append(
            SpecProblem(
                "spec.controller",
                "is missing; the CRD requires it (without a template the job is headless and never finishes)",
                "add controller: {deploymentMode: default, template: <pod template of the program>}, "
                "or controller: {deploymentMode: default} for a headless job",
            )
        )
    elif (mapping := as_mapping(controller, "spec.controller", problems)) is not None:
        built = build_section(
            ControllerSpec, mapping, CONTROLLER_FIELDS, "spec.controller", problems, "the controller"
        )
        if built is not None:
            kwargs["controller"] = built

    components = spec.get("customComponents")
    if (
        components is not None
        and (items := as_list(components, "spec.customComponents", problems)) is not None
    ):
        parsed: list[CustomComponent] = []
        for index, item in enumerate(items):
            path = f"spec.customComponents[{index}]"
            if (mapping := as_mapping(item, path, problems)) is not None:
                component = build_section(
                    CustomComponent,
                    mapping,
                    COMPONENT_FIELDS,
                    path,
                    problems,
                    "a custom component",
                    COMPONENT_REQUIRED,
                )
                if component is not None:
                    parsed.append(component)
        kwargs["custom_components"] = parsed
    return kwargs


@dataclass(kw_only=True)
class PathwaysJobSpec:
    """A whole PathwaysJob: metadata (name, namespace, labels, annotations) plus its spec."""

    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    workers: WorkerSpec
    controller: ControllerSpec = field(default_factory=ControllerSpec)
    pathways_dir: str | None = None
    pathways_version: str | None = None
    max_restarts: int | None = None
    custom_components: list[CustomComponent] | None = None

    head_replicated_job: ClassVar[str] = HEAD_REPLICATED_JOB
    worker_replicated_job: ClassVar[str] = WORKER_REPLICATED_JOB

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_tpu_type(
        cls,
        tpu_type: str,
        *,
        num_slices: int = 1,
        pathways_dir: str | None = None,
        name: str | None = None,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        template: dict[str, Any] | None = None,
        main_container_name: str | None = None,
        deployment_mode: str = "default",
        elastic_slices: int | None = None,
        enable_metrics_collection: bool | None = None,
        pathways_version: str | None = None,
        max_restarts: int | None = None,
        max_slice_restarts: int | None = None,
        termination_grace_period_seconds: int | None = None,
        priority_class_name: str | None = None,
        node_selector: dict[str, str] | None = None,
        custom_components: Sequence[CustomComponent] | None = None,
        kind: str | None = None,
    ) -> PathwaysJobSpec:
        """Build a spec from a TPU device type such as ``v6e-16`` (machine type, topology: GKE's table).

        ``main_container_name`` defaults to the only container of ``template``, else ``main``.
        Raises PathwaysSpecError if the device type is unknown, or, with ``kind="PathwaysJob"``, if the
        PathwaysJob controller does not accept its machine type and topology (``v4-384`` is ``4x4x12``,
        which only a plain JobSet can run). Call ``validate(kind=...)`` to check the rest.
        """
        row = tpu.lookup_tpu_type(tpu_type)
        if row is None or (kind == tpu.PATHWAYSJOB_KIND and not row.pathways_supported):
            raise PathwaysSpecError([device_type_problem(tpu_type, row, kind or tpu.PATHWAYSJOB_KIND)])
        if main_container_name is None:
            names = [
                c.get("name") for c in ControllerSpec(template=template).containers if isinstance(c, Mapping)
            ]
            main_container_name = (
                names[0] if len(names) == 1 and isinstance(names[0], str) else MAIN_CONTAINER
            )
        return cls(
            name=name,
            namespace=namespace,
            labels=labels,
            annotations=annotations,
            workers=WorkerSpec(
                type=row.gce_machine_type,
                topology=row.topology,
                num_slices=num_slices,
                max_slice_restarts=max_slice_restarts,
                termination_grace_period_seconds=termination_grace_period_seconds,
                priority_class_name=priority_class_name,
                node_selector=node_selector,
            ),
            controller=ControllerSpec(
                deployment_mode=deployment_mode,
                main_container_name=main_container_name,
                elastic_slices=elastic_slices,
                enable_metrics_collection=enable_metrics_collection,
                template=template,
            ),
            pathways_dir=pathways_dir,
            pathways_version=pathways_version,
            max_restarts=max_restarts,
            custom_components=list(custom_components) if custom_components is not None else None,
        )

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, name: str | None = None, namespace: str | None = None
    ) -> PathwaysJobSpec:
        """Load a full PathwaysJob manifest (apiVersion/kind/metadata/spec) or just its ``spec`` mapping.

        ``name``/``namespace`` override the manifest's. Null values count as unset; ``status`` and
        server-set metadata (uid, resourceVersion, ...) are ignored. Raises PathwaysSpecError listing
        every structural problem; values are checked by ``validate()``.
        """
        problems: list[SpecProblem] = []
        if not isinstance(data, Mapping):
            raise PathwaysSpecError(
                [
                    SpecProblem(
                        "<document>",
                        f"is a {type(data).__name__}, not a mapping",
                        "pass a PathwaysJob manifest or its spec as a mapping",
                    )
                ]
            )
        metadata: Mapping[str, Any] = {}
        spec_data: Any = data
        if any(key in data for key in MANIFEST_KEYS):
            check_identity(data)
            unknown_keys(data, MANIFEST_KEYS, "", problems, "a PathwaysJob manifest")
            if data.get("metadata") is not None:
                metadata = as_mapping(data["metadata"], "metadata", problems) or {}
            spec_data = data.get("spec")
            if spec_data is None:
                problems.append(
                    SpecProblem("spec", "is missing", "add the PathwaysJob spec (workers, controller)")
                )
        spec_map = as_mapping(spec_data, "spec", problems) if spec_data is not None else None
        meta_kwargs = read_fields(metadata, METADATA_FIELDS, "metadata", problems, "metadata supported here")
        if name is not None:
            meta_kwargs["name"] = name
        if namespace is not None:
            meta_kwargs["namespace"] = namespace
        kwargs: dict[str, Any] = {}
        if spec_map is not None:
            kwargs = parse_spec(spec_map, problems)
        if problems:
            raise PathwaysSpecError(problems)
        return cls(**meta_kwargs, **kwargs)

    @classmethod
    def from_yaml(
        cls, text: str | bytes, *, name: str | None = None, namespace: str | None = None
    ) -> PathwaysJobSpec:
        """Load exactly one YAML document with ``from_dict``.

        Safe loading only; duplicate keys, non-text input and documents that are too large or expand
        too much through aliases raise PathwaysSpecError (see ``spec.yaml_io``).
        """
        documents = yaml_io.load_documents(text)
        if len(documents) != 1:
            raise PathwaysSpecError(
                [
                    SpecProblem(
                        "<yaml>",
                        f"contains {len(documents)} documents",
                        "pass exactly one PathwaysJob document (split multi-document files first)",
                    )
                ]
            )
        return cls.from_dict(documents[0], name=name, namespace=namespace)

    # ------------------------------------------------------------------ rendering

    def to_pathwaysjob(self) -> dict[str, Any]:
        """The PathwaysJob manifest (a fresh dict; unset optional fields are left out)."""
        spec: dict[str, Any] = {}
        if self.max_restarts is not None:
            spec["maxRestarts"] = self.max_restarts
        if self.pathways_version is not None:
            spec["pathwaysVersion"] = self.pathways_version
        if self.pathways_dir is not None:
            spec["pathwaysDir"] = self.pathways_dir
        if self.custom_components is not None:
            spec["customComponents"] = [component.to_dict() for component in self.custom_components]
        spec["workers"] = [self.workers.to_dict()]
        spec["controller"] = self.controller.to_dict()
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": render_fields(self, METADATA_FIELDS),
            "spec": spec,
        }

    def to_jobset(self) -> dict[str, Any]:
        """The plain JobSet (``jobset.x-k8s.io/v1alpha2``) equivalent to what the controller creates.

        Raises PathwaysSpecError if the name, machine type, topology or slice count needed to derive
        it are missing or invalid; other values are rendered as they are (use ``validate()``).
        """
        from airflow_provider_pathways.gke.spec.jobset import render_jobset

        return render_jobset(self)

    def to_yaml(self, *, jobset: bool = False) -> str:
        """The PathwaysJob manifest (or with ``jobset=True`` the JobSet) as YAML."""
        manifest = self.to_jobset() if jobset else self.to_pathwaysjob()
        return yaml.dump(manifest, Dumper=yaml_io.BlockDumper, sort_keys=False, default_flow_style=False)

    # ------------------------------------------------------------------ validation

    def problems(self, kind: str = tpu.PATHWAYSJOB_KIND) -> list[SpecProblem]:
        """Every problem that would make a job of ``kind`` fail to submit or to run.

        ``kind`` is ``PathwaysJob`` (the controller renders the JobSet) or ``JobSet`` (``to_jobset()``).
        """
        return spec_problems(self, kind)

    def validate(self, kind: str = tpu.PATHWAYSJOB_KIND) -> PathwaysJobSpec:
        """Raise one PathwaysSpecError listing every problem; return ``self`` when there is none."""
        found = self.problems(kind)
        if found:
            raise PathwaysSpecError(found)
        return self

    # ------------------------------------------------------------------ derived values

    @property
    def slice_shape(self) -> tpu.SliceShape:
        """VMs, chips per VM, accelerator label and TPU version of one worker slice.

        From GKE's table, or the PathwaysJob controller's for a pair only it knows; for a machine type
        newer than both, derived from its name (``-<N>t``: N chips per VM) and the worker node selector.
        """
        shape = tpu.slice_shape(self.workers.type, self.workers.topology)
        if shape is not None:
            return shape
        return _guessed_shape(self.workers)

    @property
    def vms_per_slice(self) -> int:
        """Worker pods (TPU VMs) per slice: chips in the topology / chips per VM (at least 1)."""
        return self.slice_shape.vms_per_slice

    @property
    def chips_per_vm(self) -> int:
        """TPU chips each worker pod requests (``google.com/tpu``)."""
        return self.slice_shape.chips_per_vm

    @property
    def instance_type(self) -> str:
        """The resource manager's ``--instance_type``, e.g. ``tpuv6e:4x4``."""
        return self.slice_shape.instance_type

    @property
    def gke_accelerator(self) -> str:
        """The ``cloud.google.com/gke-tpu-accelerator`` node label of the workers."""
        return self.slice_shape.gke_accelerator

    @property
    def device_type(self) -> str | None:
        """The TPU device type (e.g. ``v6e-16``) for this machine type and topology, if the table has one."""
        return tpu.device_type_for(self.workers.type, self.workers.topology)

    @property
    def image_tag(self) -> str:
        """Tag of the Pathways images: ``pathways_version`` or ``latest``."""
        return self.pathways_version or "latest"

    def _required_name(self) -> str:
        if not isinstance(self.name, str) or not self.name:
            raise PathwaysSpecError([missing_name_problem()])
        return self.name

    @property
    def head_host(self) -> str:
        """In-cluster DNS name of the head pod: ``<name>-pathways-head-0-0.<name>``."""
        return coordinator_label_value(self._required_name())

    @property
    def proxy_address(self) -> str:
        """Address JAX clients use: ``grpc://<name>-pathways-head-0-0.<name>:29000``."""
        return proxy_address(self._required_name())

    @property
    def max_name_length(self) -> int:
        """Longest name JobSet accepts: 22 (its coordinator label), less only for huge pod names."""
        return max_name_length(self)

    def component(self, component_type: str) -> CustomComponent | None:
        """The custom component of this type, if any."""
        for component in self.custom_components or ():
            if component.component_type == component_type:
                return component
        return None


_MACHINE_NAME = re.compile(r"^(?P<family>[a-z0-9]+)-[a-z0-9]+-(?P<chips>[1-9][0-9]?)t$")


def _guessed_shape(workers: WorkerSpec) -> tpu.SliceShape:
    """The slice shape of a machine type no table knows, from its name and the worker node selector."""
    machine, topology = workers.type, workers.topology
    field_path = "spec.workers[0].type"
    known_topologies = tpu.topologies_for(machine, tpu.JOBSET_KIND) or tpu.topologies_for(
        machine, tpu.PATHWAYSJOB_KIND
    )
    try:
        chips = tpu.topology_chips(topology)
    except ValueError:
        chips = 0
    if chips == 0 or known_topologies:
        fix = (
            f"use one of: {', '.join(known_topologies)}"
            if known_topologies
            else "use a shape such as '2x2x1'"
        )
        raise PathwaysSpecError(
            [SpecProblem("spec.workers[0].topology", f"{topology!r} is not a slice of {machine!r}", fix)]
        )
    match = _MACHINE_NAME.fullmatch(machine) if isinstance(machine, str) else None
    if match is None:
        raise PathwaysSpecError(
            [
                SpecProblem(
                    field_path,
                    f"machine type {machine!r} is unknown and its name does not say its chips per VM",
                    "use a TPU machine type such as 'ct6e-standard-4t' (<family>-<class>-<chips>t)",
                )
            ]
        )
    family, per_vm = match["family"], int(match["chips"])
    known = [s for (m, _), s in tpu.gke_slices().items() if m.split("-")[0] == family]
    selector = workers.node_selector if isinstance(workers.node_selector, Mapping) else {}
    accelerator = selector.get(ACCELERATOR_LABEL) or (known[0].gke_accelerator if known else None)
    if not accelerator or not known:
        raise PathwaysSpecError(
            [
                SpecProblem(
                    field_path,
                    f"machine type {machine!r} is of a TPU family this provider does not know",
                    f"set node_selector={{{ACCELERATOR_LABEL!r}: ...}} and a known family, "
                    "or use a machine type from tpu.gke_machine_types()",
                )
            ]
        )
    return tpu.SliceShape(
        machine_type=machine,
        topology=topology,
        vms_per_slice=chips // per_vm if chips >= per_vm else 1,
        chips_per_vm=per_vm if chips >= per_vm else chips,
        gke_accelerator=str(accelerator),
        pathways_tpu_version=known[0].pathways_tpu_version,
    )
