"""Test session setup: an isolated Airflow home with a SQLite metadata database."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# Airflow reads its configuration at import time: set it before anything imports airflow.
_AIRFLOW_HOME = Path(os.environ.get("PATHWAYS_TEST_AIRFLOW_HOME") or tempfile.mkdtemp(prefix="airflow-home-"))
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(_AIRFLOW_HOME / "dags"))
os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{_AIRFLOW_HOME}/airflow.db")
(_AIRFLOW_HOME / "dags").mkdir(parents=True, exist_ok=True)


def _migrate_once() -> None:
    marker = _AIRFLOW_HOME / ".migrated"
    if marker.exists():
        return
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        check=True,
        stdout=subprocess.DEVNULL,
        env=os.environ.copy(),
    )
    marker.touch()


def pytest_configure(config: object) -> None:
    _migrate_once()
