"""The GCS emulator launcher: starts with a deadline, reuses a running emulator, CLI start/stop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.gcs.launcher import connect_gcs_emulator, start_gcs_emulator
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.gcs


def test_start_reuse_and_stop(tmp_path: Path) -> None:
    first = start_gcs_emulator(tmp_path)
    try:
        again = start_gcs_emulator(tmp_path)
        assert (again.url, again.pid, again.owned) == (first.url, first.pid, False)
        first.create_bucket("launcher-check")
        assert first.upload("launcher-check", "a/b", b"x")["name"] == "a/b"
        assert "a/b" in again.list_objects("launcher-check")
    finally:
        first.stop()
    assert connect_gcs_emulator(tmp_path) is None
    assert not first.alive()


def test_cli_start_status_stop(tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sandbox.gcs", *args, "--state-dir", str(tmp_path)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    started = cli("start")
    assert started.returncode == 0, started.stderr
    assert "export STORAGE_EMULATOR_HOST=http://127.0.0.1:" in started.stdout
    assert cli("status").returncode == 0
    assert "stopped" in cli("stop").stdout
    assert cli("status").returncode == 1
