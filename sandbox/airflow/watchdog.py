"""Stop a deployment whose owner died without stopping it (e.g. a test run killed with SIGKILL).

``python -m sandbox.airflow.watchdog --owner PID --state FILE`` waits until process ``PID`` is gone,
then SIGKILLs the processes listed in ``FILE`` (JSON: ``processes``, ``[pid, create_time]`` pairs)
with their descendants, and stops the PostgreSQL server it names (``postgres``: ``bin_dir``,
``data_dir``, ``run_as``), then deletes the file. It exits quietly when the file disappears first
(the owner stopped the deployment itself).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil


def _alive(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _tree(processes: list[list[float]]) -> list[psutil.Process]:
    """The listed processes that still run (same pid and start time) and their descendants."""
    found: list[psutil.Process] = []
    for pid, created in processes:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(int(pid))
            if abs(proc.create_time() - created) < 0.01:
                found.append(proc)
                found.extend(proc.children(recursive=True))
    return found


def _stop_postgres(info: dict[str, Any]) -> None:
    cmd = [str(Path(info["bin_dir"]) / "pg_ctl"), "stop", "-D", info["data_dir"], "-m", "immediate", "-w"]
    if info.get("run_as"):
        cmd = ["runuser", "-u", info["run_as"], "--", *cmd]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(cmd, capture_output=True, timeout=30, check=False)


def watch(owner: int, state: Path, interval: float = 1.0) -> None:
    while _alive(owner):
        if not state.exists():
            return
        time.sleep(interval)
    try:
        info = json.loads(state.read_text())
    except (OSError, ValueError):
        return
    for proc in _tree(info.get("processes", [])):
        with contextlib.suppress(psutil.Error):
            proc.kill()
    if info.get("postgres"):
        _stop_postgres(info["postgres"])
    state.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m sandbox.airflow.watchdog", description=__doc__)
    parser.add_argument("--owner", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch(args.owner, args.state)


if __name__ == "__main__":
    main()
