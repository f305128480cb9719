"""Checks run before a job is sent: each problem names its field path and how to fix it.

Structural checks (the CRD's schema, :mod:`.schema`) come first; the semantic checks here then skip
fields that are already reported: TPU machine types, topologies and slice counts; the controller
section (deployment mode, pod template, containers, environment) and custom components; the
spec's other fields and its sizes. Rules that depend on what is submitted take a ``kind``:
``PathwaysJob`` (the controller renders the JobSet) or ``JobSet`` (rendered here).

Where each rule comes from:

- name <= 22 characters: JobSet writes ``<name>-pathways-head-0-0.<name>`` into the
  ``jobset.sigs.k8s.io/coordinator`` label (jobset ``jobset_controller.go`` ``CoordinatorEndpoint``)
  and rejects values over 63 characters (``jobset_webhook.go`` ``validateCoordinatorLabelValue``);
- generated Job and pod names are DNS-1035 labels (``jobset_webhook.go`` ``ValidateCreate``);
- replicas x parallelism <= MaxInt32 (``jobset_webhook.go``);
- topologies of a PathwaysJob: ``ValidTpuTopologiesMap`` (pathways-job ``pathwaysjob_controller.go``);
  of a JobSet: GKE's table (``tpu.gke_slices()``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_pathways.cache.location import bucket_name_error
from airflow_provider_pathways.gke import tpu
from airflow_provider_pathways.gke.objects import (
    ACCELERATOR_LABEL,
    PROXY_CONTAINER,
    RM_CONTAINER,
    TOPOLOGY_LABEL,
    check_kind,
)
from airflow_provider_pathways.gke.spec.checks import (
    INT32_MAX,
    INT64_MAX,
    WORKERS_PATH,
    PathwaysSpecError,
    SpecProblem,
    add_problem,
    dns1123_label_error,
    dns1123_subdomain_error,
    image_reference_error,
    image_tag_error,
    int_problem,
    is_int,
    key_path,
    metadata_problems,
    missing_name_problem,
    string_map_problems,
    suggest_name,
)
from airflow_provider_pathways.gke.spec.schema import structural_problems

if TYPE_CHECKING:
    from airflow_provider_pathways.gke.spec.model import ControllerSpec, PathwaysJobSpec, WorkerSpec


# ---------------------------------------------------------------------- workers


def _grouped_device_types(first: str = "", kind: str = tpu.PATHWAYSJOB_KIND) -> str:
    """Accepted device types by family, the family ``first`` leading; long families are shortened."""
    groups: dict[str, list[str]] = {}
    names = tpu.pathways_device_types() if kind == tpu.PATHWAYSJOB_KIND else list(tpu.tpu_types())
    for device_type in names:
        prefix, _, size = device_type.rpartition("-")
        groups.setdefault(prefix, []).append(size)
    parts = []
    for prefix in sorted(groups, key=lambda p: p != first):
        names = [f"{prefix}-{size}" for size in sorted(groups[prefix], key=int)]
        if len(names) > 10:
            names = [*names[:8], f"... {names[-1]} ({len(names)} types)"]
        parts.append(", ".join(names))
    listing = "tpu.pathways_device_types()" if kind == tpu.PATHWAYSJOB_KIND else "tpu.tpu_types()"
    return "; ".join(parts) + f" (all: airflow_provider_pathways.{listing})"


def device_type_problem(
    device_type: object, row: tpu.TpuType | None, kind: str = tpu.PATHWAYSJOB_KIND
) -> SpecProblem:
    """The problem for a TPU device type that is unknown or that a job of ``kind`` cannot run."""
    family = str(device_type).strip().lower().rpartition("-")[0]
    fix = f"use a device type a {kind} accepts: {_grouped_device_types(family, kind)}"
    if row is None:
        return SpecProblem(f"{WORKERS_PATH}.type", f"unknown TPU device type {device_type!r}", fix)
    return SpecProblem(
        f"{WORKERS_PATH}.type",
        f"TPU device type {device_type!r} is machine type {row.gce_machine_type!r} with topology "
        f"{row.topology!r}, which the PathwaysJob controller does not accept (pathwaysjob_controller.go "
        "ValidTpuTopologiesMap)",
        f"run it with kind='JobSet' (GKE has this slice), or {fix}",
    )


def _topology_listing(topologies: tuple[str, ...]) -> str:
    if len(topologies) <= 16:
        return ", ".join(topologies)
    return ", ".join(topologies[:12]) + f", ... {topologies[-1]} ({len(topologies)} topologies)"


def machine_problems(workers: WorkerSpec, kind: str = tpu.PATHWAYSJOB_KIND) -> list[SpecProblem]:
    """Problems of ``workers.type`` and ``workers.topology`` for a job of ``kind``."""
    out: list[SpecProblem] = []
    machine_type, topology = workers.type, workers.topology
    topologies = tpu.topologies_for(machine_type, kind)
    if not topologies:
        row = tpu.lookup_tpu_type(machine_type)
        if row is not None:
            fix = (
                f"{machine_type!r} is a TPU device type: set type={row.gce_machine_type!r} and "
                f"topology={row.topology!r}, or build the spec with "
                f"PathwaysJobSpec.from_tpu_type({machine_type!r})"
            )
        elif kind == tpu.PATHWAYSJOB_KIND:
            fix = f"use one of: {', '.join(tpu.PATHWAYS_MACHINE_TYPES)}"
            if isinstance(machine_type, str) and machine_type in tpu.gke_machine_types():
                fix += " (or run it with kind='JobSet', which GKE's node pools accept)"
        else:
            fix = (
                f"use one of: {', '.join(sorted(tpu.gke_machine_types()))}; for a machine type newer than "
                "this provider's table pass validate_spec=False"
            )
        where = (
            "the PathwaysJob CRD accepts (its enum of worker types)"
            if kind == tpu.PATHWAYSJOB_KIND
            else "GKE offers as a TPU node pool in this provider's table"
        )
        out.append(
            SpecProblem(f"{WORKERS_PATH}.type", f"machine type {machine_type!r} is not one {where}", fix)
        )
    try:
        tpu.parse_topology(topology)
    except ValueError:
        fix = (
            f"use one of: {_topology_listing(topologies)}"
            if topologies
            else "use a shape such as '4x4' or '2x2x2'"
        )
        out.append(
            SpecProblem(f"{WORKERS_PATH}.topology", f"{topology!r} is not of the form AxB or AxBxC", fix)
        )
        return out
    if topologies and topology not in topologies:
        if kind == tpu.PATHWAYSJOB_KIND:
            problem = (
                f"{topology!r} is not a topology the PathwaysJob controller accepts for {machine_type} "
                "(pathwaysjob_controller.go ValidTpuTopologiesMap; it would end in terminalState Failed)"
            )
            fix = f"use one of: {_topology_listing(topologies)}"
            if topology in tpu.topologies_for(machine_type, tpu.JOBSET_KIND):
                fix += f"; or run it with kind='JobSet' (GKE has {topology} node pools for {machine_type})"
        else:
            problem = f"{topology!r} is not a TPU slice GKE offers for machine type {machine_type}"
            fix = f"use one of: {_topology_listing(topologies)}"
            other = [m for m, t in tpu.gke_machine_types().items() if topology in t]
            if other:
                fix += f"; {topology} exists on {', '.join(sorted(other))}"
        out.append(SpecProblem(f"{WORKERS_PATH}.topology", problem, fix))
    return out


def num_slices_problem(num_slices: object) -> SpecProblem | None:
    return int_problem(
        num_slices,
        f"{WORKERS_PATH}.numSlices",
        minimum=1,
        fix="set num_slices to the number of TPU slices (1+)",
    )


def derivation_problems(spec: PathwaysJobSpec) -> list[SpecProblem]:
    """Problems that stop the JobSet from being rendered (name, slice shape, slice count, types)."""
    out: list[SpecProblem] = []
    if not isinstance(spec.name, str) or not spec.name:
        out.append(missing_name_problem())
    try:
        spec.slice_shape  # noqa: B018 - derived, or raises with the reason
    except PathwaysSpecError as err:
        out.extend(err.problems)
    add_problem(out, num_slices_problem(spec.workers.num_slices))
    structural = [p for p in structural_problems(spec.to_pathwaysjob()) if p.field != f"{WORKERS_PATH}.type"]
    out.extend(p for p in structural if p.field not in {q.field for q in out})
    return out


DEPLOYMENT_MODES: tuple[str, ...] = ("default", "colocate_head_with_workers")
COMPONENT_TYPES: tuple[str, ...] = ("proxy_server", "pathways_server", "worker", "colocated_python_sidecar")
MAX_CUSTOM_COMPONENTS = 4
_CONTROLLER = "spec.controller"
_TEMPLATE = "spec.controller.template"
_JOB_RESTART_POLICIES = ("Never", "OnFailure")


def pathways_dir_problem(value: object) -> SpecProblem | None:
    path = "spec.pathwaysDir"
    fix = "set pathways_dir to a folder in an existing bucket, such as 'gs://my-bucket/pathways'"
    if value is None:
        return SpecProblem(path, "is missing; every Pathways component needs a gs:// scratch location", fix)
    if not isinstance(value, str) or not value.startswith("gs://"):
        return SpecProblem(path, f"{value!r} is not a gs:// URL", fix)
    bucket = value[len("gs://") :].split("/", 1)[0]
    if reason := bucket_name_error(bucket):
        return SpecProblem(path, f"bucket name {bucket!r} in {value!r} {reason}", fix)
    return None


# ---------------------------------------------------------------------- controller


def controller_problems(controller: ControllerSpec, workers: WorkerSpec, out: list[SpecProblem]) -> None:
    if controller.deployment_mode not in DEPLOYMENT_MODES:
        out.append(
            SpecProblem(
                f"{_CONTROLLER}.deploymentMode",
                f"{controller.deployment_mode!r} is not a deployment mode",
                f"use one of: {', '.join(DEPLOYMENT_MODES)}",
            )
        )
    main = controller.main_container_name
    main_ok = isinstance(main, str) and dns1123_label_error(main) is None
    if not main_ok:
        out.append(
            SpecProblem(
                f"{_CONTROLLER}.mainContainerName",
                f"{main!r} is not a valid container name",
                "use the name of the template container that runs the JAX program (lowercase, e.g. 'main')",
            )
        )
    if controller.elastic_slices is not None:
        problem = int_problem(
            controller.elastic_slices,
            f"{_CONTROLLER}.elasticSlices",
            minimum=0,
            fix="set elastic_slices to how many slices may be missing at once (0 or more)",
        )
        slices = workers.num_slices
        if problem is None and is_int(slices) and slices >= 1 and controller.elastic_slices >= slices:
            problem = SpecProblem(
                f"{_CONTROLLER}.elasticSlices",
                f"is {controller.elastic_slices} but numSlices is {slices}: at least one slice must stay up",
                f"set elastic_slices to at most {slices - 1}, or raise num_slices",
            )
        add_problem(out, problem)
    if controller.enable_metrics_collection is not None and not isinstance(
        controller.enable_metrics_collection, bool
    ):
        out.append(
            SpecProblem(
                f"{_CONTROLLER}.enableMetricsCollection",
                f"must be true or false, not {controller.enable_metrics_collection!r}",
                "set enable_metrics_collection to a bool or leave it unset",
            )
        )
    if controller.template is not None:
        names = _template_problems(controller.template, out)
        if main_ok and names is not None and main not in names:
            out.append(
                SpecProblem(
                    f"{_CONTROLLER}.mainContainerName",
                    f"{main!r} names no container of the template (containers: {', '.join(names) or 'none'})",
                    "set main_container_name to the container that runs the JAX program"
                    + (f": one of {', '.join(names)}" if names else ""),
                )
            )


def _template_problems(template: object, out: list[SpecProblem]) -> list[str] | None:
    """Problems of the user's pod template; returns its container names (None if it has no container list)."""
    if not isinstance(template, Mapping):
        out.append(
            SpecProblem(
                _TEMPLATE, f"must be a pod template mapping, not {type(template).__name__}", "pass a dict"
            )
        )
        return None
    for key in template:
        if key not in ("metadata", "spec"):
            out.append(
                SpecProblem(
                    f"{_TEMPLATE}.{key}",
                    "is not a field of a pod template (which has only metadata and spec)",
                    "put pod fields such as containers under 'spec:'",
                )
            )
    metadata = template.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            out.append(SpecProblem(f"{_TEMPLATE}.metadata", "must be a mapping", "write key: value pairs"))
        else:
            if metadata.get("labels") is not None:
                string_map_problems(
                    metadata["labels"], f"{_TEMPLATE}.metadata.labels", out, label_values=True
                )
            if metadata.get("annotations") is not None:
                string_map_problems(
                    metadata["annotations"], f"{_TEMPLATE}.metadata.annotations", out, label_values=False
                )
    pod = template.get("spec")
    if pod is None and "containers" in template:
        return None  # reported above as a pod spec not wrapped in 'spec:'
    if not isinstance(pod, Mapping):
        out.append(
            SpecProblem(
                f"{_TEMPLATE}.spec",
                "is missing" if pod is None else "must be a mapping",
                "add a pod spec with the user program's containers, or drop the template for a headless job",
            )
        )
        return None
    restart_policy = pod.get("restartPolicy")
    if restart_policy is not None and restart_policy not in _JOB_RESTART_POLICIES:
        out.append(
            SpecProblem(
                f"{_TEMPLATE}.spec.restartPolicy",
                f"{restart_policy!r} is not allowed in a Job's pod",
                "use Never or OnFailure, or leave it unset",
            )
        )
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        out.append(
            SpecProblem(
                f"{_TEMPLATE}.spec.containers",
                "is missing or empty",
                "list at least one container with a name and an image",
            )
        )
        return None
    names: list[str] = []
    for index, container in enumerate(containers):
        _container_problems(container, f"{_TEMPLATE}.spec.containers[{index}]", names, out)
    return names


