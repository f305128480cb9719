"""What the spec's rules are built from, and the rules of a job's name and metadata:

- :class:`PathwaysSpecError` lists every :class:`SpecProblem`, each with its field path and fix;
- Kubernetes names, labels, image references and limits: each check returns a reason or None;
- single values every rule uses: integers in range, string maps, field paths;
- how long a job's name may be (the names JobSet derives from it) and what its metadata may hold.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_pathways.gke import tpu
from airflow_provider_pathways.gke.objects import (
    COORDINATOR_LABEL,
    MAX_JOB_NAME_LENGTH,
    MAX_LABEL_VALUE,
    WORKER_REPLICATED_JOB,
    coordinator_label_value,
    head_pod_name,
)

if TYPE_CHECKING:
    from airflow_provider_pathways.gke.spec.model import PathwaysJobSpec


@dataclass(frozen=True)
class SpecProblem:
    """One problem in a spec: the field path (e.g. ``spec.workers[0].topology``), what is wrong, the fix."""

    field: str
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}. Fix: {self.fix}"


class PathwaysSpecError(ValueError):
    """A spec that cannot be loaded, rendered or submitted; ``problems`` lists every problem found."""

    def __init__(self, problems: Iterable[SpecProblem]) -> None:
        self.problems: list[SpecProblem] = list(problems)
        count = len(self.problems)
        lines = [f"invalid PathwaysJob spec: {count} problem{'' if count == 1 else 's'}"]
        lines.extend(f"- {problem}" for problem in self.problems)
        super().__init__("\n".join(lines))

    def __reduce__(self) -> tuple[type[PathwaysSpecError], tuple[list[SpecProblem]]]:
        return self.__class__, (self.problems,)


#: Kubernetes limit for all annotation keys and values of one object together (TotalAnnotationSizeLimitB).
MAX_ANNOTATIONS_BYTES = 256 * 1024
#: Length of the random suffix Kubernetes appends to generated pod names ("-" and 5 characters).
POD_NAME_SUFFIX = 6
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
#: A label value, empty or the name part of a qualified name (apimachinery IsValidLabelValue).
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_IMAGE_REFERENCE = re.compile(
    rf"^(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?/)?"
    rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


def dns1123_label_error(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 label (lowercase alnum and '-', alnum at both ends, <= 63)."""
    if len(value) > MAX_LABEL_VALUE:
        return f"is {len(value)} characters, more than {MAX_LABEL_VALUE}"
    if not _DNS1123_LABEL.fullmatch(value):
        return "must consist of lowercase letters, digits and '-', and start and end with a letter or digit"
    return None


def dns1035_label_error(value: str, *, check_length: bool = True) -> str | None:
    """Why ``value`` is not a DNS-1035 label (like DNS-1123 but starting with a letter)."""
    if check_length and len(value) > MAX_LABEL_VALUE:
        return f"is {len(value)} characters, more than {MAX_LABEL_VALUE}"
    if not _DNS1035_LABEL.fullmatch(value):
        return (
            "must consist of lowercase letters, digits and '-', start with a letter and end with "
            "a letter or digit"
        )
    return None


