"""Modules that moved: their former import paths keep working, with a DeprecationWarning.

One table; :func:`install` (called by the package's ``__init__``) puts a finder on
``sys.meta_path`` that answers only for the names in it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

_PACKAGE = "airflow_provider_pathways"

#: Former module → its new home.
MOVED: dict[str, str] = {
    "status": "gke.status",
    "tpu": "gke.tpu",
    "naming": "gke.naming",
    "resources": "gke.resources",
    "cluster_env": "slurm.cluster_env",
    "compilation_cache": "cache",
    **{
        f"spec.{name}": f"gke.spec.{name}"
        for name in ("constants", "jobset", "k8s", "model", "problems", "schema", "validation", "yaml_io")
    },
}

#: Former module split in several: its names are looked up in these, in order.
SPLIT: dict[str, tuple[str, ...]] = {
    "slurm_job": tuple(
        f"slurm.{name}"
        for name in (
            "states",
            "errors",
            "job",
            "outcome",
            "fields",
            "api_versions",
            "rest_codec",
            "rest_submit",
            "accounting",
            "scontrol",
            "submit",
            "directives",
            "options",
        )
    ),
}


def _warn(old: str, new: str) -> None:
    warnings.warn(
        f"{_PACKAGE}.{old} moved to {_PACKAGE}.{new}; import it from there",
        DeprecationWarning,
        stacklevel=3,
    )


class _SplitModule(ModuleType):
    def __init__(self, old: str, homes: tuple[str, ...]) -> None:
        super().__init__(f"{_PACKAGE}.{old}")
        self._old = old
        self._homes = homes

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for home in self._homes:
            module = importlib.import_module(f"{_PACKAGE}.{home}")
            if hasattr(module, name):
                _warn(f"{self._old}.{name}", f"{home}.{name}")
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")


class _MovedLoader(importlib.abc.Loader):
    def __init__(self, old: str) -> None:
        self._old = old

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        if self._old in SPLIT:
            return _SplitModule(self._old, SPLIT[self._old])
        _warn(self._old, MOVED[self._old])
        return importlib.import_module(f"{_PACKAGE}.{MOVED[self._old]}")

    def exec_module(self, module: ModuleType) -> None:
        return None


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        old = fullname.removeprefix(f"{_PACKAGE}.")
        if old == fullname or (old not in MOVED and old not in SPLIT):
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(old))


def install() -> None:
    """Answer imports of the former paths (once per interpreter)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
