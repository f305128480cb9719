"""The machine-wide record of the sandbox's background processes.

Every sandbox process that runs in the background and picks its own port (the Kubernetes stand-in,
the GCS emulators, the Airflow deployment's PostgreSQL and components, the UI tests' API server)
records itself in ``RUN_DIR/processes/<kind>-<pid>.json``: its pid and start time (so that a reused
pid is never taken for it), command line, the checkout (``repo``) and state dir it runs from, and
the process it must not outlive (``owner``), if any. The Slurm clusters are not recorded here: they
are found by their configuration files and chroots (``sandbox/slurm/lib.sh``).

``RUN_DIR`` is ``/run/pathways-sandbox`` (``PATHWAYS_SANDBOX_RUN_DIR`` overrides it): one per
machine, like the Slurm ports, and emptied at boot, like the processes it lists. Without root it is
``<tmp>/pathways-sandbox-<uid>``.

A record is *orphaned* when its checkout or its state dir is gone, or the process it must not
outlive has ended: nobody can reach or stop it through its state dir any more. Starting any sandbox
service stops the orphans first (``reap_orphans``); ``python -m sandbox.registry`` lists the records.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sandbox import processes

RUN_DIR_ENV = "PATHWAYS_SANDBOX_RUN_DIR"
REPO_ROOT = Path(__file__).resolve().parent.parent


def run_dir() -> Path:
    """The machine-wide directory of the sandbox (records, locks, the session state)."""
    configured = os.environ.get(RUN_DIR_ENV)
    if configured:
        return Path(configured)
    if os.geteuid() == 0:
        return Path("/run/pathways-sandbox")
    return Path(tempfile.gettempdir()) / f"pathways-sandbox-{os.getuid()}"


def _records_dir() -> Path:
    return run_dir() / "processes"


@dataclass
class Record:
    """One recorded process of the sandbox."""

    kind: str
    pid: int
    start: float
    repo: str
    state_dir: str
    description: str
    command: list[str] = field(default_factory=list)
    owner: int | None = None
    owner_start: float | None = None
    stop_signal: str = "SIGTERM"
    #: stop it before the other kinds (e.g. Airflow components before their PostgreSQL)
    stop_first: bool = True

    @property
    def path(self) -> Path:
        return _records_dir() / f"{self.kind}-{self.pid}.json"

    @property
    def key(self) -> str:
        """Names this process for good (a reused pid gets another key)."""
        return f"{self.kind}:{self.pid}:{self.start}"

    def alive(self) -> bool:
        return processes.start_time(self.pid) == self.start

    def orphaned(self) -> str | None:
        """Why nobody can reach this process through its state dir any more, or None."""
        if self.repo and not Path(self.repo).is_dir():
            return f"its checkout {self.repo} is gone"
        if self.state_dir and not Path(self.state_dir).is_dir():
            return f"its state dir {self.state_dir} is gone"
        if self.owner is not None and processes.start_time(self.owner) != self.owner_start:
            return f"the process that started it (pid {self.owner}) has ended"
        return None

    def of_this_checkout(self) -> bool:
        return Path(self.repo) == REPO_ROOT

    def stop(self, timeout: float = 15.0) -> bool:
        """Stop it and what it started (its stop signal, then SIGKILL); True if it is gone."""
        left: list[int] = []
        if self.alive():
            below = processes.descendants(self.pid)
            left = processes.stop_all([self.pid], timeout, getattr(signal, self.stop_signal))
            left += processes.stop_all(below, 5.0)
        if not left:
            self.path.unlink(missing_ok=True)
        return not left

    def __str__(self) -> str:
        where = f" (state {self.state_dir})" if self.state_dir else ""
        return f"{self.description}, pid {self.pid}{where}"


def register(
    kind: str,
    pid: int,
    *,
    description: str,
    state_dir: Path | str | None = None,
    owner: int | None = None,
    stop_signal: str = "SIGTERM",
    stop_first: bool = True,
    repo: Path = REPO_ROOT,
) -> Record | None:
    """Record a running process of the sandbox; None if it is already gone."""
    started = processes.start_time(pid)
    if started is None:
        return None
    record = Record(
        kind=kind,
        pid=pid,
        start=started,
        repo=str(repo),
        state_dir=str(Path(state_dir).resolve()) if state_dir else "",
        description=description,
        command=processes.cmdline(pid),
        owner=owner,
        owner_start=processes.start_time(owner) if owner is not None else None,
        stop_signal=stop_signal,
        stop_first=stop_first,
    )
    directory = _records_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        directory.parent.chmod(0o755)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".record-")
    with os.fdopen(fd, "w") as handle:
        json.dump(asdict(record), handle)
    os.replace(tmp, record.path)
    return record


def unregister(record: Record | None) -> None:
    """Forget a record (when its process was stopped the ordinary way)."""
    if record is None:
        return
    with contextlib.suppress(FileNotFoundError, ValueError):
        if json.loads(record.path.read_text()).get("start") == record.start:
            record.path.unlink()


def records(kinds: Iterable[str] | None = None) -> list[Record]:
    """Every recorded process that still runs (records of ended ones are deleted on the way)."""
    wanted = set(kinds) if kinds is not None else None
    found: list[Record] = []
    directory = _records_dir()
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.json")):
        try:
            record = Record(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if not record.alive():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        if wanted is None or record.kind in wanted:
            found.append(record)
    return found


def stop(found: Iterable[Record], log: Callable[[str], None] | None = None) -> list[Record]:
    """Stop the records (``stop_first`` ones first); returns those that would not stop."""
    failed: list[Record] = []
    for record in sorted(found, key=lambda r: not r.stop_first):
        if log is not None:
            log(f"stopping {record}")
        if not record.stop():
            failed.append(record)
    return failed


def reap_orphans(log: Callable[[str], None] | None = None) -> list[Record]:
    """Stop every recorded process whose checkout, state dir or owner is gone; returns them."""
    orphans = [record for record in records() if record.orphaned()]
    for record in orphans:
        if log is not None:
            log(f"stopping {record}: {record.orphaned()}")
    stop(orphans)
    return orphans


def wait_gone(found: Iterable[Record], timeout: float = 10.0) -> bool:
    """Wait until none of the records' processes runs; False if one still does at the deadline."""
    pending = list(found)
    deadline = time.monotonic() + timeout
    while any(r.alive() for r in pending):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


