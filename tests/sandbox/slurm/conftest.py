"""Fixtures for the Slurm sandbox tests: start it once per session with up.sh (idempotent, fast
when it already runs), then talk to the real daemons."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_sandbox_helpers import REPO_ROOT, UP_SCRIPT, SlurmSandbox

from sandbox import registry
from tests.support.environment import require_debian, require_root


@pytest.fixture(scope="session")
def slurm() -> SlurmSandbox:
    require_root("the Slurm sandbox needs root (it installs packages and starts daemons)")
    require_debian("the Slurm sandbox needs Debian (apt-get)")
    registry.add_user("slurm")  # a make test/demo ending meanwhile leaves the cluster running
    proc = subprocess.run(
        ["bash", str(UP_SCRIPT)], capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"sandbox/slurm/up.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    state = Path(os.environ.get("SANDBOX_STATE_DIR") or REPO_ROOT / ".sandbox" / "slurm").resolve()
    settings = json.loads((state / "slurm.json").read_text())
    sandbox = SlurmSandbox(settings)
    # Per-test work dirs of earlier sessions (kept for debugging) go after a day.
    scratch = sandbox.home / "pathways" / "tests"
    if scratch.is_dir():
        for old in scratch.iterdir():
            if old.is_dir() and time.time() - old.stat().st_mtime > 86400:
                shutil.rmtree(old, ignore_errors=True)
    return sandbox


@pytest.fixture
def jobs(slurm: SlurmSandbox) -> Iterator[list[str]]:
    """Job ids a test submits; whatever is still active is cancelled (and awaited) afterwards."""
    submitted: list[str] = []
    yield submitted
    if submitted:
        slurm.run("scancel", *submitted, check=False)
        slurm.wait_gone(submitted, timeout=30)


@pytest.fixture
def ssh(slurm: SlurmSandbox) -> Iterator[Any]:
    client = slurm.ssh_client()
    try:
        yield client
    finally:
        client.close()
