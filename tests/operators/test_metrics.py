"""The provider's metrics as a StatsD server receives them, and each try's TPU-hours: a GKE job
preempted and retried under ``dag.test()`` against the Kubernetes stand-in, with Airflow's
``[metrics]`` settings (StatsD, InfluxDB-style tags) given through the environment and a UDP socket
on 127.0.0.1 receiving the datagrams."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_3_PLUS

from airflow_provider_pathways import metrics
from tests.operators.test_pathways_job import running_jobset
from tests.support.airflow_runs import load_dag, run_dag
from tests.support.airflow_versions import RETRY_AFTER_DEFERRAL, TASK_LOG_IN_OUTPUT
from tests.support.kube_jobs import act_when, held_for, stand_in_objects
from tests.support.statsd_server import StatsdListener, reset_airflow_stats

pytestmark = pytest.mark.usefixtures("kube")


@pytest.fixture
def statsd() -> Iterator[StatsdListener]:
    """Airflow's metrics sent over StatsD (with tags) to a listener for the test's length."""
    listener = StatsdListener()
    with pytest.MonkeyPatch.context() as environment:
        for key, value in listener.settings().items():
            environment.setenv(key, value)
        reset_airflow_stats()
        yield listener
    reset_airflow_stats()  # with the settings of before
    listener.close()


@RETRY_AFTER_DEFERRAL
@pytest.mark.end_to_end  # a preempted and retried DAG run: `make test` runs it
@pytest.mark.versioned
def test_a_preempted_and_retried_job_sends_its_metrics_and_reports_tpu_hours(
    kube: Any, statsd: StatsdListener, capfd: pytest.CaptureFixture[str]
) -> None:
    namespace = "metrics-preempted"
    # preempted after holding its chips 2 s: the cluster records moments in whole seconds, and a job
    # preempted within the second it started ran for 0 recorded TPU-hours
    watcher = act_when(
        held_for(2, lambda: running_jobset(kube, namespace, 2)),
        lambda name: kube.action(namespace, name, "preempt-slice", slice=1),
    )
    outcome = run_dag(load_dag("gke_scenarios.py", "gke_metrics_preempted"))["train"]
    watcher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "success" and outcome.try_number == 2

    tags = {
        "dag_id": "gke_metrics_preempted",
        "task_id": "train",
        "backend": "gke",
        "tpu_type": "v5litepod-16",
    }
    # each try's job ended (preempted, then succeeded); the second was seen running and ready (the
    # first may have been preempted before its trigger's first look)
    ended = statsd.wait_for(metrics.TIME_TO_FINISH.name, 2)
    for metric in (metrics.QUEUE_WAIT, metrics.TIME_TO_READY):
        assert len(statsd.wait_for(metric.name, 1)) in (1, 2), metric.name
    for metric in (metrics.QUEUE_WAIT, metrics.TIME_TO_READY, metrics.TIME_TO_FINISH):
        sent = statsd.metrics(metric.name)
        assert {(tuple(sorted(t.items())), kind) for t, _, kind in sent} == {
            (tuple(sorted(tags.items())), "ms")
        }
        assert all(0 <= value < 120_000 for _, value, _ in sent), sent
    assert len(ended) == 2
    (preempted,) = statsd.wait_for(metrics.PREEMPTIONS.name, 1)
    assert preempted == (tags, 1.0, "c")
    hours = statsd.wait_for(metrics.TPU_HOURS.name, 2)
    assert [(t, kind) for t, _, kind in hours] == [(tags, "g")] * 2

    usage = outcome.xcom["tpu_hours"]
    if AIRFLOW_V_3_3_PLUS:  # task_state_store keeps each try's record for the next
        first, second = usage["tries"]
        assert (first["try_number"], first["preempted"]) == (1, True)
        assert usage["unrecorded_tries"] == 0 and usage["complete"] is True
    else:  # nothing survives a try: the total is the last try's, marked a lower bound
        (second,) = usage["tries"]
        assert usage["unrecorded_tries"] == 1 and usage["complete"] is False
        first = {"tpu_hours": hours[0][1]}  # the first try's gauge is its only record
    assert (second["try_number"], second["preempted"]) == (2, False)
    for one in usage["tries"]:  # v5litepod-16: 16 chips a slice, 2 slices
        assert (one["chips_per_slice"], one["slices"], one["tpu_type"]) == (16, 2, "v5litepod-16")
        assert one["unknown"] is None and one["tpu_hours"] > 0
        assert one["tpu_hours"] == pytest.approx(32 * (one["ended"] - one["started"]) / 3600)
    assert [value for _, value, _ in hours] == pytest.approx(
        [first["tpu_hours"], second["tpu_hours"]], rel=1e-3
    )
    if AIRFLOW_V_3_3_PLUS:
        assert usage["total"] == pytest.approx(first["tpu_hours"] + second["tpu_hours"], abs=1e-5)
        assert usage["lost_to_preemption"] == pytest.approx(first["tpu_hours"], abs=1e-5)
        assert 0 < usage["lost_share"] < 1
    else:
        assert usage["total"] == pytest.approx(second["tpu_hours"], abs=1e-5)
    if TASK_LOG_IN_OUTPUT:
        assert "TPU-hours: try 2 " in logs
        assert ("lost to preempted tries" if AIRFLOW_V_3_3_PLUS else "1 earlier not recorded") in logs
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []
    if AIRFLOW_V_3_0_PLUS:  # the timeline view reads the run as the metadata database holds it
        from airflow_provider_pathways.plugins.timeline import read_run

        rows = read_run("gke_metrics_preempted", outcome.run_id).tries
        assert [(r.task, r.try_number) for r in rows] == [("train", 1), ("train", 2)]
        assert rows[1].state == "success"  # (the first try's history state differs by version)
        assert rows[1].ready is not None and rows[1].tpu_hours == second["tpu_hours"]
        assert rows[0].preempted is AIRFLOW_V_3_3_PLUS  # before 3.3 XCom holds the last try only


def test_a_metric_that_cannot_be_sent_is_dropped_and_only_its_tags_go(statsd: StatsdListener) -> None:
    """A metric whose value cannot be sent is dropped, not raised."""
    metrics.emit(metrics.PREEMPTIONS, float("nan"), {"dag_id": "d"})
    metrics.emit(metrics.CACHE_BYTES_FREED, 5, {"dag_id": "d", "task_id": "t", "backend": "dropped"})
    (sent,) = statsd.wait_for(metrics.CACHE_BYTES_FREED.name, 1)
    assert sent == ({"dag_id": "d", "task_id": "t"}, 5.0, "c")  # only the metric's own tags


def seconds_between(job: dict[str, Any], start: str, end: str) -> float:
    return (datetime.fromisoformat(job[end]) - datetime.fromisoformat(job[start])).total_seconds()


@pytest.mark.slurm
@pytest.mark.parametrize("conn", ["slurm_rest", "slurm_ssh"])
def test_a_slurm_job_sends_the_times_slurm_recorded(
    slurm_cluster: dict[str, str], conn: str, statsd: StatsdListener
) -> None:
    from tests.operators.test_slurm import params

    dag_id = "slurm_workload_fails"
    outcome = run_dag(load_dag("slurm_scenarios.py", dag_id), params(slurm_cluster, conn))["train"]
    assert outcome.state == "failed"
    job = outcome.xcom["job"]  # the record the task ended with, as Slurm reported it
    tags = {"dag_id": dag_id, "task_id": "train", "backend": "slurm"}  # no TPU type on Slurm
    (queued,) = statsd.wait_for(metrics.QUEUE_WAIT.name, 1)
    (finished,) = statsd.wait_for(metrics.TIME_TO_FINISH.name, 1)
    assert queued == (tags, pytest.approx(1000 * seconds_between(job, "submit_time", "start_time")), "ms")
    assert finished == (tags, pytest.approx(1000 * seconds_between(job, "submit_time", "end_time")), "ms")
    assert statsd.metrics(metrics.PREEMPTIONS.name) == []  # a user error, not a preemption
    assert statsd.metrics(metrics.TPU_HOURS.name) == []


@pytest.mark.slurm
def test_a_slurm_service_sends_its_time_to_ready_deferred_and_polling(
    slurm_cluster: dict[str, str], statsd: StatsdListener
) -> None:
    from tests.operators.test_slurm import params

    env = f"{slurm_cluster['SLURM_SANDBOX_USER_HOME']}/pathways/tests/{uuid.uuid4().hex}.env"
    started = time.time()
    outcomes = run_dag(
        load_dag("slurm_scenarios.py", "slurm_service_ready"),
        params(slurm_cluster, "slurm_rest", cluster_env=env),
    )
    took = time.time() - started
    ready = statsd.wait_for(metrics.TIME_TO_READY.name, 2)
    queued = statsd.wait_for(metrics.QUEUE_WAIT.name, 2)
    for mode in ("deferred", "polling"):
        assert outcomes[f"service_{mode}"].state == "success", mode
        tags = {"dag_id": "slurm_service_ready", "task_id": f"service_{mode}", "backend": "slurm"}
        (to_ready,) = [value for t, value, kind in ready if t == tags and kind == "ms"]
        (to_start,) = [value for t, value, kind in queued if t == tags and kind == "ms"]
        # the service starts, then its slices come up and cluster.env is written: ready after start
        assert 0 <= to_start <= to_ready < 1000 * took, (mode, to_start, to_ready)
    assert statsd.metrics(metrics.TIME_TO_FINISH.name) == []  # the service outlives its wait
