"""Structural validation of a PathwaysJob manifest against the CRD's ``openAPIV3Schema``.

The schema ships with the package (``data/pathwaysjob-crd-schema.json``, from pathways-job v0.1.4).
It is checked with ``jsonschema`` the way the API server checks a custom resource: types, enums,
required fields, ``int32``/``int64`` ranges, int-or-string fields, duplicate keys of ``map``/``set``
lists, and fields the server would prune silently (unknown fields outside
``x-kubernetes-preserve-unknown-fields``), down into the pod template. ``jsonschema`` is imported
only when a manifest is checked.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from importlib import resources
from typing import Any

from airflow_provider_pathways.gke.spec.checks import INT32_MAX, INT64_MAX, SpecProblem

__all__ = ["crd_schema", "field_path", "structural_problems"]

_SCHEMA_FILE = "data/pathwaysjob-crd-schema.json"
_INT_RANGES = {"int32": (-(2**31), INT32_MAX), "int64": (-(2**63), INT64_MAX)}
_TYPE_WORDS = {
    "array": "a list",
    "object": "a mapping",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
}
_WORD_FIXES = {
    "array": "write it as a YAML list",
    "object": "write it as key: value pairs",
    "string": "quote the value",
    "integer": "write a whole number without quotes",
    "number": "write a number without quotes",
    "boolean": "write true or false without quotes",
}


@functools.lru_cache(maxsize=1)
def crd_schema() -> dict[str, Any]:
    """The PathwaysJob ``openAPIV3Schema`` bundled with the package."""
    text = resources.files("airflow_provider_pathways").joinpath(_SCHEMA_FILE).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def field_path(parts: Any) -> str:
    """``["spec", "workers", 0, "type"]`` -> ``spec.workers[0].type``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<document>"


def _error_path(error: Any) -> str:
    """The error's instance path, with keys of free-form maps (``additionalProperties``) as ``['k']``."""
    instance = list(error.absolute_path)
    schema_path = list(error.absolute_schema_path)
    out = ""
    i = j = 0
    while i < len(instance) and j < len(schema_path):
        step = schema_path[j]
        if step == "properties" and j + 1 < len(schema_path):
            out += f".{instance[i]}" if out else str(instance[i])
            i, j = i + 1, j + 2
        elif step == "items":
            out += f"[{instance[i]}]"
            i, j = i + 1, j + 1
        elif step == "additionalProperties":
            out += f"[{instance[i]!r}]"
            i, j = i + 1, j + 1
        else:
            j += 1
    for part in instance[i:]:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<document>"


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "mapping"
    return type(value).__name__


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _key_of(item: Any, keys: list[str]) -> tuple[Any, ...] | None:
    if not isinstance(item, Mapping):
        return None
    try:
        return tuple(json.dumps(item.get(k), sort_keys=True) for k in keys)
    except (TypeError, ValueError):
        return None


