"""PathwaysJobReadySensor in poke and deferrable mode, through dag.test()."""

from __future__ import annotations

from typing import Any

import pytest

from tests.airflow_runs import load_dag, run_dag

pytestmark = pytest.mark.usefixtures("kube")


def test_ready_operator_and_sensors_report_readiness_and_the_proxy_address(kube: Any) -> None:
    outcomes = run_dag(load_dag("gke_scenarios.py", "gke_ready_then_sensor"))
    start, poke, all_slices = outcomes["start"], outcomes["ready_poke"], outcomes["all_slices_deferred"]
    name = start.xcom["name"]
    address = f"grpc://{name}-pathways-head-0-0.{name}:29000"

    assert start.state == "success"
    assert start.xcom["return_value"]["proxy_address"] == address
    status = start.xcom["status"]
    assert status["slices_ready"] >= 2 and status["head_ready"] and status["phase"] != "succeeded"
    # 2 of 3 slices ever come up: a sensor needing 2 succeeds with the address...
    assert poke.state == "success"
    assert poke.xcom["return_value"] == address
    # ...one needing every slice times out (in the triggerer, with its deadline)
    assert all_slices.state == "failed"
    # the job keeps running for downstream tasks: "ready" jobs are not deleted on success
    jobs = kube.request("GET", "/apis/pathways-job.pathways.domain/v1/namespaces/ready/pathwaysjobs")["items"]
    assert [j["metadata"]["name"] for j in jobs] == [name]
    kube.request("DELETE", f"/apis/pathways-job.pathways.domain/v1/namespaces/ready/pathwaysjobs/{name}")
