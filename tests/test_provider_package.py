"""The distribution is a well-formed Airflow provider that is cheap to import at DAG-parse time."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from airflow_provider_pathways.provider_info import get_provider_info

HEAVY = (
    "kubernetes",
    "kubernetes_asyncio",
    "google.cloud",
    "google.auth",
    "paramiko",
    "asyncssh",
    "aiohttp",
    "openlineage",
    "airflow.providers.openlineage",
)
PARSE_TIME_MODULES = (
    "airflow_provider_pathways.operators.pathways_job",
    "airflow_provider_pathways.operators.slurm",
    "airflow_provider_pathways.operators.gcs",
    "airflow_provider_pathways.sensors.pathways_job",
    "airflow_provider_pathways.sensors.slurm",
)


def test_provider_info_names_the_distribution_and_importable_modules() -> None:
    import importlib

    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-pathways"
    for section in ("operators", "sensors", "hooks", "triggers"):
        for entry in info[section]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for link in info["extra-links"]:
        module, _, name = link.rpartition(".")
        assert hasattr(importlib.import_module(module), name)
    for conn in info["connection-types"]:
        module, _, name = conn["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), name)
        assert hook.conn_type == conn["connection-type"]


def test_airflow_lists_the_provider() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ.copy(),
    )
    # The JSON is the last line; Airflow 3.0 logs to stdout before it.
    names = [p["package_name"] for p in json.loads(result.stdout.strip().splitlines()[-1])]
    assert "airflow-provider-pathways" in names


def test_operator_modules_do_not_import_client_libraries() -> None:
    # What our imports add: some installed packages import google.cloud from a .pth file at start,
    # and Airflow 2's own BaseOperator loads aiohttp.
    code = (
        "import sys, json\n"
        "from airflow.providers.common.compat.sdk import BaseOperator, BaseSensorOperator\n"
        "before = set(sys.modules)\n"
        + "".join(f"import {m}\n" for m in PARSE_TIME_MODULES)
        + f"print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith({HEAVY!r}))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ.copy()
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
