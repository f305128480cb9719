"""Template fields as a DAG author gives them, before and after rendering.

A template field may hold a Jinja string or an ``XComArg`` (the output of another task) until the
task runs, so an operator's ``__init__`` stores it as given and checks only literal values; every
value is checked again in ``execute()``, after rendering and before anything is submitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def unrendered(value: object) -> bool:
    """``value`` is only known once the task renders it: a Jinja string or an ``XComArg``."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    # XComArg and its kinds (plain, mapped, zipped) resolve at run time; duck-typed so that the
    # check needs no Airflow import and holds for every Airflow version's class.
    return callable(getattr(value, "resolve", None)) and callable(getattr(value, "iter_references", None))


def rendered_mapping(value: Any, field: str) -> dict[str, Any]:
    """A rendered mapping field as a plain dict (None: empty); TypeError naming ``field`` otherwise."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{field}: expected a mapping of names to values, got {type(value).__name__}")
    return dict(value)