def _container_problems(container: object, path: str, names: list[str], out: list[SpecProblem]) -> None:
    if not isinstance(container, Mapping):
        out.append(
            SpecProblem(path, "must be a container mapping", "write name:, image:, ... for the container")
        )
        return
    name = container.get("name")
    if not isinstance(name, str) or not name:
        out.append(
            SpecProblem(f"{path}.name", "is missing", "give the container a lowercase name such as 'main'")
        )
    else:
        if reason := dns1123_label_error(name):
            out.append(SpecProblem(f"{path}.name", f"{name!r} {reason}", f"use {suggest_name(name)!r}"))
        if name in (PROXY_CONTAINER, RM_CONTAINER):
            out.append(
                SpecProblem(
                    f"{path}.name",
                    f"{name!r} is the name of a container the controller adds to the head pod",
                    "rename the container",
                )
            )
        if name in names:
            out.append(
                SpecProblem(f"{path}.name", f"{name!r} is used by another container", "use unique names")
            )
        names.append(name)
    image = container.get("image")
    if not isinstance(image, str) or not image:
        out.append(SpecProblem(f"{path}.image", "is missing", "set the container image, e.g. 'python:3.12'"))
    elif reason := image_reference_error(image):
        out.append(SpecProblem(f"{path}.image", f"{image!r} {reason}", "use a pullable image reference"))
    _env_problems(container.get("env"), f"{path}.env", out)


