"""A second real Airflow deployment, with the CeleryExecutor: Redis (Debian's ``redis-server``) as
broker, PostgreSQL as metadata database and Celery result backend, two Celery workers (hosts
``celery-worker-1`` and ``celery-worker-2`` to Airflow), two triggerers; wired to its own
Kubernetes stand-in. Its scenarios run concurrently, as those of the LocalExecutor deployment do,
and everything it started is stopped after its tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deployment.conftest import kube_only_stage, scenario_runner
from tests.deployment.scenarios import Runner, Stage

HERE = Path(__file__).resolve().parent
CELERY_WORKERS = 2
#: Tries a worker runs at once: the 40 deferred waits pass through both workers.
WORKER_CONCURRENCY = 4


@pytest.fixture(scope="package")
def stage(request: pytest.FixtureRequest) -> Iterator[Stage]:
    with kube_only_stage(
        request,
        "pathways-celery-deployment-",
        sorted((HERE / "dags").glob("*.py")),
        parallelism=48,
        executor="CeleryExecutor",
        celery_workers=CELERY_WORKERS,
        worker_concurrency=WORKER_CONCURRENCY,
    ) as celery_stage:
        yield celery_stage


@pytest.fixture(scope="package")
def runner(stage: Stage, request: pytest.FixtureRequest) -> Iterator[Runner]:
    with scenario_runner(stage, request.config, HERE) as scenarios:
        yield scenarios
