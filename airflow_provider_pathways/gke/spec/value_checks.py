"""Checks of single values every rule uses: integers in range, string maps, field paths."""

from __future__ import annotations

from collections.abc import Mapping

from airflow_provider_pathways.gke.spec import k8s
from airflow_provider_pathways.gke.spec.constants import INT32_MAX
from airflow_provider_pathways.gke.spec.problems import SpecProblem

WORKERS_PATH = "spec.workers[0]"


# ---------------------------------------------------------------------- shared helpers


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
        if reason := k8s.label_key_error(key):
            out.append(
                SpecProblem(
                    key_path(path, key),
                    f"key {key!r} {reason}",
                    "use a key like 'example.com/name' or 'name' (name part: <= 63 alnum, '-', '_', '.')",
                )
            )
        if label_values:
            if reason := k8s.label_value_error(item):
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
        if total > k8s.MAX_ANNOTATIONS_BYTES:
            out.append(
                SpecProblem(
                    path,
                    f"keys and values add up to {total} bytes, more than the {k8s.MAX_ANNOTATIONS_BYTES} "
                    "Kubernetes allows",
                    "keep large data out of annotations (use a ConfigMap or the job's scratch location)",
                )
            )