def _env_problems(env: Any, path: str, out: list[SpecProblem]) -> None:
    if env is None:
        return
    if not isinstance(env, list):
        out.append(SpecProblem(path, "must be a list of {name, value} entries", "write env as a YAML list"))
        return
    for index, entry in enumerate(env):
        entry_path = f"{path}[{index}]"
        if not isinstance(entry, Mapping):
            out.append(SpecProblem(entry_path, "must be a mapping with name and value", "write - name: X"))
            continue
        if not isinstance(entry.get("name"), str) or not entry.get("name"):
            out.append(
                SpecProblem(f"{entry_path}.name", "is missing", "give every environment variable a name")
            )
        value = entry.get("value")
        if value is not None and not isinstance(value, str):
            out.append(
                SpecProblem(
                    f"{entry_path}.value",
                    f"must be a string, not {type(value).__name__} {value!r}",
                    f'quote the value (value: "{value}")',
                )
            )


# ---------------------------------------------------------------------- custom components


def component_problems(components: object, out: list[SpecProblem]) -> None:
    if components is None:
        return
    path = "spec.customComponents"
    if not isinstance(components, list):
        out.append(SpecProblem(path, "must be a list of CustomComponent", "pass a list"))
        return
    if len(components) > MAX_CUSTOM_COMPONENTS:
        out.append(
            SpecProblem(
                path,
                f"has {len(components)} entries; a PathwaysJob takes at most {MAX_CUSTOM_COMPONENTS}",
                "keep one entry per component type",
            )
        )
    seen: dict[str, int] = {}
    for index, component in enumerate(components):
        cpath = f"{path}[{index}]"
        ctype = getattr(component, "component_type", None)
        if ctype not in COMPONENT_TYPES:
            out.append(
                SpecProblem(
                    f"{cpath}.componentType",
                    f"{ctype!r} is not a component type",
                    f"use one of: {', '.join(COMPONENT_TYPES)}",
                )
            )
        elif ctype in seen:
            out.append(
                SpecProblem(
                    f"{cpath}.componentType",
                    f"{ctype!r} already appears at {path}[{seen[ctype]}]",
                    "merge the two entries into one",
                )
            )
        else:
            seen[ctype] = index
        # An empty or absent image means the controller's default (MakeComponentImage); for the
        # colocated Python sidecar, no sidecar (MakeColocateHeadWithWorkersPythonInitContainers).
        image = getattr(component, "image", None)
        if image not in (None, ""):
            reason = image_reference_error(image) if isinstance(image, str) else "must be a string"
            if reason:
                out.append(
                    SpecProblem(f"{cpath}.image", f"{image!r} {reason}", "use a pullable image reference")
                )
        # The controller appends customFlags to the component's arguments verbatim
        # (AppendCustomComponentFlags): any strings, `--name=value` and absl's `-name=value` alike.
        flags = getattr(component, "custom_flags", None)
        if flags is not None:
            if not isinstance(flags, list):
                out.append(SpecProblem(f"{cpath}.customFlags", "must be a list of strings", "pass a list"))
            else:
                for flag_index, flag in enumerate(flags):
                    if not isinstance(flag, str):
                        out.append(
                            SpecProblem(
                                f"{cpath}.customFlags[{flag_index}]",
                                f"{flag!r} is not a string",
                                "write flags as text, e.g. '--name=value'",
                            )
                        )
        _env_problems(getattr(component, "custom_env", None), f"{cpath}.customEnv", out)


