"""What a test needs from the machine, and what happens when that is missing.

Run by hand, a test whose environment is missing (not root, not Debian, no Chromium, an optional
package) is skipped with the reason. Under ``make test`` (``PATHWAYS_SANDBOX_REQUIRED=1``) everything
must be there: the test fails with the same reason instead, so that nothing quietly does not run.
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType
from typing import NoReturn

import pytest

REQUIRED_ENV = "PATHWAYS_SANDBOX_REQUIRED"


def sandbox_required() -> bool:
    """``make test`` runs the tests: every environment they need must be there."""
    return os.environ.get(REQUIRED_ENV, "") not in ("", "0")


def missing(reason: str) -> NoReturn:
    """Skip the test for ``reason``, or fail it under ``PATHWAYS_SANDBOX_REQUIRED=1``."""
    if sandbox_required():
        pytest.fail(f"{reason} ({REQUIRED_ENV}=1: this test must run, not be skipped)", pytrace=False)
    pytest.skip(reason)


def require(condition: object, reason: str) -> None:
    """``missing(reason)`` unless ``condition`` holds."""
    if not condition:
        missing(reason)


def require_root(reason: str) -> None:
    require(os.geteuid() == 0, reason)


def require_debian(reason: str) -> None:
    """Debian's packages: ``apt-get`` to install them, or the Slurm daemons already installed."""
    require(shutil.which("apt-get") or shutil.which("slurmctld"), reason)


def require_module(name: str, reason: str) -> ModuleType:
    """Import ``name`` (what ``pytest.importorskip`` does, but failing under ``make test``)."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        missing(f"{reason} ({err})")
