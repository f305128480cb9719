"""A private Redis server as the Celery broker of an Airflow deployment (Debian's ``redis-server``).

``start_redis(base_dir)`` runs ``redis-server`` on a free port of 127.0.0.1 with its files in
``base_dir`` (no snapshots, no append-only file: a broker for one test run) and waits until it
answers ``PING``. ``stop()`` ends it (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from sandbox import registry
from sandbox.airflow.postgres import free_port

INSTALL_HINT = "bash sandbox/packages.sh airflow (Debian's redis-server)"


class RedisError(RuntimeError):
    """Redis is missing or did not start."""


@dataclass
class Redis:
    """A running server and how to stop it."""

    port: int
    base_dir: Path
    process: subprocess.Popen[bytes]
    host: str = "127.0.0.1"
    record: registry.Record | None = field(default=None, repr=False)

    def url(self, db: int = 0) -> str:
        return f"redis://{self.host}:{self.port}/{db}"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def log_path(self) -> Path:
        return self.base_dir / "redis.log"

    def ping(self) -> bool:
        """Whether the server answers ``PING`` (RESP, over a plain socket)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=2) as sock:
                sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        registry.unregister(self.record)

    def log_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""


def start_redis(base_dir: Path, *, timeout: float = 30.0) -> Redis:
    """Start ``redis-server`` on a free port with its files in ``base_dir``."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisError(f"redis-server is not installed: {INSTALL_HINT}")
    base_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = base_dir / "redis.log"
    args = [
        binary,
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(base_dir),
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
        "--logfile", str(log),
    ]  # fmt: skip
    process = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
    )
    server = Redis(port=port, base_dir=base_dir, process=process)
    # Machine-wide: stopped by the next sandbox start if this process dies without stopping it.
    server.record = registry.register(
        "redis",
        process.pid,
        description=f"Redis on 127.0.0.1:{port}",
        state_dir=base_dir,
        owner=os.getpid(),
        stop_first=False,  # after the Airflow processes that use it
    )
    deadline = time.monotonic() + timeout
    while not server.ping():
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RedisError(f"redis-server did not start on port {port}:\n{server.log_tail()}")
        time.sleep(0.05)
    return server
