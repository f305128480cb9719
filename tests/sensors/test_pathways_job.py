"""PathwaysJobReadySensor in poke and deferrable mode, through dag.test()."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.airflow_runs import load_dag, run_dag

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
    from tests.support.kube_jobs import CONN, new_spec, wait_for

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


def test_a_dead_job_fails_the_sensor_without_retries_and_rerunning_its_group_recreates_it(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """The DAG sets retries=2: a sensor whose job was preempted (deferred) or deleted (polling)
    fails at its first try all the same; a rerun of the task group in the same DAG run (what
    clearing it does) makes the job again under its name and the sensor then succeeds."""
    import pendulum

    from tests.support.kube_jobs import act_when, stand_in_objects

    dag = load_dag("gke_scenarios.py", "gke_headless_group")
    when = pendulum.datetime(2026, 3, 1, tz="UTC")
    preempt = act_when(
        lambda: _running_slice(kube, "headless-deferred"),
        lambda name: kube.action("headless-deferred", name, "preempt-slice", slice=0),
    )
    delete = act_when(
        lambda: [j["metadata"]["name"] for j in stand_in_objects(kube, "pathwaysjobs", "headless-polling")],
        lambda names: kube.request(
            "DELETE",
            f"/apis/pathways-job.pathways.domain/v1/namespaces/headless-polling/pathwaysjobs/{names[0]}",
        ),
    )
    first = run_dag(dag, logical_date=when, run_after=when)
    preempt.join(5)
    delete.join(5)
    logs = capfd.readouterr().out
    assert preempt.failures == [] and delete.failures == []  # type: ignore[attr-defined]
    for mode, failure in (("deferred", "preempted"), ("polling", "infrastructure")):
        ready = first[f"pathways_{mode}.ready"]
        assert first[f"pathways_{mode}.start"].state == "success", mode
        assert (ready.state, ready.try_number) == ("failed", 1), mode  # no retry spent on a dead job
        assert f"will never be ready ({failure})" in logs, mode

    again = run_dag(dag, logical_date=when, run_after=when)
    for mode in ("deferred", "polling"):
        name = again[f"pathways_{mode}.start"].xcom["name"]
        assert name == first[f"pathways_{mode}.start"].xcom["name"], mode  # the same job name...
        ready = again[f"pathways_{mode}.ready"]
        assert (ready.state, ready.try_number) == ("success", 1), mode  # ...a live job behind it
        assert ready.xcom["return_value"] == f"grpc://{name}-pathways-head-0-0.{name}:29000", mode
        for job in stand_in_objects(kube, "pathwaysjobs", f"headless-{mode}"):
            kube.request(
                "DELETE",
                f"/apis/pathways-job.pathways.domain/v1/namespaces/headless-{mode}/pathwaysjobs/"
                f"{job['metadata']['name']}",
            )


def _running_slice(kube: Any, namespace: str) -> str | None:
    """The name of the job in ``namespace`` once one of its slices is ready."""
    from tests.support.kube_jobs import stand_in_objects

    for js in stand_in_objects(kube, "jobsets", namespace):
        for rjob in (js.get("status") or {}).get("replicatedJobsStatus") or []:
            if rjob.get("name") == "worker" and rjob.get("ready", 0) >= 1:
                return str(js["metadata"]["name"])
    return None


def test_mapped_sensors_each_wait_for_their_own_job_deferred_and_polling(kube: Any) -> None:
    from tests.support.kube_jobs import stand_in_objects

    outcomes = run_dag(load_dag("gke_scenarios.py", "gke_mapped_headless"))
    for mode in ("deferred", "polling"):
        namespace = f"mapped-headless-{mode}"
        names = set()
        for index in range(3):
            name = outcomes[f"start_{mode}[{index}]"].xcom["name"]
            ready = outcomes[f"ready_{mode}[{index}]"]
            assert ready.state == "success", (mode, index)
            assert ready.xcom["return_value"] == f"grpc://{name}-pathways-head-0-0.{name}:29000", (
                mode,
                index,
            )
            names.add(name)
        assert len(names) == 3, mode
        for job in stand_in_objects(kube, "pathwaysjobs", namespace):
            kube.request(
                "DELETE",
                f"/apis/pathways-job.pathways.domain/v1/namespaces/{namespace}/pathwaysjobs/{job['metadata']['name']}",
            )
