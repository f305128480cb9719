"""A cluster reached with a Google identity, as from Cloud Composer: the deferred wait of a real
deployment outlives several access tokens (the stand-in issues them for 3 seconds), the triggerer
renews them as it goes, and nothing is ever sent with an expired one."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deployment.conftest import GOOGLE_TOKEN_LIFETIME
from tests.deployment.harness import TaskOutcome, outcome
from tests.deployment.scenarios import Stage, scenario

RUN_TIMEOUT = 300


@scenario("gke_google")
def gke_google(stage: Stage, name: str) -> TaskOutcome:
    dag_id = "gke_google"
    grants_before = stage.google.control("google")["grants"]
    run_id = stage.airflow.trigger(dag_id)
    stage.airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    seen = outcome(stage.airflow, dag_id, run_id, xcom_keys=("status",))
    requests = stage.google.control("requests")
    seen.extra["unauthorized"] = requests["unauthorized"]
    seen.extra["endpoints"] = sorted(requests["by_endpoint"])
    seen.extra["grants"] = stage.google.control("google")["grants"] - grants_before
    return seen


@pytest.mark.scenario("gke_google")
def test_a_deferred_wait_outlives_its_google_access_tokens(seen: TaskOutcome) -> None:
    assert (seen.state, seen.try_number) == ("success", 1)
    assert seen.xcom["status"]["phase"] == "succeeded"
    assert "step 100: loss=0.5" in seen.log()
    extra: dict[str, Any] = seen.extra
    assert extra["unauthorized"] == 0  # no request went out with an expired token
    assert extra["grants"] >= 15 // GOOGLE_TOKEN_LIFETIME  # renewed along the 15-second program
    assert extra["endpoints"] == ["public"]  # the endpoint the GKE API gave
