"""Background service processes of the sandbox: liveness, stopping, and their JSON state files.

Also what ``/proc`` tells about any process (start time, command line, root, parent, listening
ports), which the machine-wide registry (``sandbox.registry``) and the sandbox session
(``sandbox.session``) use to recognise the sandbox's processes without mistaking a reused pid.
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


# ---- what /proc says about any process -----------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3... of ``/proc/PID/stat`` (after the command name, which may contain spaces)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), or None if it is gone or a zombie.

    A pid and its start time name one process for good: a reused pid has another start time.
    """
    fields = _stat_fields(pid)
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def parent(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def comm(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/comm").read_text().strip()
    return ""


def cmdline(pid: int) -> list[str]:
    with contextlib.suppress(OSError):
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        return raw.split("\0")[:-1] if raw.endswith("\0") else raw.split("\0")
    return []


def root(pid: int) -> str | None:
    """The root directory of ``pid`` (``/``, or a chroot), None if it cannot be read."""
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/root")
    return None


def uid(pid: int) -> int | None:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}").stat().st_uid
    return None


def all_pids() -> list[int]:
    return sorted(int(name) for name in os.listdir("/proc") if name.isdigit())


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (children first, then theirs)."""
    children: dict[int, list[int]] = {}
    for other in all_pids():
        ppid = parent(other)
        if ppid is not None:
            children.setdefault(ppid, []).append(other)
    found: list[int] = []
    queue = list(children.get(pid, []))
    while queue:
        current = queue.pop(0)
        found.append(current)
        queue.extend(children.get(current, []))
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


def _listening_inodes() -> dict[int, int]:
    """``{socket inode: port}`` of every listening TCP socket (IPv4 and IPv6)."""
    found: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[3] == "0A":  # TCP_LISTEN
                    found[int(fields[9])] = int(fields[1].rsplit(":", 1)[1], 16)
    return found


def listening_ports(pid: int) -> set[int]:
    """The TCP ports ``pid`` listens on."""
    listening = _listening_inodes()
    return {listening[inode] for inode in _socket_inodes(pid) if inode in listening}


def port_owners(port: int) -> set[int]:
    """The processes that hold a socket listening on TCP ``port`` (any address)."""
    inodes = {inode for inode, listening in _listening_inodes().items() if listening == port}
    if not inodes:
        return set()
    return {pid for pid in all_pids() if _socket_inodes(pid) & inodes}


def port_listening(port: int) -> bool:
    return port in _listening_inodes().values()


def signal_all(pids: Iterable[tuple[int, int]], sig: int) -> None:
    """Send ``sig`` to every ``(pid, start time)`` that still names the same process."""
    for pid, started in pids:
        if start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def stop_all(pids: Iterable[int], timeout: float, sig: int = signal.SIGTERM) -> list[int]:
    """Send ``sig`` to the processes, SIGKILL what still runs after ``timeout`` s; returns the pids
    that were still running after the SIGKILL too (waited for up to 5 s more)."""
    targets = [(pid, started) for pid in pids if (started := start_time(pid)) is not None]
    signal_all(targets, sig)

    def running() -> list[tuple[int, int]]:
        return [(pid, started) for pid, started in targets if start_time(pid) == started]

    deadline = time.monotonic() + timeout
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    signal_all(running(), signal.SIGKILL)
    deadline = time.monotonic() + 5
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid, _ in running()]