def spec_problems(spec: PathwaysJobSpec, kind: str = tpu.PATHWAYSJOB_KIND) -> list[SpecProblem]:
    """Every problem in ``spec`` for a job of ``kind``: structural ones first, then semantic ones.

    A semantic problem about a field that already has a structural problem replaces it (its
    message is more specific); one about a field inside a structurally broken value is dropped.
    """
    check_kind(kind)
    structural = structural_problems(spec.to_pathwaysjob())
    if kind == tpu.JOBSET_KIND:
        # The CRD's machine-type enum binds the PathwaysJob controller only; GKE's table decides here.
        structural = [p for p in structural if p.field != f"{WORKERS_PATH}.type"]
    semantic: list[SpecProblem] = []
    metadata_problems(spec, kind, semantic)
    _worker_problems(spec.workers, kind, semantic)
    _spec_field_problems(spec, semantic)
    controller_problems(spec.controller, spec.workers, semantic)
    component_problems(spec.custom_components, semantic)
    _size_problems(spec, kind, semantic)
    by_field: dict[str, list[SpecProblem]] = {}
    for problem in semantic:
        by_field.setdefault(problem.field, []).append(problem)
    broken = {p.field for p in structural}
    out: list[SpecProblem] = []
    used: set[str] = set()
    for problem in structural:
        if problem.field in by_field:
            if problem.field not in used:
                out.extend(by_field[problem.field])
                used.add(problem.field)
        else:
            out.append(problem)

    def under_broken(field: str) -> bool:
        return any(field.startswith(b + ".") or field.startswith(b + "[") for b in broken)

    out.extend(
        p for p in semantic if p.field not in used and p.field not in broken and not under_broken(p.field)
    )
    return out


