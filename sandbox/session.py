"""What `make test` and `make demo` run in: the sandbox they start is stopped when they end.

    python -m sandbox.session run [--keep] --name NAME -- COMMAND...   run COMMAND, then stop
    python -m sandbox.session status                                   what of the sandbox runs
    python -m sandbox.session down [--force]                           stop all of it (make sandbox-down)

``run`` notes which services of the sandbox already run, runs COMMAND (Ctrl-C and SIGTERM reach it;
the stop step still follows), and then stops what the run started: the Slurm clusters (the host's
22.05 from ``up.sh``, 24.11 and 26.05 in chroots from ``versions.sh``, with their sshd and munged),
every recorded process of this checkout that no running process owns (``sandbox.registry``: the
demo's Kubernetes stand-in, a detached GCS emulator, ...), and the orphans any checkout left (a
killed test session's stand-in, emulators, PostgreSQL and Airflow processes). ``--keep``
(``KEEP_SANDBOX=1``) stops nothing and prints what runs and how to stop it.

The rule for what ran before:

- A service that already ran when the run began, while no other ``run`` was going on, was started
  on purpose (``make sandbox-slurm``, a run with ``KEEP_SANDBOX=1``, by hand): it is left running
  (also when the run restarted it), and the end of the run lists it with the command that stops it.
- The Slurm clusters are one per machine and shared by every checkout: while another ``run`` (of
  any checkout) is still going on they are left to it, and the last run to end stops them. A
  checkout's own processes are left only to another run of the same checkout.
- A run killed with SIGKILL stops nothing; the next run that begins treats what it left (running
  services nobody kept) as its own and stops it at its end.

``down`` stops every Slurm cluster of the sandbox on this machine (whichever checkout started it;
while another run or test session uses them, only with ``--force``), this checkout's recorded
processes and every orphan. (What a run found running is still left
running at its end if the run starts it again meanwhile, as a test may.) A process that a
test session still running owns (its fixtures' stand-in, emulator, deployment) is left to that
session, which stops it when it ends (or, killed, leaves an orphan the next start stops).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox import processes, registry

REPO_ROOT = Path(__file__).resolve().parent.parent
SLURM_DIR = REPO_ROOT / "sandbox" / "slurm"
STOP_COMMAND = "make sandbox-down"
KEEP_ENV = "KEEP_SANDBOX"
#: set for the command a run runs: the sandbox is stopped when it ends
SESSION_ENV = "PATHWAYS_SANDBOX_SESSION"


def _say(message: str) -> None:
    print(f"[sandbox] {message}", file=sys.stderr, flush=True)


@dataclass
class Service:
    """Something of the sandbox that runs: a Slurm cluster or a recorded process."""

    key: str
    description: str
    #: one per machine (the Slurm clusters), not one per checkout
    shared: bool
    stop: Callable[[], bool]


def _is_root() -> bool:
    return os.geteuid() == 0


def _slurm_services() -> list[Service]:
    """The Slurm clusters that run (``status.sh``); none without root (they need root to run)."""
    if not _is_root():
        return []
    proc = subprocess.run(
        ["bash", str(SLURM_DIR / "status.sh")], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sandbox/slurm/status.sh failed ({proc.returncode}): {proc.stderr.strip()}")
    found: list[Service] = []
    for line in proc.stdout.splitlines():
        version, where, *pids = line.split()
        daemons = sorted({item.split("=", 1)[0] for item in pids})
        if version == "22.05":
            description = f"Slurm 22.05 on this machine from {where} ({', '.join(daemons)})"
            command = ["bash", str(SLURM_DIR / "down.sh"), "--host-only"]
        else:
            description = f"Slurm {version} in the chroot {where} ({', '.join(daemons)})"
            command = ["bash", str(SLURM_DIR / "versions.sh"), "down", version]
        found.append(Service(f"slurm-{version}", description, True, _runner(command)))
    return found


def _runner(command: list[str]) -> Callable[[], bool]:
    def run() -> bool:
        # Its own session: a second Ctrl-C does not cut the stop short.
        proc = subprocess.run(command, start_new_session=True, check=False, timeout=600)
        return proc.returncode == 0

    return run


def _process_services() -> list[Service]:
    """Recorded processes of this checkout that nothing else ends, and orphans of any checkout.

    A process recorded with a living owner (a test session's stand-in, emulator, deployment) ends
    with that owner, which may be another test session of this checkout that still runs: it is left
    alone (once the owner is gone without stopping it, it is an orphan).
    """
    found: list[Service] = []
    records = registry.records()
    for record in records:
        if record.orphaned() or (record.of_this_checkout() and record.owner is None):
            found.append(Service(record.key, str(record), False, record.stop))
    # Airflow components before their PostgreSQL.
    order = {r.key: r.stop_first for r in records}
    found.sort(key=lambda s: not order.get(s.key, True))
    return found


def _owned_elsewhere() -> list[registry.Record]:
    """This checkout's processes that a test session still running owns (it stops them itself)."""
    records = registry.records()
    return [r for r in records if r.of_this_checkout() and r.owner is not None and not r.orphaned()]


def running_services() -> list[Service]:
    return [*_process_services(), *_slurm_services()]


def stop_services(services: list[Service]) -> list[Service]:
    """Stop them (processes first, then the clusters); returns those that would not stop."""
    failed: list[Service] = []
    for service in sorted(services, key=lambda s: s.shared):
        _say(f"stopping {service.description}")
        try:
            ok = service.stop()
        except Exception as err:  # keep stopping the others
            _say(f"stopping {service.description} failed: {err}")
            ok = False
        if not ok:
            failed.append(service)
    return failed


# ---- the machine-wide state of runs ---------------------------------------------------------------


@contextlib.contextmanager
def _locked_state(write: bool = True) -> Iterator[dict[str, Any]]:
    """The runs' shared state (``RUN_DIR/session.json``), locked while the block runs and written
    back after it (``write=False``: only read)."""
    directory = registry.run_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "session.json"
    with open(directory / "session.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            state = {}
        state.setdefault("runs", {})
        state.setdefault("kept", [])
        yield state
        if not write:
            return
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(path)


def _run_alive(run: dict[str, Any]) -> bool:
    return processes.start_time(int(run["pid"])) == run["start"]


def _run_key(pid: int) -> str:
    return f"{pid}:{processes.start_time(pid)}"


def _lineage(pid: int) -> set[int]:
    """``pid`` and its ancestors."""
    found: set[int] = set()
    current: int | None = pid
    while current and current not in found:
        found.add(current)
        current = processes.parent(current)
    return found


def shared_slurm_users() -> list[str]:
    """Who else may be using the shared Slurm clusters: the runs (any checkout) and the test sessions
    started by hand that go on, other than this process, what it started and the run it runs in. A
    test that stops or takes over the clusters must find none."""
    mine = _lineage(os.getpid()) | set(processes.descendants(os.getpid()))
    with _locked_state(write=False) as state:
        runs = [run for run in state["runs"].values() if _run_alive(run) and int(run["pid"]) not in mine]
    found = [f"a {run['name']} run of {run['repo']} (pid {run['pid']})" for run in runs]
    users = [user for user in registry.users("slurm") if user.pid not in mine]
    found += [f"a test session of {user.repo}: {user}" for user in users]
    return found


def begin(name: str) -> str:
    """Note this run and what runs already; returns this run's key."""
    me = _run_key(os.getpid())
    registry.reap_orphans(log=_say)
    with _locked_state() as state:
        runs: dict[str, Any] = state["runs"]
        crashed = [key for key, run in runs.items() if not _run_alive(run)]
        for key in crashed:
            del runs[key]
        running = {service.key: service for service in running_services()}
        kept = set(state["kept"]) & set(running)
        if not runs and not crashed:
            # Nothing else going on: what runs now was started on purpose.
            kept |= set(running)
        state["kept"] = sorted(kept)
        runs[me] = {
            "pid": os.getpid(),
            "start": processes.start_time(os.getpid()),
            "name": name,
            "repo": str(REPO_ROOT),
            "began": time.time(),
        }
    if kept:
        _say("already running (left running at the end):")
        for key in sorted(kept):
            _say(f"  {running[key].description}")
    return me


def end(me: str, keep: bool) -> int:
    """Stop what the run started (unless ``keep``); print what still runs. 0 if all went well."""
    with _locked_state() as state:
        runs: dict[str, Any] = state["runs"]
        runs.pop(me, None)
        others = {key: run for key, run in runs.items() if _run_alive(run)}
        others_here = [run for run in others.values() if run["repo"] == str(REPO_ROOT)]
        # Test sessions started by hand (not by a run) that use the Slurm clusters.
        slurm_users = registry.users("slurm")
        running = running_services()
        kept = set(state["kept"])
        if keep:
            state["kept"] = sorted(kept | {s.key for s in running})
            to_stop: list[Service] = []
        else:
            busy = bool(others or slurm_users)
            to_stop = [s for s in running if s.key not in kept and not (busy if s.shared else others_here)]
        failed = stop_services(to_stop)
    stopped = {s.key for s in to_stop} - {s.key for s in failed}
    failed_keys = {s.key for s in failed}
    left = [s for s in running if s.key not in stopped]
    if stopped and not failed:
        _say("stopped what this run started")
    if left:
        _say("still running:")
        for service in left:
            why = ""
            if service.key in failed_keys:
                why = " (would not stop)"
            elif service.key in kept and not keep:
                why = " (it ran before this run began)"
            elif not keep and service.key not in kept:
                if service.shared and slurm_users and not others:
                    why = f" (in use by {', '.join(map(str, slurm_users))})"
                else:
                    users = len(others) if service.shared else len(others_here)
                    why = f" (in use by {users} other run(s); the last one to end stops it)"
            _say(f"  {service.description}{why}")
        _say(f"stop it with: {STOP_COMMAND}")
    elif not stopped:
        _say("nothing of the sandbox runs")
    return 1 if failed else 0


def _make_dry_run() -> bool:
    """``make -n``: make runs a recipe line that calls $(MAKE) even then; start and stop nothing."""
    flags = os.environ.get("MAKEFLAGS", "").split()
    return bool(flags) and not flags[0].startswith("-") and "n" in flags[0]


def run(command: list[str], name: str, keep: bool) -> int:
    """Run ``command`` between ``begin`` and ``end``; its exit status (or the stop step's failure)."""
    if _make_dry_run():
        return subprocess.run(command, check=False).returncode
    me = begin(name)
    child = subprocess.Popen(command, env={**os.environ, SESSION_ENV: me})
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        # Ctrl-C reaches the command through the terminal's process group; SIGTERM and SIGHUP are
        # passed on to it and everything it started (a shell or make does not pass them on).
        received.append(signum)
        if signum != signal.SIGINT and child.poll() is None:
            for pid in [child.pid, *processes.descendants(child.pid)]:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    code = child.wait()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    if received:
        _say(f"interrupted ({signal.Signals(received[0]).name}); stopping the sandbox")
    stopped = end(me, keep)
    if code == 0 and stopped != 0:
        return stopped
    return code if code >= 0 else 128 - code


def down(force: bool = False) -> int:
    """Stop everything of the sandbox: the Slurm clusters, this checkout's processes, orphans. The
    clusters are left running while another run or test session uses them (``force``: stopped)."""
    services = running_services()
    users = [] if force else shared_slurm_users()
    if users:
        for service in (s for s in services if s.shared):
            _say(f"left running: {service.description} (in use by {'; '.join(users)})")
        _say("stop them anyway with: make sandbox-down FORCE=1")
        services = [s for s in services if not s.shared]
    failed = stop_services(services)
    for record in _owned_elsewhere():
        _say(f"left running: {record} (a test session, pid {record.owner}, stops it when it ends)")
    if failed:
        _say("still running: " + "; ".join(s.description for s in failed))
        return 1
    _say("stopped" if services else "nothing of the sandbox runs")
    return 0


def status() -> int:
    services = running_services()
    for service in services:
        print(service.description)
    if not services:
        print("nothing of the sandbox runs")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.session", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="run a command, then stop what it started of the sandbox")
    run_parser.add_argument("--name", default="run")
    run_parser.add_argument(
        "--keep",
        action="store_true",
        default=os.environ.get(KEEP_ENV, "") not in ("", "0"),
        help=f"leave the sandbox running (default from {KEEP_ENV})",
    )
    run_parser.add_argument("cmd", nargs=argparse.REMAINDER)
    sub.add_parser("status", help="what of the sandbox runs")
    down_parser = sub.add_parser("down", help="stop all of the sandbox")
    down_parser.add_argument(
        "--force", action="store_true", help="stop the Slurm clusters also while another run uses them"
    )
    args = parser.parse_args(argv)
    if args.command == "run":
        command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not command:
            parser.error("run: give the command after --")
        return run(command, args.name, args.keep)
    if args.command == "status":
        return status()
    return down(args.force)


if __name__ == "__main__":
    sys.exit(main())
