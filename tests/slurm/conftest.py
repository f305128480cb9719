"""Fixtures for the Slurm hook tests: the real sandbox clusters (Slurm 22.05 on the host from
``sandbox/slurm/up.sh``, 24.11 and 26.05 in chroots from ``sandbox/slurm/versions.sh``), Airflow
connections for both transports (``AIRFLOW_CONN_*`` JSON), and helpers that wait on conditions.

Tests that take the ``sandbox`` fixture run once per Slurm version (ids ``22.05``, ``24.11``,
``26.05``); ``@pytest.mark.slurm_versions("24.11")`` limits a test to the versions named (a cluster
with accounting, say), ``@pytest.mark.slurm_one_version`` runs it on one version only (client-side
behaviour). ``PATHWAYS_SLURM_VERSIONS=22.05,24.11`` limits the whole run.
"""

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

from sandbox.slurm.cluster import VERSIONS, slurm_cli, start_slurm_sandbox
from tests.support.environment import require_debian, require_root

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
    def version(self) -> str:
        """``22.05``, ``24.11`` or ``26.05``."""
        return self.settings.get("SLURM_SANDBOX_VERSION", "22.05")

    @property
    def accounting(self) -> bool:
        """The cluster keeps accounting (slurmdbd): ended jobs outlive MinJobAge there."""
        return self.settings.get("SLURM_SANDBOX_ACCOUNTING") == "1"

    @property
    def min_job_age(self) -> int | None:
        """MinJobAge of a chroot cluster (the host's keeps jobs for a day)."""
        value = self.settings.get("SLURM_SANDBOX_MIN_JOB_AGE")
        return int(value) if value else None

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
        """A Slurm command as root against this version's cluster (inside its chroot if it has one)."""
        command = [*slurm_cli(self.settings), *args]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
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
        extra = {"transport": "rest", "shared_fs": True, **overrides.pop("extra", {})}
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


def _selected_versions() -> tuple[str, ...]:
    wanted = os.environ.get("PATHWAYS_SLURM_VERSIONS")
    if not wanted:
        return VERSIONS
    chosen = tuple(v.strip() for v in wanted.split(",") if v.strip())
    unknown = set(chosen) - set(VERSIONS)
    if unknown:
        raise pytest.UsageError(f"PATHWAYS_SLURM_VERSIONS: unknown {sorted(unknown)}; known {VERSIONS}")
    return chosen


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slurm_versions(*versions): run only on these sandbox Slurm versions")
    config.addinivalue_line("markers", "slurm_one_version: client-side behaviour, run on one version only")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that uses the sandbox runs once per Slurm version (session-scoped parameter)."""
    if "slurm_version" not in metafunc.fixturenames:
        return
    versions = _selected_versions()
    marker = metafunc.definition.get_closest_marker("slurm_versions")
    if marker is not None:
        versions = tuple(v for v in versions if v in marker.args)
    if metafunc.definition.get_closest_marker("slurm_one_version") is not None:
        versions = versions[:1]
    metafunc.parametrize("slurm_version", versions, ids=list(versions), scope="session")


@pytest.fixture(scope="session")
def sandbox(slurm_version: str) -> Sandbox:
    require_root("the Slurm sandbox needs root (it installs packages and starts daemons)")
    require_debian("the Slurm sandbox needs Debian (apt-get)")
    try:
        settings = start_slurm_sandbox(timeout=900, version=slurm_version)
    except RuntimeError as err:
        pytest.fail(str(err))
    return Sandbox(settings)


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