def _worker_problems(workers: WorkerSpec, kind: str, out: list[SpecProblem]) -> None:
    out.extend(machine_problems(workers, kind))
    add_problem(out, num_slices_problem(workers.num_slices))
    if workers.max_slice_restarts is not None:
        add_problem(
            out,
            int_problem(
                workers.max_slice_restarts,
                f"{WORKERS_PATH}.maxSliceRestarts",
                minimum=0,
                fix="set max_slice_restarts to 0 or more, or leave it unset (the CRD default is 1)",
            ),
        )
    if workers.termination_grace_period_seconds is not None:
        add_problem(
            out,
            int_problem(
                workers.termination_grace_period_seconds,
                f"{WORKERS_PATH}.terminationGracePeriodSeconds",
                minimum=0,
                maximum=INT64_MAX,
                fix="set termination_grace_period_seconds to a number of seconds, 0 or more",
            ),
        )
    if workers.priority_class_name is not None:
        pcn = workers.priority_class_name
        reason = dns1123_subdomain_error(pcn) if isinstance(pcn, str) else "must be a string"
        if reason:
            out.append(
                SpecProblem(
                    f"{WORKERS_PATH}.priorityClassName",
                    f"{pcn!r} {reason}",
                    "use the name of an existing PriorityClass (lowercase, e.g. 'high-priority')",
                )
            )
    if workers.node_selector is not None:
        path = f"{WORKERS_PATH}.nodeSelector"
        string_map_problems(workers.node_selector, path, out, label_values=True)
        if isinstance(workers.node_selector, Mapping):
            shape = tpu.slice_shape(workers.type, workers.topology)
            derived = {TOPOLOGY_LABEL: workers.topology}
            if shape is not None:
                derived[ACCELERATOR_LABEL] = shape.gke_accelerator
            for key, expected in derived.items():
                value = workers.node_selector.get(key)
                if value is not None and value != expected:
                    out.append(
                        SpecProblem(
                            key_path(path, key),
                            f"{value!r} contradicts the {expected!r} derived from type and topology",
                            f"remove {key!r} from the node selector (the controller sets it)",
                        )
                    )


