"""Test session setup: an isolated Airflow home (SQLite) and the sandbox services tests share."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# Airflow reads its configuration at import time: set it before anything imports airflow.
_AIRFLOW_HOME = Path(os.environ.get("PATHWAYS_TEST_AIRFLOW_HOME") or tempfile.mkdtemp(prefix="airflow-home-"))
DAGS_FOLDER = _AIRFLOW_HOME / "dags"
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS_FOLDER)
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_AIRFLOW_HOME}/airflow.db"
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")

# DAG files the tests run with dag.test(): they must live in the DAGs folder.
DAG_SOURCES = (REPO_ROOT / "example_dags", REPO_ROOT / "tests" / "dags")


def _install_dags() -> None:
    DAGS_FOLDER.mkdir(parents=True, exist_ok=True)
    for source in DAG_SOURCES:
        for path in source.glob("*.py"):
            shutil.copy2(path, DAGS_FOLDER / path.name)


# A freshly migrated database the session's other processes copy instead of migrating their own (5 s
# of CPU each): the pytest-xdist workers inherit its path from the process that starts them.
_MIGRATED_DB = "PATHWAYS_TEST_MIGRATED_AIRFLOW_DB"


def _migrate_once() -> None:
    marker = _AIRFLOW_HOME / ".migrated"
    if marker.exists():
        return
    database = _AIRFLOW_HOME / "airflow.db"
    # Only a database this Airflow version migrated (a child process may run another's venv).
    version = importlib.metadata.version("apache-airflow")
    migrated = os.environ.get(_MIGRATED_DB, "").removeprefix(f"{version}:")
    if migrated and Path(migrated).is_file() and not database.exists():
        shutil.copyfile(migrated, database)
    else:
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            check=True,
            stdout=subprocess.DEVNULL,
            env=os.environ.copy(),
        )
        if not migrated:  # a copy no test writes to
            pristine = _AIRFLOW_HOME / "airflow.migrated.db"
            shutil.copyfile(database, pristine)
            os.environ[_MIGRATED_DB] = f"{version}:{pristine}"
    marker.touch()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "service: needs a sandbox service beyond the Kubernetes stand-in (Slurm, GCS emulators, a real "
        "Airflow deployment, Chromium); `make test-fast` leaves these out",
    )
    config.addinivalue_line(
        "markers",
        "versioned: a DAG run whose behaviour differs between Airflow versions (Stats, task logs, what "
        "survives a try); the compatibility tier runs it on every version even when it is end_to_end",
    )
    config.addinivalue_line(
        "markers",
        "slow: waits through a real outage, timeout or load of many seconds; not in `make test-fast`",
    )
    config.addinivalue_line(
        "markers",
        "end_to_end: whole DAG runs of the rarer GKE scenarios against the stand-in (their programs run "
        "for seconds); `make test-fast` runs the core ones only (tests/operators/test_pathways_job.py)",
    )
    _install_dags()
    _migrate_once()
    from tests.support.airflow_versions import (
        quiet_dag_test_debug_lines,  # imports Airflow: after its settings
    )

    quiet_dag_test_debug_lines()


# The fixtures that start (or need) a service `make test-fast` does not: a Slurm cluster, a GCS
# emulator, the real Airflow deployment, the browser. The Kubernetes stand-in starts in about a
# second and stays in the fast tier with the Airflow-free domain and the GKE operators.
SERVICE_FIXTURES = frozenset(
    {
        "slurm_cluster",
        "slurm_cluster_version",
        "slurm_cluster_without_accounting",
        "slurm",
        "sandbox",
        "gcs",
        "gcs_emulator",
        "lifecycle_emulator",
        "stage",
        "airflow_ui",
    }
)
# Folders whose tests start services themselves (no fixture names them).
SERVICE_FOLDERS = ("deployment", "ui", "sandbox/slurm", "sandbox/test_sandbox_lifecycle.py")
# Whole DAG runs of the rarer GKE scenarios (outcomes, queueing, clears, sensors, dry runs, failure
# notices): `make test` runs them, `make test-fast` keeps the core DAG runs of
# tests/operators/test_pathways_job.py.
END_TO_END_MODULES = (
    "operators/test_pathways_job_outcomes.py",
    "operators/test_pathways_job_queue.py",
    "operators/test_pathways_job_clear.py",
    "sensors/test_pathways_job.py",
    "operators/test_dry_run.py",
    "notifications/test_failure.py",
    "operators/test_sweep.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_root = Path(__file__).resolve().parent
    for item in items:
        relative = Path(str(item.fspath)).resolve().relative_to(tests_root).as_posix()
        if SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ())) or any(
            relative == folder or relative.startswith(folder + "/") for folder in SERVICE_FOLDERS
        ):
            item.add_marker(pytest.mark.service)
        if relative in END_TO_END_MODULES:
            item.add_marker(pytest.mark.end_to_end)


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The Kubernetes stand-in with simulated Pathways controllers, wired as Airflow connections.

    ``kubernetes_default`` and ``gke_sandbox`` point at it; DAG callbacks find it through
    ``PATHWAYS_SANDBOX_KUBE_STATE``.
    """
    from sandbox.kube.launcher import start_kube_standin

    state_dir = tmp_path_factory.mktemp("kube")
    standin = start_kube_standin(state_dir)
    saved = {k: os.environ.get(k) for k in ("AIRFLOW_CONN_KUBERNETES_DEFAULT", "AIRFLOW_CONN_GKE_SANDBOX")}
    os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = standin.airflow_connection()
    os.environ["AIRFLOW_CONN_GKE_SANDBOX"] = standin.airflow_connection()
    os.environ["PATHWAYS_SANDBOX_KUBE_STATE"] = str(state_dir)
    try:
        yield standin
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        standin.stop()