@functools.lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema

    base = jsonschema.Draft7Validator
    ValidationError = jsonschema.ValidationError
    stock_properties = base.VALIDATORS["properties"]

    def properties(validator: Any, props: Any, instance: Any, schema: Any) -> Iterator[Any]:
        yield from stock_properties(validator, props, instance, schema)
        if not validator.is_type(instance, "object"):
            return
        if schema.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in schema:
            return
        for key in instance:
            if key not in props:
                yield ValidationError(f"unknown field {key!r}", validator="unknown", path=[key])

    def fmt(validator: Any, format_: Any, instance: Any, schema: Any) -> Iterator[Any]:
        bounds = _INT_RANGES.get(format_)
        if bounds and validator.is_type(instance, "integer") and not bounds[0] <= instance <= bounds[1]:
            yield ValidationError(f"{instance} is out of the {format_} range", validator="format")

    def list_type(validator: Any, kind: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if kind not in ("map", "set") or not validator.is_type(instance, "array"):
            return
        keys = schema.get("x-kubernetes-list-map-keys") or [] if kind == "map" else []
        seen: dict[Any, int] = {}
        for index, item in enumerate(instance):
            marker: Any = None
            if kind == "map":
                marker = _key_of(item, keys)
            else:
                try:
                    marker = json.dumps(item, sort_keys=True)
                except (TypeError, ValueError):
                    marker = None
            if marker is None:
                continue
            if marker in seen:
                what = ", ".join(f"{k}={item.get(k)!r}" for k in keys) if keys else repr(item)
                yield ValidationError(
                    f"duplicates entry [{seen[marker]}] ({what})",
                    validator="duplicate",
                    path=[index, keys[0]] if len(keys) == 1 else [index],
                )
            else:
                seen[marker] = index

    extended = jsonschema.validators.extend(
        base,
        {"properties": properties, "format": fmt, "x-kubernetes-list-type": list_type},
    )
    return extended(crd_schema())


def _problem(error: Any) -> SpecProblem:
    path = _error_path(error)
    kind = error.validator
    value = error.instance
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if kind == "required":
        missing = str(error.message).split("'")[1] if "'" in str(error.message) else str(error.message)
        child = f"{path}.{missing}" if path != "<document>" else missing
        return SpecProblem(child, "is missing", f"set {missing}; the CRD requires it")
    if kind == "type":
        expected = schema.get("type")
        word = _TYPE_WORDS.get(str(expected), str(expected))
        fix = _WORD_FIXES.get(str(expected), "use the type the CRD declares")
        if expected == "array" and isinstance(value, str) and path.rsplit(".", 1)[-1] in ("command", "args"):
            fix = f"write a list of words, e.g. {value.split()!r}"
        return SpecProblem(path, f"must be {word}, not {_type_name(value)} {_shown(value)}", fix)
    if kind == "anyOf" and schema.get("x-kubernetes-int-or-string"):
        return SpecProblem(
            path,
            f"must be an integer or a string, not {_type_name(value)} {_shown(value)}",
            "write a number such as 8 or a quantity string such as '8Gi'",
        )
    if kind == "enum":
        allowed = ", ".join(str(v) for v in error.validator_value)
        return SpecProblem(path, f"{_shown(value)} is not one of {allowed}", f"use one of: {allowed}")
    if kind == "unknown":
        return SpecProblem(
            path,
            "is not a field the API server knows here; it would be dropped without an error",
            "check the spelling (Kubernetes field names are camelCase) or remove it",
        )
    if kind == "format":
        low, high = _INT_RANGES[str(error.validator_value)]
        return SpecProblem(
            path, f"{value} does not fit in {error.validator_value}", f"use a value from {low} to {high}"
        )
    if kind == "duplicate":
        return SpecProblem(path, str(error.message), "give each entry a distinct key, or merge them")
    if kind in ("maxItems", "minItems", "maxLength", "minLength", "minimum", "maximum"):
        return SpecProblem(path, f"{_shown(value)}: {error.message}", f"respect the CRD's {kind} limit")
    if kind == "pattern":
        return SpecProblem(
            path, f"{_shown(value)} does not match {error.validator_value!r}", "use a value of that form"
        )
    return SpecProblem(path, str(error.message), "fix the value to match the PathwaysJob CRD")


def _sort_key(path: list[Any]) -> list[tuple[int, Any]]:
    """Document order for paths: keys as they come (by name), list indexes numerically."""
    return [(1, part) if isinstance(part, int) else (0, str(part)) for part in path]


def structural_problems(manifest: Mapping[str, Any]) -> list[SpecProblem]:
    """Every way ``manifest`` breaks the CRD schema, in document order; deepest problem per branch.

    Only the most specific error of a branch is reported (a wrong type inside a container, not
    also "the container is invalid").
    """
    validator = _validator()
    errors: list[Any] = []
    for error in validator.iter_errors(manifest):
        if error.validator == "anyOf" and not (error.schema or {}).get("x-kubernetes-int-or-string"):
            errors.extend(error.context or [])
        else:
            errors.append(error)
    errors.sort(key=lambda e: (_sort_key(list(e.absolute_path)), e.validator != "type"))
    out: list[SpecProblem] = []
    seen: set[tuple[str, str]] = set()
    for error in errors:
        problem = _problem(error)
        key = (problem.field, problem.problem)
        if key not in seen:
            seen.add(key)
            out.append(problem)
    return out
