"""The smoke deployment of the compatibility tier (``make test-compat``): PostgreSQL, api-server
(the webserver on Airflow 2), scheduler with LocalExecutor, dag-processor and two triggerers of the
Airflow this venv holds, with its own Kubernetes stand-in. On Airflow 3.3 the whole deployment
suite covers what it runs, so it is skipped there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_pathways.airflow_features import RETRY_POLICIES
from tests.deployment.conftest import kube_only_stage, scenario_runner
from tests.deployment.scenarios import Runner, Stage

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="package")
def stage(request: pytest.FixtureRequest) -> Iterator[Stage]:
    if RETRY_POLICIES:
        pytest.skip("Airflow 3.3+: the whole deployment suite runs these scenarios")
    with kube_only_stage(
        request, "pathways-compat-deployment-", sorted((HERE / "dags").glob("*.py")), gcs=True
    ) as compat_stage:
        yield compat_stage


@pytest.fixture(scope="package")
def runner(stage: Stage, request: pytest.FixtureRequest) -> Iterator[Runner]:
    with scenario_runner(stage, request.config, HERE) as scenarios:
        yield scenarios
