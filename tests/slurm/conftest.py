"""Fixtures for the Slurm hook tests: the real sandbox cluster (``sandbox/slurm/up.sh``), Airflow
connections for both transports (``AIRFLOW_CONN_*`` JSON), and helpers that wait on conditions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
UP_SCRIPT = REPO_ROOT / "sandbox" / "slurm" / "up.sh"
TRANSPORTS = ("rest", "ssh")
CONN_IDS = {"rest": "pathways_slurm_test_rest", "ssh": "pathways_slurm_test_ssh"}
_ACTIVE = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING"}


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 30.0, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {result!r})")
        time.sleep(interval)


def conn_env_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


@dataclass
class Sandbox:
    """The running sandbox as ``STATE/slurm.json`` describes it, plus root CLI helpers."""

    settings: dict[str, str]

    @property
    def user(self) -> str:
        return self.settings["SLURM_SANDBOX_USER"]

    @property
    def home(self) -> Path:
        return Path(self.settings["SLURM_SANDBOX_USER_HOME"])

    @property
    def cpus(self) -> int:
        return int(self.settings["SLURM_SANDBOX_CPUS"])

    @property
    def node(self) -> str:
        return self.settings["SLURM_SANDBOX_NODES"].split(",")[0]

    def token(self) -> str:
        return Path(self.settings["SLURM_SANDBOX_JWT_TOKEN_FILE"]).read_text().strip()

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "SLURM_CONF": self.settings["SLURM_CONF"]}
        proc = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=60, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{args} failed ({proc.returncode}): {proc.stderr}{proc.stdout}")
        return proc

    def sbatch(self, *args: str) -> int:
        return int(self.run("sbatch", "--parsable", *args).stdout.strip().split(";")[0])

    def user_dir(self) -> Path:
        """A fresh directory in the cluster user's home that the user owns."""
        path = self.home / "pathways" / "hook-tests" / uuid.uuid4().hex[:12]
        path.mkdir(parents=True)
        for p in (path.parent, path):
            shutil.chown(p, self.user, self.user)
        return path

    def write_user_file(self, path: Path, data: bytes | str, mode: int = 0o644) -> Path:
        if isinstance(data, str):
            data = data.encode()
        path.write_bytes(data)
        path.chmod(mode)
        shutil.chown(path, self.user, self.user)
        return path

    def wait_gone(self, job_ids: list[int], timeout: float = 30.0) -> None:
        def idle() -> bool:
            ids = ",".join(str(i) for i in job_ids)
            out = self.run("squeue", "-h", "-r", "-t", "all", "-j", ids, "-o", "%T", check=False).stdout
            return not (set(out.split()) & _ACTIVE)

        wait_for(idle, f"jobs {job_ids} to end", timeout)

    def rest_connection(self, **overrides: Any) -> dict[str, Any]:
        extra = {"transport": "rest", **overrides.pop("extra", {})}
        return {
            "conn_type": "pathways_slurm",
            "host": "127.0.0.1",
            "port": int(self.settings["SLURM_SANDBOX_REST_URL"].rsplit(":", 1)[1]),
            "login": self.user,
            "password": self.token(),
            **overrides,
            "extra": extra,
        }

    def ssh_connection(self, **overrides: Any) -> dict[str, Any]:
        extra = {
            "transport": "ssh",
            "key_file": self.settings["SLURM_SANDBOX_SSH_PRIVATE_KEY"],
            "known_hosts": self.settings["SLURM_SANDBOX_SSH_KNOWN_HOSTS"],
            **overrides.pop("extra", {}),
        }
        return {
            "conn_type": "pathways_slurm",
            "host": self.settings["SLURM_SANDBOX_SSH_HOST"],
            "port": int(self.settings["SLURM_SANDBOX_SSH_PORT"]),
            "login": self.user,
            **overrides,
            "extra": extra,
        }


@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    if os.geteuid() != 0:
        pytest.skip("the Slurm sandbox needs root (it installs packages and starts daemons)")
    if not shutil.which("apt-get") and not shutil.which("slurmctld"):
        pytest.skip("the Slurm sandbox needs Debian (apt-get)")
    env = {**os.environ, "SANDBOX_SLURM_TAKEOVER": "1"}  # as tests/conftest.py: one sandbox per machine
    proc = subprocess.run(
        ["bash", str(UP_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"sandbox/slurm/up.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    state = Path(os.environ.get("SANDBOX_STATE_DIR") or REPO_ROOT / ".sandbox" / "slurm").resolve()
    return Sandbox(json.loads((state / "slurm.json").read_text()))


@pytest.fixture
def connections(sandbox: Sandbox) -> Iterator[Callable[[str, dict[str, Any]], str]]:
    """The two standard test connections, and a function to add more (all removed afterwards)."""
    added: dict[str, str | None] = {}

    def add(conn_id: str, conn: dict[str, Any]) -> str:
        name = conn_env_name(conn_id)
        added.setdefault(name, os.environ.get(name))
        os.environ[name] = json.dumps(conn)
        return conn_id

    add(CONN_IDS["rest"], sandbox.rest_connection())
    add(CONN_IDS["ssh"], sandbox.ssh_connection())
    yield add
    for name, value in added.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def hook(transport: str, connections: Any) -> Iterator[Any]:
    from airflow_provider_pathways.hooks.slurm import SlurmHook

    slurm_hook = SlurmHook(CONN_IDS[transport])
    try:
        yield slurm_hook
    finally:
        slurm_hook.close()


@pytest.fixture
def jobs(sandbox: Sandbox) -> Iterator[list[int]]:
    """Job ids a test submits: cancelled (as root) and awaited afterwards."""
    submitted: list[int] = []
    yield submitted
    if submitted:
        sandbox.run("scancel", *(str(j) for j in submitted), check=False)
        sandbox.wait_gone(submitted)


@pytest.fixture
def workdir(sandbox: Sandbox) -> Path:
    return sandbox.user_dir()