def _size_problems(spec: PathwaysJobSpec, kind: str, out: list[SpecProblem]) -> None:
    """Counts JobSet and the controller compute in int32 (jobset_webhook.go, pathwaysjob_controller.go)."""
    workers = spec.workers
    shape = tpu.slice_shape(workers.type, workers.topology, kind)
    if shape is None or not is_int(workers.num_slices) or not 1 <= workers.num_slices <= INT32_MAX:
        return
    vms = shape.vms_per_slice
    if workers.num_slices * vms > INT32_MAX:
        out.append(
            SpecProblem(
                f"{WORKERS_PATH}.numSlices",
                f"{workers.num_slices} slices x {vms} VMs = {workers.num_slices * vms} worker pods; "
                f"JobSet rejects a replicated job whose replicas x parallelism exceeds {INT32_MAX} "
                "(jobset_webhook.go)",
                f"use at most {INT32_MAX // vms} slices",
            )
        )
    restarts = workers.max_slice_restarts
    elastic = spec.controller.elastic_slices
    if (
        isinstance(restarts, int)
        and isinstance(elastic, int)
        and elastic > 0
        and restarts > 0
        and vms * restarts > INT32_MAX
    ):
        out.append(
            SpecProblem(
                f"{WORKERS_PATH}.maxSliceRestarts",
                f"{vms} VMs x {restarts} = {vms * restarts} does not fit the worker Jobs' int32 backoffLimit "
                "(the controller computes it as VMs x maxSliceRestarts)",
                f"use at most {INT32_MAX // vms}",
            )
        )


# ---------------------------------------------------------------------- spec fields


def _spec_field_problems(spec: PathwaysJobSpec, out: list[SpecProblem]) -> None:
    if spec.max_restarts is not None:
        add_problem(
            out,
            int_problem(
                spec.max_restarts,
                "spec.maxRestarts",
                minimum=0,
                fix="set max_restarts to how many times the whole job may restart (0 or more)",
            ),
        )
    if spec.pathways_version is not None:
        version = spec.pathways_version
        reason = image_tag_error(version) if isinstance(version, str) else "must be a string"
        if reason:
            out.append(
                SpecProblem(
                    "spec.pathwaysVersion",
                    f"{version!r} is not a valid image tag: it {reason}",
                    "use a tag of the Pathways images such as 'jax-0.5.3', or leave it unset for 'latest'",
                )
            )
    add_problem(out, pathways_dir_problem(spec.pathways_dir))
