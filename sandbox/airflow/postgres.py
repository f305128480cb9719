"""A private PostgreSQL server for an Airflow metadata database (Debian's ``postgresql`` package).

``start_postgres()`` runs ``initdb`` and ``pg_ctl start`` as an unprivileged user (the package's
``postgres`` user when running as root) with the data directory in a new temporary directory,
listening on a free port on 127.0.0.1 only (its Unix socket stays in that directory). ``stop()`` shuts
it down (fast, then immediate, then SIGKILL) and deletes the directory.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sandbox import registry

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO_ROOT / "sandbox" / "airflow" / "install.sh"
DATABASE = "airflow"
DB_USER = "airflow"


class PostgresError(RuntimeError):
    """PostgreSQL could not be installed, initialised or started."""


def _version_key(path: str) -> tuple[int, ...]:
    parts = Path(path).parts
    try:
        return tuple(int(p) for p in parts[parts.index("postgresql") + 1].split("."))
    except (ValueError, IndexError):
        return (0,)


def postgres_bin_dir(install: bool = True) -> Path:
    """The newest ``/usr/lib/postgresql/<v>/bin``; runs ``install.sh`` (apt-get) when there is none."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version_key)
    if not found and install:
        proc = subprocess.run(
            ["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=900, check=False
        )
        if proc.returncode != 0:
            raise PostgresError(f"{INSTALL_SCRIPT} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version_key)
    if not found:
        raise PostgresError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)")
    return Path(found[-1]).parent


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class Postgres:
    """A running server: connection settings and how to stop it."""

    port: int
    data_dir: Path
    bin_dir: Path
    run_as: str | None
    host: str = "127.0.0.1"
    record: registry.Record | None = field(default=None, repr=False)

    def url(self, driver: str = "psycopg") -> str:
        """SQLAlchemy URL of the ``airflow`` database (trust authentication on 127.0.0.1)."""
        return f"postgresql+{driver}://{DB_USER}@{self.host}:{self.port}/{DATABASE}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / "postgres.log"

    def _cmd(self, *args: str) -> list[str]:
        if self.run_as:
            return ["runuser", "-u", self.run_as, "--", *args]
        return list(args)

    def running(self) -> bool:
        proc = subprocess.run(
            self._cmd(str(self.bin_dir / "pg_ctl"), "status", "-D", str(self.data_dir)),
            capture_output=True,
            text=True,
            check=False,
        )
        return proc.returncode == 0

    def stop(self, remove: bool = True) -> None:
        """Stop the server (fast shutdown, then immediate, then SIGKILL); delete its directory."""
        self._shutdown()
        if remove:
            shutil.rmtree(self.data_dir.parent, ignore_errors=True)

    def _shutdown(self) -> None:
        for mode, timeout in (("fast", 20), ("immediate", 10)):
            if not self.running():
                return
            subprocess.run(
                self._cmd(
                    str(self.bin_dir / "pg_ctl"),
                    "stop",
                    "-D",
                    str(self.data_dir),
                    "-m",
                    mode,
                    "-w",
                    "-t",
                    str(timeout),
                ),
                capture_output=True,
                check=False,
                timeout=timeout + 10,
            )
        pid_file = self.data_dir / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().splitlines()[0])
            os.kill(pid, 9)
        registry.unregister(self.record)

    def postmaster_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
        return None

    def log_tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""


def start_postgres(*, timeout: float = 60.0) -> Postgres:
    """Initialise a cluster in a new temporary directory, start it on a free port, create the DB.

    As root the server runs as ``postgres`` (the package's user), which owns that directory.
    """
    bin_dir = postgres_bin_dir()
    base_dir = Path(tempfile.mkdtemp(prefix="airflow-postgres-"))
    run_as: str | None = None
    if os.geteuid() == 0:
        run_as = "postgres"
        try:
            pwd.getpwnam(run_as)
        except KeyError:
            shutil.rmtree(base_dir, ignore_errors=True)
            raise PostgresError("the postgres user is missing; reinstall the postgresql package") from None
        shutil.chown(base_dir, run_as, run_as)
        base_dir.chmod(0o700)
    data_dir = base_dir / "data"
    server = Postgres(port=free_port(), data_dir=data_dir, bin_dir=bin_dir, run_as=run_as)
    init = subprocess.run(
        server._cmd(
            str(bin_dir / "initdb"),
            "-D",
            str(data_dir),
            "-U",
            DB_USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-instructions",
            "--no-sync",
        ),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if init.returncode != 0:
        shutil.rmtree(base_dir, ignore_errors=True)
        raise PostgresError(f"initdb failed ({init.returncode}):\n{init.stdout}{init.stderr}")
    options = " ".join(
        [
            f"-p {server.port}",
            "-c listen_addresses=127.0.0.1",
            f"-c unix_socket_directories={base_dir}",
            "-c max_connections=400",
            "-c log_lock_waits=on",
            "-c fsync=off",
            "-c synchronous_commit=off",
            "-c full_page_writes=off",
        ]
    )
    start = subprocess.run(
        server._cmd(
            str(bin_dir / "pg_ctl"),
            "start",
            "-D",
            str(data_dir),
            "-l",
            str(server.log_path),
            "-o",
            options,
            "-w",
            "-t",
            str(int(timeout)),
        ),
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout + 10,
    )
    if start.returncode != 0:
        server.stop()
        raise PostgresError(f"pg_ctl start failed ({start.returncode}):\n{start.stderr}\n{server.log_tail()}")
    postmaster = server.postmaster_pid()
    if postmaster is not None:
        # Machine-wide: stopped (fast shutdown) by the next sandbox start if this process dies first.
        server.record = registry.register(
            "postgres",
            postmaster,
            description=f"PostgreSQL on 127.0.0.1:{server.port}",
            state_dir=base_dir,
            owner=os.getpid(),
            stop_signal="SIGINT",
            stop_first=False,
        )
    create = subprocess.run(
        server._cmd(
            str(bin_dir / "createdb"), "-h", server.host, "-p", str(server.port), "-U", DB_USER, DATABASE
        ),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if create.returncode != 0:
        server.stop()
        raise PostgresError(f"createdb failed ({create.returncode}):\n{create.stderr}")
    return server
