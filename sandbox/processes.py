"""Background service processes of the sandbox: liveness, stopping, and their JSON state files.

Also what the system tells about any process (start time, command line, root, parent, listening
ports), read with psutil (``/proc`` on Linux), which the machine-wide registry
(``sandbox.registry``) and the sandbox session (``sandbox.session``) use to recognise the sandbox's
processes without mistaking a reused pid: a pid and its start time name one process for good.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)


def _process(pid: int) -> psutil.Process | None:
    """The running (not zombie) process ``pid``, or None."""
    if pid <= 0:
        return None
    try:
        process = psutil.Process(pid)
        return None if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) else process
    except _GONE:
        return None


def pid_alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie."""
    return _process(pid) is not None


def start_time(pid: int) -> float | None:
    """When ``pid`` started, or None if it is gone or a zombie."""
    process = _process(pid)
    return process.create_time() if process else None


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
    stop_all([pid], timeout)


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


def parent(pid: int) -> int | None:
    with contextlib.suppress(*_GONE):
        return psutil.Process(pid).ppid()
    return None


def comm(pid: int) -> str:
    with contextlib.suppress(*_GONE):
        return psutil.Process(pid).name()
    return ""


def cmdline(pid: int) -> list[str]:
    with contextlib.suppress(*_GONE):
        return psutil.Process(pid).cmdline()
    return []


def root(pid: int) -> str | None:
    """The root directory of ``pid`` (``/``, or a chroot), None if it cannot be read (psutil has
    no call for it)."""
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/root")
    return None


def uid(pid: int) -> int | None:
    with contextlib.suppress(*_GONE):
        return psutil.Process(pid).uids().effective
    return None


def all_pids() -> list[int]:
    return sorted(psutil.pids())


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid``."""
    with contextlib.suppress(*_GONE):
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    return []


def _listening() -> list[Any]:
    """Every listening TCP socket (IPv4 and IPv6) with its owner's pid where it can be read."""
    return [c for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN]


def listening_ports(pid: int) -> set[int]:
    """The TCP ports ``pid`` listens on."""
    return {c.laddr.port for c in _listening() if c.pid == pid}


def port_owners(port: int) -> set[int]:
    """The processes that hold a socket listening on TCP ``port`` (any address)."""
    return {c.pid for c in _listening() if c.laddr.port == port and c.pid is not None}


def port_listening(port: int) -> bool:
    return any(c.laddr.port == port for c in _listening())


def _running(targets: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``targets`` that still run (a zombie has ended: its parent only has not reaped it,
    and an orphan's may never do so promptly)."""
    return [p for p in targets if start_time(p.pid) == p.create_time()]


def _wait_gone(targets: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (alive := _running(targets)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def stop_all(pids: Iterable[int], timeout: float, sig: int = signal.SIGTERM) -> list[int]:
    """Send ``sig`` to the processes, SIGKILL what still runs after ``timeout`` s; returns the pids
    that were still running after the SIGKILL too (waited for up to 5 s more). A pid is signalled
    only while it names the process it named when this was called (psutil checks its start time)."""
    targets = [process for pid in pids if (process := _process(pid)) is not None]
    for process in targets:
        with contextlib.suppress(*_GONE):
            process.send_signal(sig)
    for process in _wait_gone(targets, timeout):
        with contextlib.suppress(*_GONE):
            process.kill()
    return [process.pid for process in _wait_gone(targets, 5)]
