"""TPU machine types, topologies and slice counts a job may ask for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_pathways.gke import tpu
from airflow_provider_pathways.gke.spec.problems import SpecProblem

if TYPE_CHECKING:
    from airflow_provider_pathways.gke.spec.model import PathwaysJobSpec
    from airflow_provider_pathways.gke.spec.sections import WorkerSpec
from airflow_provider_pathways.gke.spec.name_rules import missing_name_problem
from airflow_provider_pathways.gke.spec.value_checks import WORKERS_PATH, add_problem, int_problem

ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"


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
    from airflow_provider_pathways.gke.spec.problems import PathwaysSpecError
    from airflow_provider_pathways.gke.spec.schema import structural_problems

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
