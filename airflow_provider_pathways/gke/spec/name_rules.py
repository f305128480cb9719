"""How long a job's name may be and what its metadata may hold (the names JobSet derives from it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_pathways.gke import naming, tpu
from airflow_provider_pathways.gke.spec import k8s
from airflow_provider_pathways.gke.spec.constants import (
    HEAD_REPLICATED_JOB,
    INT32_MAX,
    POD_NAME_SUFFIX,
    WORKER_REPLICATED_JOB,
)
from airflow_provider_pathways.gke.spec.problems import SpecProblem

if TYPE_CHECKING:
    from airflow_provider_pathways.gke.spec.model import PathwaysJobSpec
from airflow_provider_pathways.gke.spec.value_checks import is_int, string_map_problems

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
    slices = slices if is_int(slices) and 1 <= slices <= INT32_MAX else 1
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
            if kind == tpu.PATHWAYSJOB_KIND
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


def metadata_problems(spec: PathwaysJobSpec, kind: str, out: list[SpecProblem]) -> None:
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
        string_map_problems(spec.labels, "metadata.labels", out, label_values=True)
    if spec.annotations is not None:
        string_map_problems(spec.annotations, "metadata.annotations", out, label_values=False)
