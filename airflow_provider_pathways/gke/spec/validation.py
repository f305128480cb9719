"""Checks run before a job is sent: each problem names its field path and how to fix it.

Structural checks (the CRD's schema, ``spec/schema.py``) come first; the semantic checks below
then skip fields that are already reported. Rules that depend on what is submitted take a
``kind``: ``PathwaysJob`` (the controller renders the JobSet) or ``JobSet`` (rendered here).

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

from airflow_provider_pathways.gke import naming, tpu
from airflow_provider_pathways.gke.spec import k8s
from airflow_provider_pathways.gke.spec.constants import (
    COMPONENT_TYPES,
    DEPLOYMENT_MODES,
    HEAD_REPLICATED_JOB,
    INT32_MAX,
    INT64_MAX,
    MAX_CUSTOM_COMPONENTS,
    POD_NAME_SUFFIX,
    PROXY_CONTAINER,
    RM_CONTAINER,
    WORKER_REPLICATED_JOB,
)
from airflow_provider_pathways.gke.spec.problems import SpecProblem

if TYPE_CHECKING:
    from airflow_provider_pathways.gke.spec.model import ControllerSpec, PathwaysJobSpec, WorkerSpec

__all__ = [
    "KINDS",
    "derivation_problems",
    "device_type_problem",
    "machine_problems",
    "max_name_length",
    "missing_name_problem",
    "spec_problems",
]

PATHWAYSJOB = tpu.PATHWAYSJOB_KIND
JOBSET = tpu.JOBSET_KIND
KINDS: tuple[str, ...] = (PATHWAYSJOB, JOBSET)
_WORKERS = "spec.workers[0]"
_CONTROLLER = "spec.controller"
_TEMPLATE = "spec.controller.template"
_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
_JOB_RESTART_POLICIES = ("Never", "OnFailure")


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind: {kind!r} must be 'PathwaysJob' or 'JobSet'")
    return kind


def spec_problems(spec: PathwaysJobSpec, kind: str = PATHWAYSJOB) -> list[SpecProblem]:
    """Every problem in ``spec`` for a job of ``kind``: structural ones first, then semantic ones.

    A semantic problem about a field that already has a structural problem replaces it (its
    message is more specific); one about a field inside a structurally broken value is dropped.
    """
    from airflow_provider_pathways.gke.spec.schema import structural_problems

    _check_kind(kind)
    structural = structural_problems(spec.to_pathwaysjob())
    if kind == JOBSET:
        # The CRD's machine-type enum binds the PathwaysJob controller only; GKE's table decides here.
        structural = [p for p in structural if p.field != f"{_WORKERS}.type"]
    semantic: list[SpecProblem] = []
    _metadata_problems(spec, kind, semantic)
    _worker_problems(spec.workers, kind, semantic)
    _spec_field_problems(spec, semantic)
    _controller_problems(spec.controller, spec.workers, semantic)
    _component_problems(spec.custom_components, semantic)
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


# ---------------------------------------------------------------------- shared helpers


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_problem(
    value: object, path: str, *, minimum: int, maximum: int = INT32_MAX, fix: str
) -> SpecProblem | None:
    if not _is_int(value):
        return SpecProblem(path, f"must be an integer, not {type(value).__name__} {value!r}", fix)
    assert isinstance(value, int)
    if value < minimum:
        return SpecProblem(path, f"is {value}; it must be {minimum} or more", fix)
    if value > maximum:
        return SpecProblem(path, f"is {value}; it must be at most {maximum}", fix)
    return None


def _add(out: list[SpecProblem], problem: SpecProblem | None) -> None:
    if problem is not None:
        out.append(problem)


def _key_path(path: str, key: object) -> str:
    return f"{path}[{key!r}]"


def _string_map_problems(value: object, path: str, out: list[SpecProblem], *, label_values: bool) -> None:
    """Problems of a labels / annotations / nodeSelector mapping."""
    if not isinstance(value, Mapping):
        out.append(
            SpecProblem(path, f"must be a mapping, not {type(value).__name__}", "write key: value pairs")
        )
        return
    for key, item in value.items():
        if reason := k8s.label_key_error(key):
            out.append(
                SpecProblem(
                    _key_path(path, key),
                    f"key {key!r} {reason}",
                    "use a key like 'example.com/name' or 'name' (name part: <= 63 alnum, '-', '_', '.')",
                )
            )
        if label_values:
            if reason := k8s.label_value_error(item):
                out.append(
                    SpecProblem(
                        _key_path(path, key),
                        f"value {item!r} {reason}",
                        "use a string of <= 63 letters, digits, '-', '_' and '.' (quote numbers in YAML)",
                    )
                )
        elif not isinstance(item, str):
            out.append(
                SpecProblem(
                    _key_path(path, key),
                    f"value must be a string, not {type(item).__name__} {item!r}",
                    "quote the value (annotation values are strings)",
                )
            )
    if not label_values and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        total = sum(len(k) + len(v) for k, v in value.items())
        if total > k8s.MAX_ANNOTATIONS_BYTES:
            out.append(
                SpecProblem(
                    path,
                    f"keys and values add up to {total} bytes, more than the {k8s.MAX_ANNOTATIONS_BYTES} "
                    "Kubernetes allows",
                    "keep large data out of annotations (use a ConfigMap or the job's scratch location)",
                )
            )


# ---------------------------------------------------------------------- metadata


def missing_name_problem() -> SpecProblem:
    """The problem reported when the job has no name."""
    return SpecProblem(
        "metadata.name",
        "is missing",
        "set name= to a lowercase name starting with a letter, such as 'llama-train'",
    )


def _slices_and_vms(spec: PathwaysJobSpec) -> tuple[int, int]:
    """numSlices and VMs per slice where they are usable, else 1."""
    slices = spec.workers.num_slices
    slices = slices if _is_int(slices) and 1 <= slices <= INT32_MAX else 1
    shape = tpu.slice_shape(spec.workers.type, spec.workers.topology)
    return slices, shape.vms_per_slice if shape is not None else 1


def _longest_derived_suffix(spec: PathwaysJobSpec) -> str:
    """The longest of ``-pathways-head-0-0`` and ``-worker-<lastSlice>-<lastVm>`` for this spec."""
    slices, vms = _slices_and_vms(spec)
    head = f"-{HEAD_REPLICATED_JOB}-0-0"
    worker = f"-{WORKER_REPLICATED_JOB}-{slices - 1}-{vms - 1}"
    return head if len(head) >= len(worker) else worker


def max_name_length(spec: PathwaysJobSpec) -> int:
    """Longest job name JobSet accepts: 22 (the coordinator label), or less for huge pod names."""
    by_pods = k8s.MAX_NAME - POD_NAME_SUFFIX - len(_longest_derived_suffix(spec))
    return min(naming.MAX_JOB_NAME_LENGTH, by_pods)


def _name_too_long(name: str, limit: int, spec: PathwaysJobSpec, kind: str) -> SpecProblem:
    suggestion = name[:limit].rstrip("-")
    coordinator = naming.coordinator_label_value(name)
    if len(coordinator) > naming.MAX_LABEL_VALUE:
        why = (
            f"JobSet writes '<name>-pathways-head-0-0.<name>' ({len(coordinator)} characters here) into "
            f"the label {naming.COORDINATOR_LABEL} of every Job and pod, and a label value has at most "
            f"{naming.MAX_LABEL_VALUE} characters"
        )
        consequence = (
            "JobSet >= v0.11 refuses the JobSet, and the PathwaysJob controller then fails in a retry loop"
            if kind == PATHWAYSJOB
            else "JobSet >= v0.11 refuses the JobSet at admission"
        )
    else:
        derived = f"{name}{_longest_derived_suffix(spec)}-xxxxx"
        why = f"the pod name {derived!r} would be {len(derived)} characters, more than {k8s.MAX_NAME}"
        consequence = "JobSet refuses the JobSet at admission"
    return SpecProblem(
        "metadata.name",
        f"{name!r} is {len(name)} characters, more than {limit}: {why} ({consequence})",
        f"use a name of at most {limit} characters, such as {suggestion!r}",
    )


def _metadata_problems(spec: PathwaysJobSpec, kind: str, out: list[SpecProblem]) -> None:
    name = spec.name
    if name is None or name == "":
        out.append(missing_name_problem())
    elif not isinstance(name, str):
        out.append(
            SpecProblem("metadata.name", f"must be a string, not {type(name).__name__}", "set name= to a str")
        )
    else:
        if reason := k8s.dns1035_label_error(name, check_length=False):
            out.append(
                SpecProblem(
                    "metadata.name", f"{name!r} {reason}", f"use a name such as {k8s.suggest_name(name)!r}"
                )
            )
        limit = max_name_length(spec)
        if len(name) > limit:
            out.append(_name_too_long(name, limit, spec, kind))
    if spec.namespace is not None:
        namespace = spec.namespace
        if not isinstance(namespace, str):
            out.append(
                SpecProblem("metadata.namespace", "must be a string", "set namespace= to a str or None")
            )
        elif reason := k8s.dns1123_label_error(namespace):
            out.append(
                SpecProblem(
                    "metadata.namespace",
                    f"{namespace!r} {reason}",
                    f"use an existing namespace's name, such as {k8s.suggest_name(namespace)!r}",
                )
            )
    if spec.labels is not None:
        _string_map_problems(spec.labels, "metadata.labels", out, label_values=True)
    if spec.annotations is not None:
        _string_map_problems(spec.annotations, "metadata.annotations", out, label_values=False)


# ---------------------------------------------------------------------- workers


def _grouped_device_types(first: str = "", kind: str = PATHWAYSJOB) -> str:
    """Accepted device types by family, the family ``first`` leading; long families are shortened."""
    groups: dict[str, list[str]] = {}
    names = tpu.pathways_device_types() if kind == PATHWAYSJOB else list(tpu.tpu_types())
    for device_type in names:
        prefix, _, size = device_type.rpartition("-")
        groups.setdefault(prefix, []).append(size)
    parts = []
    for prefix in sorted(groups, key=lambda p: p != first):
        names = [f"{prefix}-{size}" for size in sorted(groups[prefix], key=int)]
        if len(names) > 10:
            names = [*names[:8], f"... {names[-1]} ({len(names)} types)"]
        parts.append(", ".join(names))
    listing = "tpu.pathways_device_types()" if kind == PATHWAYSJOB else "tpu.tpu_types()"
    return "; ".join(parts) + f" (all: airflow_provider_pathways.{listing})"


def device_type_problem(device_type: object, row: tpu.TpuType | None, kind: str = PATHWAYSJOB) -> SpecProblem:
    """The problem for a TPU device type that is unknown or that a job of ``kind`` cannot run."""
    family = str(device_type).strip().lower().rpartition("-")[0]
    fix = f"use a device type a {kind} accepts: {_grouped_device_types(family, kind)}"
    if row is None:
        return SpecProblem(f"{_WORKERS}.type", f"unknown TPU device type {device_type!r}", fix)
    return SpecProblem(
        f"{_WORKERS}.type",
        f"TPU device type {device_type!r} is machine type {row.gce_machine_type!r} with topology "
        f"{row.topology!r}, which the PathwaysJob controller does not accept (pathwaysjob_controller.go "
        "ValidTpuTopologiesMap)",
        f"run it with kind='JobSet' (GKE has this slice), or {fix}",
    )


def _topology_listing(topologies: tuple[str, ...]) -> str:
    if len(topologies) <= 16:
        return ", ".join(topologies)
    return ", ".join(topologies[:12]) + f", ... {topologies[-1]} ({len(topologies)} topologies)"


def machine_problems(workers: WorkerSpec, kind: str = PATHWAYSJOB) -> list[SpecProblem]:
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
        elif kind == PATHWAYSJOB:
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
            if kind == PATHWAYSJOB
            else "GKE offers as a TPU node pool in this provider's table"
        )
        out.append(SpecProblem(f"{_WORKERS}.type", f"machine type {machine_type!r} is not one {where}", fix))
    try:
        tpu.parse_topology(topology)
    except ValueError:
        fix = (
            f"use one of: {_topology_listing(topologies)}"
            if topologies
            else "use a shape such as '4x4' or '2x2x2'"
        )
        out.append(SpecProblem(f"{_WORKERS}.topology", f"{topology!r} is not of the form AxB or AxBxC", fix))
        return out
    if topologies and topology not in topologies:
        if kind == PATHWAYSJOB:
            problem = (
                f"{topology!r} is not a topology the PathwaysJob controller accepts for {machine_type} "
                "(pathwaysjob_controller.go ValidTpuTopologiesMap; it would end in terminalState Failed)"
            )
            fix = f"use one of: {_topology_listing(topologies)}"
            if topology in tpu.topologies_for(machine_type, JOBSET):
                fix += f"; or run it with kind='JobSet' (GKE has {topology} node pools for {machine_type})"
        else:
            problem = f"{topology!r} is not a TPU slice GKE offers for machine type {machine_type}"
            fix = f"use one of: {_topology_listing(topologies)}"
            other = [m for m, t in tpu.gke_machine_types().items() if topology in t]
            if other:
                fix += f"; {topology} exists on {', '.join(sorted(other))}"
        out.append(SpecProblem(f"{_WORKERS}.topology", problem, fix))
    return out


def _num_slices_problem(num_slices: object) -> SpecProblem | None:
    return _int_problem(
        num_slices, f"{_WORKERS}.numSlices", minimum=1, fix="set num_slices to the number of TPU slices (1+)"
    )


def derivation_problems(spec: PathwaysJobSpec) -> list[SpecProblem]:
    """Problems that stop the JobSet from being rendered (name, slice shape, slice count, types)."""
    from airflow_provider_pathways.gke.spec.problems import PathwaysSpecError
    from airflow_provider_pathways.gke.spec.schema import structural_problems

    out: list[SpecProblem] = []
    if not isinstance(spec.name, str) or not spec.name:
        out.append(missing_name_problem())
    try:
        spec.slice_shape  # noqa: B018 - derived, or raises with the reason
    except PathwaysSpecError as err:
        out.extend(err.problems)
    _add(out, _num_slices_problem(spec.workers.num_slices))
    structural = [p for p in structural_problems(spec.to_pathwaysjob()) if p.field != f"{_WORKERS}.type"]
    out.extend(p for p in structural if p.field not in {q.field for q in out})
    return out


def _worker_problems(workers: WorkerSpec, kind: str, out: list[SpecProblem]) -> None:
    out.extend(machine_problems(workers, kind))
    _add(out, _num_slices_problem(workers.num_slices))
    if workers.max_slice_restarts is not None:
        _add(
            out,
            _int_problem(
                workers.max_slice_restarts,
                f"{_WORKERS}.maxSliceRestarts",
                minimum=0,
                fix="set max_slice_restarts to 0 or more, or leave it unset (the CRD default is 1)",
            ),
        )
    if workers.termination_grace_period_seconds is not None:
        _add(
            out,
            _int_problem(
                workers.termination_grace_period_seconds,
                f"{_WORKERS}.terminationGracePeriodSeconds",
                minimum=0,
                maximum=INT64_MAX,
                fix="set termination_grace_period_seconds to a number of seconds, 0 or more",
            ),
        )
    if workers.priority_class_name is not None:
        pcn = workers.priority_class_name
        reason = k8s.dns1123_subdomain_error(pcn) if isinstance(pcn, str) else "must be a string"
        if reason:
            out.append(
                SpecProblem(
                    f"{_WORKERS}.priorityClassName",
                    f"{pcn!r} {reason}",
                    "use the name of an existing PriorityClass (lowercase, e.g. 'high-priority')",
                )
            )
    if workers.node_selector is not None:
        path = f"{_WORKERS}.nodeSelector"
        _string_map_problems(workers.node_selector, path, out, label_values=True)
        if isinstance(workers.node_selector, Mapping):
            shape = tpu.slice_shape(workers.type, workers.topology)
            derived = {_TOPOLOGY_LABEL: workers.topology}
            if shape is not None:
                derived[_ACCELERATOR_LABEL] = shape.gke_accelerator
            for key, expected in derived.items():
                value = workers.node_selector.get(key)
                if value is not None and value != expected:
                    out.append(
                        SpecProblem(
                            _key_path(path, key),
                            f"{value!r} contradicts the {expected!r} derived from type and topology",
                            f"remove {key!r} from the node selector (the controller sets it)",
                        )
                    )


def _size_problems(spec: PathwaysJobSpec, kind: str, out: list[SpecProblem]) -> None:
    """Counts JobSet and the controller compute in int32 (jobset_webhook.go, pathwaysjob_controller.go)."""
    workers = spec.workers
    shape = tpu.slice_shape(workers.type, workers.topology, kind)
    if shape is None or not _is_int(workers.num_slices) or not 1 <= workers.num_slices <= INT32_MAX:
        return
    vms = shape.vms_per_slice
    if workers.num_slices * vms > INT32_MAX:
        out.append(
            SpecProblem(
                f"{_WORKERS}.numSlices",
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
                f"{_WORKERS}.maxSliceRestarts",
                f"{vms} VMs x {restarts} = {vms * restarts} does not fit the worker Jobs' int32 backoffLimit "
                "(the controller computes it as VMs x maxSliceRestarts)",
                f"use at most {INT32_MAX // vms}",
            )
        )


# ---------------------------------------------------------------------- spec fields


def _spec_field_problems(spec: PathwaysJobSpec, out: list[SpecProblem]) -> None:
    if spec.max_restarts is not None:
        _add(
            out,
            _int_problem(
                spec.max_restarts,
                "spec.maxRestarts",
                minimum=0,
                fix="set max_restarts to how many times the whole job may restart (0 or more)",
            ),
        )
    if spec.pathways_version is not None:
        version = spec.pathways_version
        reason = k8s.image_tag_error(version) if isinstance(version, str) else "must be a string"
        if reason:
            out.append(
                SpecProblem(
                    "spec.pathwaysVersion",
                    f"{version!r} is not a valid image tag: it {reason}",
                    "use a tag of the Pathways images such as 'jax-0.5.3', or leave it unset for 'latest'",
                )
            )
    _add(out, _pathways_dir_problem(spec.pathways_dir))


def _pathways_dir_problem(value: object) -> SpecProblem | None:
    path = "spec.pathwaysDir"
    fix = "set pathways_dir to a folder in an existing bucket, such as 'gs://my-bucket/pathways'"
    if value is None:
        return SpecProblem(path, "is missing; every Pathways component needs a gs:// scratch location", fix)
    if not isinstance(value, str) or not value.startswith("gs://"):
        return SpecProblem(path, f"{value!r} is not a gs:// URL", fix)
    bucket = value[len("gs://") :].split("/", 1)[0]
    if reason := k8s.bucket_name_error(bucket):
        return SpecProblem(path, f"bucket name {bucket!r} in {value!r} {reason}", fix)
    return None


# ---------------------------------------------------------------------- controller


def _controller_problems(controller: ControllerSpec, workers: WorkerSpec, out: list[SpecProblem]) -> None:
    if controller.deployment_mode not in DEPLOYMENT_MODES:
        out.append(
            SpecProblem(
                f"{_CONTROLLER}.deploymentMode",
                f"{controller.deployment_mode!r} is not a deployment mode",
                f"use one of: {', '.join(DEPLOYMENT_MODES)}",
            )
        )
    main = controller.main_container_name
    main_ok = isinstance(main, str) and k8s.dns1123_label_error(main) is None
    if not main_ok:
        out.append(
            SpecProblem(
                f"{_CONTROLLER}.mainContainerName",
                f"{main!r} is not a valid container name",
                "use the name of the template container that runs the JAX program (lowercase, e.g. 'main')",
            )
        )
    if controller.elastic_slices is not None:
        problem = _int_problem(
            controller.elastic_slices,
            f"{_CONTROLLER}.elasticSlices",
            minimum=0,
            fix="set elastic_slices to how many slices may be missing at once (0 or more)",
        )
        slices = workers.num_slices
        if problem is None and _is_int(slices) and slices >= 1 and controller.elastic_slices >= slices:
            problem = SpecProblem(
                f"{_CONTROLLER}.elasticSlices",
                f"is {controller.elastic_slices} but numSlices is {slices}: at least one slice must stay up",
                f"set elastic_slices to at most {slices - 1}, or raise num_slices",
            )
        _add(out, problem)
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
                _string_map_problems(
                    metadata["labels"], f"{_TEMPLATE}.metadata.labels", out, label_values=True
                )
            if metadata.get("annotations") is not None:
                _string_map_problems(
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
        if reason := k8s.dns1123_label_error(name):
            out.append(SpecProblem(f"{path}.name", f"{name!r} {reason}", f"use {k8s.suggest_name(name)!r}"))
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
    elif reason := k8s.image_reference_error(image):
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


def _component_problems(components: object, out: list[SpecProblem]) -> None:
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
        image = getattr(component, "image", None)
        if image is not None:
            reason = k8s.image_reference_error(image) if isinstance(image, str) else "must be a string"
            if reason:
                out.append(
                    SpecProblem(f"{cpath}.image", f"{image!r} {reason}", "use a pullable image reference")
                )
        elif ctype == "colocated_python_sidecar":
            out.append(
                SpecProblem(f"{cpath}.image", "is missing", "set the image of the colocated Python sidecar")
            )
        flags = getattr(component, "custom_flags", None)
        if flags is not None:
            if not isinstance(flags, list):
                out.append(SpecProblem(f"{cpath}.customFlags", "must be a list of strings", "pass a list"))
            else:
                for flag_index, flag in enumerate(flags):
                    if not isinstance(flag, str) or not flag.startswith("--"):
                        out.append(
                            SpecProblem(
                                f"{cpath}.customFlags[{flag_index}]",
                                f"{flag!r} is not a flag",
                                "write flags as '--name=value'",
                            )
                        )
        _env_problems(getattr(component, "custom_env", None), f"{cpath}.customEnv", out)
