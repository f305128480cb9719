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


def test_a_preempted_job_fails_the_sensor_as_a_preemption(kube: Any) -> None:
    from airflow_provider_pathways.failures import PathwaysPreempted
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
    from airflow_provider_pathways.sensors.pathways_job import PathwaysJobReadySensor
    from tests.kube_jobs import CONN, new_spec, wait_for

    namespace = "sensor-preempted"
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    spec = new_spec(namespace, headless=True, max_ready_slices=1)
    hook.create_job(spec.to_pathwaysjob(), namespace)
    wait_for(lambda: hook.get_status(spec.name, namespace).slices_ready >= 1, what="a slice to come up")
    kube.action(namespace, spec.name, "preempt-slice", slice=0)
    wait_for(lambda: hook.get_status(spec.name, namespace).terminal, what="the job to fail", timeout=30)
    sensor = PathwaysJobReadySensor(
        task_id="ready", job_name=spec.name, namespace=namespace, kubernetes_conn_id=CONN, min_slices=2
    )
    with pytest.raises(PathwaysPreempted, match="will never be ready"):
        sensor.poke({})  # type: ignore[arg-type]
    hook.delete_job(spec.name, namespace)
