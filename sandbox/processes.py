"""Background service processes of the sandbox: liveness, stopping, and their JSON state files."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any


def pid_alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True


def stop_process(process: subprocess.Popen[bytes] | None, pid: int, timeout: float) -> None:
    """SIGTERM the service (our child ``process``, or any ``pid``), SIGKILL after ``timeout``."""
    if process is not None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        return
    if not pid_alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


def read_state(path: Path) -> dict[str, Any] | None:
    """The JSON state file a service wrote, or None if missing or half written."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def forget_state(path: Path, pid: int) -> None:
    """Remove the state file if it still describes ``pid``."""
    info = read_state(path)
    if info and info.get("pid") == pid:
        path.unlink(missing_ok=True)
