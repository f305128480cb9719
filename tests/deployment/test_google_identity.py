"""A cluster reached with a Google identity, as from Cloud Composer: the deferred wait of a real
deployment outlives several access tokens (the stand-in issues them for 3 seconds), the triggerer
renews them as it goes, and nothing is ever sent with an expired one."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deployment.conftest import GOOGLE_TOKEN_LIFETIME
from tests.deployment.harness import TaskOutcome, outcome, wait_for
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import task_waiting

RUN_TIMEOUT = 300
RENEWALS = 15 // GOOGLE_TOKEN_LIFETIME  # tokens a 15-second wait needs


@scenario("gke_google")
def gke_google(stage: Stage, name: str) -> TaskOutcome:
    dag_id = "gke_google"
    grants_before = stage.google.control("google")["grants"]
    run_id = stage.airflow.trigger(dag_id)
    task_waiting(stage, dag_id, run_id, "deferred")
    # The program runs until the deferred wait has renewed its token several times (a program that
    # ends on its own could end before Airflow took in the deferral).
    wait_for(
        lambda: stage.google.control("google")["grants"] - grants_before >= RENEWALS,
        f"{RENEWALS} access tokens granted during the wait",
        RUN_TIMEOUT,
        1.0,
    )
    # The cluster reached with a Google identity is its own stand-in (not ``stage.kube``).
    jobsets = stage.google.request("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/gke-google/jobsets")
    for jobset in jobsets["items"]:
        stage.google.action("gke-google", jobset["metadata"]["name"], "complete-program")
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
    assert extra["grants"] >= RENEWALS  # renewed along the wait
    assert extra["endpoints"] == ["public"]  # the endpoint the GKE API gave