def dns1123_subdomain_error(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 subdomain (dot-separated DNS-1123 labels, <= 253)."""
    if not value or len(value) > 253:
        return "must be 1 to 253 characters"
    if any(_DNS1123_LABEL.fullmatch(part) is None for part in value.split(".")):
        return "must be lowercase letters, digits, '-' and '.', each dot-separated part alnum at both ends"
    return None


def label_key_error(key: object) -> str | None:
    """Why ``key`` is not a valid label or annotation key (``[prefix/]name``)."""
    if not isinstance(key, str) or not key:
        return "must be a non-empty string"
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return "has an empty prefix before '/'"
    if prefix and (reason := dns1123_subdomain_error(prefix)):
        return f"has an invalid prefix {prefix!r}: it {reason}"
    if len(name) > MAX_LABEL_VALUE:
        return f"has a name part of {len(name)} characters, more than {MAX_LABEL_VALUE}"
    if not name or not _LABEL_VALUE.fullmatch(name):
        return "must have a name part of letters, digits, '-', '_' and '.', starting and ending alnum"
    return None


def label_value_error(value: object) -> str | None:
    """Why ``value`` is not a valid label value (string, <= 63, alnum at both ends)."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__} {value!r}"
    if len(value) > MAX_LABEL_VALUE:
        return f"is {len(value)} characters, more than {MAX_LABEL_VALUE}"
    if not _LABEL_VALUE.fullmatch(value):
        return "must be empty or letters, digits, '-', '_' and '.', starting and ending alnum"
    return None


def image_tag_error(tag: str) -> str | None:
    """Why ``tag`` is not a valid container image tag."""
    if not _IMAGE_TAG.fullmatch(tag):
        return "must be 1 to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'"
    return None


def image_reference_error(image: str) -> str | None:
    """Why ``image`` is not a valid container image reference (``[registry/]repo[:tag][@digest]``)."""
    if not image:
        return "is empty"
    if not _IMAGE_REFERENCE.fullmatch(image):
        return "is not a valid image reference such as 'us-docker.pkg.dev/project/repo/image:tag'"
    return None


def suggest_name(value: str) -> str:
    """A DNS-1035 label close to ``value`` (lowercased, invalid characters replaced by '-')."""
    name = re.sub(r"[^a-z0-9-]+", "-", value.lower())
    name = re.sub(r"-{2,}", "-", name).lstrip("-0123456789").rstrip("-")
    return name or "pathways-job"


WORKERS_PATH = "spec.workers[0]"


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def int_problem(
    value: object, path: str, *, minimum: int, maximum: int = INT32_MAX, fix: str
) -> SpecProblem | None:
    if not is_int(value):
        return SpecProblem(path, f"must be an integer, not {type(value).__name__} {value!r}", fix)
    assert isinstance(value, int)
    if value < minimum:
        return SpecProblem(path, f"is {value}; it must be {minimum} or more", fix)
    if value > maximum:
        return SpecProblem(path, f"is {value}; it must be at most {maximum}", fix)
    return None


def add_problem(out: list[SpecProblem], problem: SpecProblem | None) -> None:
    if problem is not None:
        out.append(problem)


def key_path(path: str, key: object) -> str:
    return f"{path}[{key!r}]"


def string_map_problems(value: object, path: str, out: list[SpecProblem], *, label_values: bool) -> None:
    """Problems of a labels / annotations / nodeSelector mapping."""
    if not isinstance(value, Mapping):
        out.append(
            SpecProblem(path, f"must be a mapping, not {type(value).__name__}", "write key: value pairs")
        )
        return
    for key, item in value.items():
        if reason := label_key_error(key):
            out.append(
                SpecProblem(
                    key_path(path, key),
                    f"key {key!r} {reason}",
                    "use a key like 'example.com/name' or 'name' (name part: <= 63 alnum, '-', '_', '.')",
                )
            )
        if label_values:
            if reason := label_value_error(item):
                out.append(
                    SpecProblem(
                        key_path(path, key),
                        f"value {item!r} {reason}",
                        "use a string of <= 63 letters, digits, '-', '_' and '.' (quote numbers in YAML)",
                    )
                )
        elif not isinstance(item, str):
            out.append(
                SpecProblem(
                    key_path(path, key),
                    f"value must be a string, not {type(item).__name__} {item!r}",
                    "quote the value (annotation values are strings)",
                )
            )
    if not label_values and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        total = sum(len(k) + len(v) for k, v in value.items())
        if total > MAX_ANNOTATIONS_BYTES:
            out.append(
                SpecProblem(
                    path,
                    f"keys and values add up to {total} bytes, more than the {MAX_ANNOTATIONS_BYTES} "
                    "Kubernetes allows",
                    "keep large data out of annotations (use a ConfigMap or the job's scratch location)",
                )
            )


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
    head = head_pod_name("")
    worker = f"-{WORKER_REPLICATED_JOB}-{slices - 1}-{vms - 1}"
    return head if len(head) >= len(worker) else worker


def max_name_length(spec: PathwaysJobSpec) -> int:
    """Longest job name JobSet accepts: 22 (the coordinator label), or less for huge pod names."""
    by_pods = MAX_LABEL_VALUE - POD_NAME_SUFFIX - len(_longest_derived_suffix(spec))
    return min(MAX_JOB_NAME_LENGTH, by_pods)


def _name_too_long(name: str, limit: int, spec: PathwaysJobSpec, kind: str) -> SpecProblem:
    suggestion = name[:limit].rstrip("-")
    coordinator = coordinator_label_value(name)
    if len(coordinator) > MAX_LABEL_VALUE:
        why = (
            f"JobSet writes '<name>-pathways-head-0-0.<name>' ({len(coordinator)} characters here) into "
            f"the label {COORDINATOR_LABEL} of every Job and pod, and a label value has at most "
            f"{MAX_LABEL_VALUE} characters"
        )
        consequence = (
            "JobSet >= v0.11 refuses the JobSet, and the PathwaysJob controller then fails in a retry loop"
            if kind == tpu.PATHWAYSJOB_KIND
            else "JobSet >= v0.11 refuses the JobSet at admission"
        )
    else:
        derived = f"{name}{_longest_derived_suffix(spec)}-xxxxx"
        why = f"the pod name {derived!r} would be {len(derived)} characters, more than {MAX_LABEL_VALUE}"
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
        if reason := dns1035_label_error(name, check_length=False):
            out.append(
                SpecProblem(
                    "metadata.name", f"{name!r} {reason}", f"use a name such as {suggest_name(name)!r}"
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
        elif reason := dns1123_label_error(namespace):
            out.append(
                SpecProblem(
                    "metadata.namespace",
                    f"{namespace!r} {reason}",
                    f"use an existing namespace's name, such as {suggest_name(namespace)!r}",
                )
            )
    if spec.labels is not None:
        string_map_problems(spec.labels, "metadata.labels", out, label_values=True)
    if spec.annotations is not None:
        string_map_problems(spec.annotations, "metadata.annotations", out, label_values=False)
