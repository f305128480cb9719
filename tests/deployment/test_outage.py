"""The Kubernetes API server, slurmrestd or sshd is unreachable for 20 s while the task waits (deferred
and polling); the job ends during the outage. The task must end with the job's real outcome."""

from __future__ import annotations

import contextlib

import pytest

from airflow_provider_pathways import metrics
from tests.deployment.harness import TaskOutcome, outcome
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import gke_end_program, gke_waiting, namespace, slurm_waiting

SERVICES = ("kube", "rest", "ssh")
MODES = ("deferrable", "polling")
RUN_TIMEOUT = 300


@scenario("outage[{service}-{mode}]", drill="outage:{service}", service=SERVICES, mode=MODES)
def outage(stage: Stage, name: str, service: str, mode: str) -> TaskOutcome:
    airflow = stage.airflow
    if service == "kube":
        dag_id = f"gke_outage_{mode}"
        run_id = airflow.trigger(dag_id)
        job = gke_waiting(stage, dag_id, run_id, mode)

        def end_job() -> None:
            gke_end_program(stage, dag_id, job)
    else:
        dag_id = f"slurm_outage_{mode}_{service}"
        run_id = airflow.trigger(dag_id, stage.slurm_conf)
        slurm_waiting(stage, dag_id, run_id, mode)

        def end_job() -> None:
            stage.slurm.release(dag_id, 0)

    # a deferred wait rides out the outage in one trigger: no triggerer is killed meanwhile
    # (the failover scenarios kill the triggerer that runs their trigger, maybe this one's too),
    # and the outage begins once a live triggerer holds it (a trigger a killed triggerer held is
    # taken over later, maybe after the outage: the triggerer taking it over saw none)
    kept = airflow.triggerers_stay() if mode == "deferrable" else contextlib.nullcontext()
    with kept:
        if mode == "deferrable":
            airflow.wait_trigger_held(dag_id, run_id, "train")
        took = stage.drill(f"outage:{service}").arrive(name, end_job)
        airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    seen = outcome(airflow, dag_id, run_id, xcom_keys=("return_value",))
    seen.extra["outage"] = took
    if service == "kube":
        seen.extra["jobs"] = list(stage.kube.jobs_created(namespace(dag_id)))
        seen.extra["leftovers"] = stage.kube.leftovers(namespace(dag_id))
    else:
        seen.extra["jobs"] = stage.slurm.job_ids(stage.slurm.job_name(dag_id))
        seen.extra["leftovers"] = stage.slurm.active(stage.slurm.job_name(dag_id))
    return seen


@pytest.mark.scenario("outage[{service}-{mode}]")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("service", SERVICES)
def test_task_rides_out_the_outage_and_reports_the_jobs_real_outcome(
    seen: TaskOutcome, service: str, mode: str
) -> None:
    assert seen.extra["outage"]["seconds"] >= 20
    assert (seen.state, seen.try_number) == ("success", 1)
    result = seen.xcom["return_value"]
    if service == "kube":
        assert result["status"]["phase"] == "succeeded"
    else:
        assert result["state"] == "COMPLETED"
    assert len(seen.extra["jobs"]) == 1
    assert not seen.extra["leftovers"]


@pytest.mark.scenario("outage[{service}-deferrable]")
@pytest.mark.parametrize("service", SERVICES)
def test_a_deferred_wait_counts_its_reconnect_after_the_outage(
    seen: TaskOutcome, service: str, stage: Stage
) -> None:
    """The trigger that rode out the outage sends ``pathways.trigger.reconnects`` from the
    triggerer, tagged with its task."""
    assert (seen.state, seen.try_number) == ("success", 1)
    sent = stage.statsd.wait_for(metrics.TRIGGER_RECONNECTS.name, 1, dag_id=seen.dag_id, task_id=seen.task_id)
    backend = "gke" if service == "kube" else "slurm"
    assert {(tags["backend"], value, kind) for tags, value, kind in sent} == {(backend, 1.0, "c")}
