"""A second real Airflow deployment, with the CeleryExecutor: Redis (Debian's ``redis-server``) as
broker, PostgreSQL as metadata database and Celery result backend, two Celery workers (hosts
``celery-worker-1`` and ``celery-worker-2`` to Airflow), two triggerers; wired to its own
Kubernetes stand-in. Its scenarios run concurrently, as those of the LocalExecutor deployment do,
and everything it started is stopped after its tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.airflow.deployment import AirflowDeployment
from tests.deployment.clusters import KubeCluster
from tests.deployment.conftest import DEPLOYMENT_KEY, selected_scenarios
from tests.deployment.harness import Airflow
from tests.deployment.scenarios import Runner, Stage
from tests.environment import require_root

HERE = Path(__file__).resolve().parent
DAG_FILES = sorted((HERE / "dags").glob("*.py"))
CELERY_WORKERS = 2
#: Tries a worker runs at once: the 40 deferred waits pass through both workers.
WORKER_CONCURRENCY = 4


@pytest.fixture(scope="package")
def stage(request: pytest.FixtureRequest) -> Iterator[Stage]:
    require_root("the deployment tests need root (PostgreSQL as its own user)")
    from sandbox.kube.launcher import start_kube_standin

    base = Path(tempfile.mkdtemp(prefix="pathways-celery-deployment-"))
    keep = os.environ.get("PATHWAYS_KEEP_DEPLOYMENT_LOGS") == "1"
    standin = start_kube_standin(base / "kube")
    kube = KubeCluster(standin)
    deployment = AirflowDeployment(
        base / "airflow",
        DAG_FILES,
        connections={"gke_sandbox": standin.airflow_connection()},
        parallelism=48,
        executor="CeleryExecutor",
        celery_workers=CELERY_WORKERS,
        worker_concurrency=WORKER_CONCURRENCY,
    )
    airflow: Airflow | None = None
    try:
        deployment.start()
        request.config.stash[DEPLOYMENT_KEY] = deployment  # its logs go with a failed test's report
        airflow = Airflow(deployment)
        yield Stage(airflow=airflow, kube=kube, slurm=None, gates={})
    finally:
        if airflow is not None:
            airflow.close()
        try:
            deployment.stop()
        finally:
            kube.close()
            standin.stop()
            if keep:
                print(f"deployment files kept in {base}")
            else:
                shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="package")
def runner(stage: Stage, request: pytest.FixtureRequest) -> Iterator[Runner]:
    scenarios = Runner(stage, selected_scenarios(request.config, HERE))
    try:
        yield scenarios
    finally:
        scenarios.close()
