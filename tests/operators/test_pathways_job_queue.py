"""PathwaysJobOperator with Kueue, refused JobSets and lost nodes: real Airflow against the stand-in."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.support.airflow_runs import load_dag, run_dag
from tests.support.kube_jobs import act_when, stand_in_objects

DAGS = "gke_queue_scenarios.py"
pytestmark = pytest.mark.usefixtures("kube")


def running(kube: Any, namespace: str) -> str | None:
    for js in stand_in_objects(kube, "jobsets", namespace):
        for rjob in (js.get("status") or {}).get("replicatedJobsStatus") or []:
            if rjob.get("name") == "worker" and rjob.get("ready", 0) >= 2 and not js["spec"].get("suspend"):
                return js["metadata"]["name"]
    return None


@pytest.mark.parametrize("mode", ["deferred", "polling"])
def test_queued_job_waits_then_runs_without_using_a_retry(
    kube: Any, capfd: pytest.CaptureFixture[str], mode: str
) -> None:
    """kueue defaults.go: suspended at creation until admitted; that is queueing, not preemption."""
    outcome = run_dag(load_dag(DAGS, f"gke_queued_then_admitted_{mode}"))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "success" and outcome.try_number == 1  # retries=2, none used
    assert "queued in LocalQueue multislice-queue for" in logs and "phase queued" in logs
    assert "phase suspended" not in logs and "PathwaysPreempted" not in logs
    assert outcome.xcom["status"]["phase"] == "succeeded"
    assert stand_in_objects(kube, "pathwaysjobs", f"queued-{mode}") == []
    # the timeline marks its admission (Kueue held it 1.5 s): its start, when the JobSet began
    # creating its Jobs; its TPU-hours count from then, not from its submission
    (usage,) = outcome.xcom["tpu_hours"]["tries"]
    assert usage["admitted_later"] is True and usage["started"] - usage["submitted"] >= 1
    assert usage["started"] <= usage["ready"] <= usage["ended"]


@pytest.mark.parametrize("mode", ["deferred", "polling"])
def test_queue_timeout_gives_up_and_deletes_the_queued_job(
    kube: Any, capfd: pytest.CaptureFixture[str], mode: str
) -> None:
    """A job Kueue never admits: the try fails after queue_timeout and the job is deleted, so that
    it cannot start later with nobody watching."""
    started = time.monotonic()
    outcome = run_dag(load_dag(DAGS, f"gke_queue_timeout_{mode}"))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "failed" and outcome.try_number == 1
    assert "waited in LocalQueue multislice-queue" in logs and "queue_timeout (1.5s)" in logs
    assert time.monotonic() - started < 30
    assert stand_in_objects(kube, "pathwaysjobs", f"queue-timeout-{mode}") == []
    assert stand_in_objects(kube, "jobsets", f"queue-timeout-{mode}") == []


@pytest.mark.parametrize("mode", ["deferred", "polling"])
def test_queue_timeout_counts_a_job_kueue_keeps_evicting_before_it_starts_from_its_first_queueing(
    kube: Any, capfd: pytest.CaptureFixture[str], mode: str
) -> None:
    """kueue workload_types.go: Kueue 0.19's waitForPodsReady evicts an admitted Workload whose pods
    are not all ready in time (PodsReadyTimeout, from WaitForStart) and requeues it with backoff.
    Never started, the job waited all along: queue_timeout (2.5 s) counts from its first queueing
    and runs out although no stay in the queue lasts that long (about 1 s each: counted from the
    last eviction, the wait would end only at wait_timeout); the task fails, not as a preemption,
    and the job is deleted."""
    started = time.monotonic()
    outcome = run_dag(load_dag(DAGS, f"gke_pods_ready_timeout_{mode}"))["train"]
    logs = capfd.readouterr().out
    assert (outcome.state, outcome.try_number) == ("failed", 1)
    assert "waited in LocalQueue multislice-queue" in logs and "queue_timeout (2.5s)" in logs
    assert "did not start within Kueue's waitForPodsReady timeout (PodsReadyTimeout: " in logs
    assert "requeued 1 time" in logs  # seen queued again after an eviction, then timed out
    assert "after it ran" not in logs and "PathwaysPreempted" not in logs and "phase suspended" not in logs
    assert "within wait_timeout" not in logs
    assert time.monotonic() - started < 30
    assert stand_in_objects(kube, "pathwaysjobs", f"pods-ready-timeout-{mode}") == []
    assert stand_in_objects(kube, "jobsets", f"pods-ready-timeout-{mode}") == []


@pytest.mark.parametrize("mode", ["deferred", "polling"])
def test_a_wait_that_times_out_while_queued_deletes_the_job_whatever_delete_on_says(
    kube: Any, capfd: pytest.CaptureFixture[str], mode: str
) -> None:
    """docs/outcomes.rst, *Kueue*: a queued job the task abandons is deleted, else Kueue admits it
    later and it runs with nobody watching; here ``wait_timeout`` ends the wait and ``delete_on``
    has no "failure" (the deferred wait's timeout event carried no status, so the job was kept)."""
    outcome = run_dag(load_dag(DAGS, f"gke_wait_timeout_queued_{mode}"))["train"]
    logs = capfd.readouterr().out
    assert (outcome.state, outcome.try_number) == ("failed", 1)
    assert "within wait_timeout (2s)" in logs
    assert stand_in_objects(kube, "pathwaysjobs", f"wait-timeout-queued-{mode}") == []
    assert stand_in_objects(kube, "jobsets", f"wait-timeout-queued-{mode}") == []


def test_eviction_after_running_is_requeued_and_finishes_in_the_same_try(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """kueue workload_types.go: Evicted (Preempted) then Requeued; Kueue admits it again."""
    namespace = "evicted"
    evictor = act_when(
        lambda: running(kube, namespace),
        lambda name: kube.action(namespace, name, "evict", reason="Preempted", readmit="auto"),
    )
    outcome = run_dag(load_dag(DAGS, "gke_evicted_after_running"))["train"]
    evictor.join(5)
    assert not evictor.failures  # type: ignore[attr-defined]
    logs = capfd.readouterr().out
    assert outcome.state == "success" and outcome.try_number == 1
    assert "evicted by Kueue after it ran (Preempted" in logs


def test_lost_node_and_data_loss_is_preemption_and_is_retried(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """The lost slice's pods are gone; node-loss events and the program's DATA_LOSS say preemption."""
    namespace = "data-loss"
    loser = act_when(
        lambda: running(kube, namespace),
        lambda name: kube.action(namespace, name, "lose-node", slice=1, program="data-loss"),
    )
    outcome = run_dag(load_dag(DAGS, "gke_lost_node_data_loss"))["train"]
    loser.join(5)
    assert not loser.failures  # type: ignore[attr-defined]
    logs = capfd.readouterr().out
    assert outcome.state == "success" and outcome.try_number == 2
    assert "DATA_LOSS" in logs and "NodeNotReady" in logs
    assert "user_program_failed" not in logs


def test_name_jobset_refuses_fails_at_once_naming_the_limit(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """pathwaysjob_controller.go: the JobSet webhook refuses a 23-character name, the controller sets
    terminalState Failed and retries for ever; the task fails at once with the reason."""
    outcome = run_dag(load_dag(DAGS, "gke_long_name_refused"))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "failed" and outcome.try_number == 1
    assert outcome.xcom["status"]["failure"] == "spec_rejected"
    assert "23 characters" in logs and "at most 22" in logs
    assert "topology" not in outcome.xcom["status"]["message"]
    assert stand_in_objects(kube, "pathwaysjobs", "long-name") == []


def test_refused_jobset_with_a_valid_spec_is_an_infrastructure_failure(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """A webhook refuses the JobSet of a valid spec: retried as infrastructure, not blamed on the spec."""
    outcome = run_dag(load_dag(DAGS, "gke_create_refused"))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "failed" and outcome.try_number == 2  # retries=1 used
    assert outcome.xcom["status"]["failure"] == "infrastructure"
    assert "could not create the JobSet" in logs
    assert stand_in_objects(kube, "pathwaysjobs", "create-refused") == []
