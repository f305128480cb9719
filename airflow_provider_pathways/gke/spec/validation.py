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
from typing import TYPE_CHECKING

from airflow_provider_pathways.gke import tpu
from airflow_provider_pathways.gke.spec import k8s
from airflow_provider_pathways.gke.spec.constants import (
    INT32_MAX,
    INT64_MAX,
)
from airflow_provider_pathways.gke.spec.problems import SpecProblem

__all__ = ["KINDS", "spec_problems"]
if TYPE_CHECKING:
    from airflow_provider_pathways.gke.spec.model import PathwaysJobSpec
    from airflow_provider_pathways.gke.spec.sections import WorkerSpec
from airflow_provider_pathways.gke.spec.controller_rules import (
    component_problems,
    controller_problems,
    pathways_dir_problem,
)
from airflow_provider_pathways.gke.spec.machine_rules import (
    ACCELERATOR_LABEL,
    TOPOLOGY_LABEL,
    machine_problems,
    num_slices_problem,
)
from airflow_provider_pathways.gke.spec.name_rules import metadata_problems
from airflow_provider_pathways.gke.spec.value_checks import (
    WORKERS_PATH,
    add_problem,
    int_problem,
    is_int,
    key_path,
    string_map_problems,
)

PATHWAYSJOB = tpu.PATHWAYSJOB_KIND
JOBSET = tpu.JOBSET_KIND
KINDS: tuple[str, ...] = (PATHWAYSJOB, JOBSET)


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
        reason = k8s.dns1123_subdomain_error(pcn) if isinstance(pcn, str) else "must be a string"
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
        reason = k8s.image_tag_error(version) if isinstance(version, str) else "must be a string"
        if reason:
            out.append(
                SpecProblem(
                    "spec.pathwaysVersion",
                    f"{version!r} is not a valid image tag: it {reason}",
                    "use a tag of the Pathways images such as 'jax-0.5.3', or leave it unset for 'latest'",
                )
            )
    add_problem(out, pathways_dir_problem(spec.pathways_dir))
