"""The watchdog stops a deployment's processes when the process that started them dies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil

from sandbox.airflow.deployment import REPO_ROOT
from tests.deployment.harness import wait_for


def test_watchdog_kills_what_a_dead_owner_left_running(tmp_path: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    left = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.Popen(['sleep', '600']); time.sleep(600)",
        ]
    )
    wait_for(lambda: psutil.Process(left.pid).children(), "the child of the process left running", 30, 0.1)
    grandchild = psutil.Process(left.pid).children()[0]
    state = tmp_path / "watchdog.json"
    state.write_text(json.dumps({"processes": [[left.pid, psutil.Process(left.pid).create_time()]]}))
    watchdog = subprocess.Popen(
        [sys.executable, "-m", "sandbox.airflow.watchdog", "--owner", str(owner.pid), "--state", str(state)],
        cwd=REPO_ROOT,
    )
    try:
        owner.kill()
        owner.wait(10)
        assert watchdog.wait(30) == 0
        assert left.wait(10) == -9
        wait_for(
            lambda: not grandchild.is_running() or grandchild.status() == "zombie", "the grandchild", 10, 0.1
        )
        assert not state.exists()
    finally:
        for proc in (owner, left, watchdog):
            proc.kill()
        if grandchild.is_running():
            grandchild.kill()


def test_watchdog_leaves_when_the_owner_stopped_the_deployment(tmp_path: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    state = tmp_path / "watchdog.json"
    state.write_text(json.dumps({"processes": [[owner.pid, psutil.Process(owner.pid).create_time()]]}))
    watchdog = subprocess.Popen(
        [sys.executable, "-m", "sandbox.airflow.watchdog", "--owner", str(owner.pid), "--state", str(state)],
        cwd=REPO_ROOT,
    )
    try:
        state.unlink()
        assert watchdog.wait(30) == 0
        assert owner.poll() is None  # nothing was killed
    finally:
        owner.kill()
        watchdog.kill()