# ---- users of the shared Slurm clusters ------------------------------------------------------------


@dataclass
class User:
    """A process that uses a shared service of the sandbox (a test session using the Slurm clusters)."""

    what: str
    pid: int
    start: float
    repo: str
    command: list[str] = field(default_factory=list)

    def alive(self) -> bool:
        return processes.start_time(self.pid) == self.start

    def __str__(self) -> str:
        return f"pid {self.pid} ({' '.join(self.command)[:80]})"


def add_user(what: str, pid: int | None = None) -> None:
    """Note that process ``pid`` (this one by default) uses ``what`` (e.g. ``slurm``) until it ends:
    a ``make test``/``make demo`` that ends meanwhile leaves that service running for it."""
    pid = os.getpid() if pid is None else pid
    started = processes.start_time(pid)
    if started is None:
        return
    directory = run_dir() / "users"
    directory.mkdir(parents=True, exist_ok=True)
    user = User(what, pid, started, str(REPO_ROOT), processes.cmdline(pid))
    path = directory / f"{what}-{pid}.json"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".user-")
    with os.fdopen(fd, "w") as handle:
        json.dump(asdict(user), handle)
    os.replace(tmp, path)


def users(what: str) -> list[User]:
    """The processes that use ``what`` and still run (the notes of ended ones are deleted)."""
    found: list[User] = []
    for path in sorted((run_dir() / "users").glob(f"{what}-*.json")):
        try:
            user = User(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if user.alive():
            found.append(user)
        else:
            path.unlink(missing_ok=True)
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m sandbox.registry [list|reap]``: the recorded processes, or stop the orphans."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else "list"
    if command == "reap":
        for record in reap_orphans():
            print(f"stopped {record}: {record.orphaned() or 'orphaned'}")
        return 0
    if command != "list":
        print("usage: python -m sandbox.registry [list|reap]", file=sys.stderr)
        return 2
    for record in records():
        why = record.orphaned()
        print(f"{record.kind:<10} {record}{f' [orphaned: {why}]' if why else ''} from {record.repo}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
