"""Fixtures for the spec tests: the PathwaysJob CRD schema and the upstream samples."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
SAMPLES_DIR = REPO_ROOT / "tests" / "data" / "samples"
CRD_PATH = REPO_ROOT / "sandbox" / "kube" / "crds" / "pathwaysjobs.crd.yaml"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _strict(schema: Any) -> Any:
    """The schema with unknown fields forbidden wherever it lists properties (the API server prunes them)."""
    if isinstance(schema, dict):
        out = {key: _strict(value) for key, value in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@pytest.fixture(scope="session")
def load_sample() -> Callable[[str], Any]:
    """Load a file of tests/data/samples with yaml.safe_load."""

    def load(name: str) -> Any:
        return yaml.safe_load((SAMPLES_DIR / name).read_text())

    return load


@pytest.fixture(scope="session")
def crd_schema() -> dict[str, Any]:
    """The openAPIV3Schema of the PathwaysJob CRD, made strict about unknown fields."""
    crd = yaml.load(CRD_PATH.read_text(), Loader=_Loader)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return _strict(version["schema"]["openAPIV3Schema"])


@pytest.fixture(scope="session")
def assert_valid_manifest(crd_schema: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """Assert a manifest validates against the CRD schema, listing every schema error."""
    validator = jsonschema.Draft7Validator(crd_schema)

    def check(manifest: dict[str, Any]) -> None:
        errors = sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path))
        assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)

    return check