@pytest.fixture
def faults(kube: Any) -> Iterator[Any]:
    """Inject API answers into the Kubernetes stand-in (``faults(status, count, verb)``); none is
    left for the next test."""

    def inject(status: int, count: int = 1, verb: str = "") -> None:
        kube.control("faults", method="POST", status=status, count=count, verb=verb)

    yield inject
    kube.control("faults", method="POST", count=0, clear=1)


@pytest.fixture(scope="session")
def slurm_cluster() -> dict[str, str]:
    """The sandbox Slurm cluster (started with sandbox/slurm/up.sh), wired as two Airflow connections.

    ``slurm_rest`` uses slurmrestd with a JWT; ``slurm_ssh`` uses the login node over SSH with
    strict host-key checking. Returns the sandbox settings (``slurm.json``).
    """
    from sandbox.slurm.cluster import airflow_connection, start_slurm_sandbox
    from tests.support.environment import require_root

    require_root("the Slurm sandbox needs root (it installs packages and starts daemons)")
    try:
        settings = start_slurm_sandbox()
    except RuntimeError as err:
        pytest.fail(str(err))
    os.environ["AIRFLOW_CONN_SLURM_REST"] = airflow_connection(settings, "rest")
    os.environ["AIRFLOW_CONN_SLURM_SSH"] = airflow_connection(settings, "ssh")
    return settings


# The Slurm versions the readiness suites run on (PATHWAYS_SLURM_VERSIONS narrows them).
READINESS_VERSIONS = ("22.05", "24.11")


def _readiness_versions() -> list[str]:
    wanted = os.environ.get("PATHWAYS_SLURM_VERSIONS")
    chosen = [v.strip() for v in wanted.split(",")] if wanted else list(READINESS_VERSIONS)
    return [v for v in READINESS_VERSIONS if v in chosen]


@pytest.fixture(params=_readiness_versions())
def slurm_cluster_version(
    request: pytest.FixtureRequest, slurm_cluster: dict[str, str]
) -> Iterator[dict[str, str]]:
    """The sandbox cluster of one Slurm version (each in turn) behind the ``slurm_rest`` and
    ``slurm_ssh`` connections for the test's length; its settings (``slurm_cli`` runs its commands)."""
    from sandbox.slurm.cluster import start_slurm_sandbox

    settings = slurm_cluster if request.param == slurm_cluster.get("SLURM_SANDBOX_VERSION", "22.05") else None
    if settings is None:
        try:
            settings = start_slurm_sandbox(timeout=900, version=request.param)
        except RuntimeError as err:
            pytest.fail(str(err))
    yield from _behind_the_slurm_connections(settings)


def _behind_the_slurm_connections(settings: dict[str, str]) -> Iterator[dict[str, str]]:
    """Point ``slurm_rest`` and ``slurm_ssh`` at the cluster of ``settings`` while the generator is
    suspended (a fixture's test); then restore them."""
    from sandbox.slurm.cluster import airflow_connection

    saved = {name: os.environ.get(name) for name in ("AIRFLOW_CONN_SLURM_REST", "AIRFLOW_CONN_SLURM_SSH")}
    os.environ["AIRFLOW_CONN_SLURM_REST"] = airflow_connection(settings, "rest")
    os.environ["AIRFLOW_CONN_SLURM_SSH"] = airflow_connection(settings, "ssh")
    try:
        yield settings
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


#: The sandbox Slurm version without accounting (no slurmdbd): slurmctld forgets an ended job
#: MinJobAge (30 s) after its end, and nobody can tell how it ended.
FORGETFUL_VERSION = "26.05"


@pytest.fixture
def slurm_cluster_without_accounting() -> Iterator[dict[str, str]]:
    """The sandbox cluster that keeps no accounting, behind the ``slurm_rest`` and ``slurm_ssh``
    connections for the test's length; its settings (``slurm_cli`` runs its commands)."""
    from sandbox.slurm.cluster import start_slurm_sandbox
    from tests.support.environment import require_root

    require_root("the Slurm sandbox needs root (it installs packages and starts daemons)")
    try:
        settings = start_slurm_sandbox(timeout=900, version=FORGETFUL_VERSION)
    except RuntimeError as err:
        pytest.fail(str(err))
    assert settings.get("SLURM_SANDBOX_ACCOUNTING") != "1", settings.get("SLURM_SANDBOX_VERSION")
    yield from _behind_the_slurm_connections(settings)


EXAMPLE_BUCKET = "my-pathways-bucket"


@pytest.fixture(scope="session")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A GCS emulator over HTTP (``STORAGE_EMULATOR_HOST``) with the example DAGs' bucket."""
    from sandbox.gcs.launcher import start_gcs_emulator

    emulator = start_gcs_emulator(tmp_path_factory.mktemp("gcs-examples"), reuse=False)
    saved = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ.update(emulator.env())
    emulator.create_bucket(EXAMPLE_BUCKET)
    try:
        yield emulator
    finally:
        if saved is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = saved
        emulator.stop()
