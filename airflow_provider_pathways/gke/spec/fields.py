"""Reading a manifest's mappings into dataclass fields and back; problems are named by path."""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from airflow_provider_pathways.gke.spec.problems import PathwaysSpecError, SpecProblem

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
