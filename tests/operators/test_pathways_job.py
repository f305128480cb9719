"""PathwaysJobOperator end to end: real Airflow (dag.test) against the Kubernetes stand-in."""

from __future__ import annotations

import time
from typing import Any

import pytest

from airflow_provider_pathways.airflow_features import RETRY_POLICIES
from airflow_provider_pathways.gke.task_job import followed_by_try
from tests.support.airflow_runs import load_dag, run_dag
from tests.support.airflow_versions import (
    DEFERRED_EXECUTION_TIMEOUT,
    EXECUTION_TIMEOUT,
    RETRY_AFTER_DEFERRAL,
    TASK_LOG_IN_OUTPUT,
)
from tests.support.kube_jobs import act_when, stand_in_objects

DAGS = "gke_scenarios.py"
pytestmark = pytest.mark.usefixtures("kube")


def creates(kube: Any) -> int:
    return kube.control("requests")["by_verb_resource"].get("create pathwaysjobs", 0)


def running_jobset(kube: Any, namespace: str, min_ready: int = 1) -> str | None:
    for js in stand_in_objects(kube, "jobsets", namespace):
        for rjob in (js.get("status") or {}).get("replicatedJobsStatus") or []:
            if rjob.get("name") == "worker" and rjob.get("ready", 0) >= min_ready:
                return js["metadata"]["name"]
    return None


def test_training_runs_to_completion_in_the_triggerer_and_is_deleted(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    outcome = run_dag(load_dag(DAGS, "gke_train_deferrable"))["train"]
    logs = capfd.readouterr().out

    assert outcome.state == "success"
    status = outcome.xcom["status"]
    assert status["phase"] == "succeeded"
    assert status["slices_total"] == 2 and status["failure"] is None
    name = outcome.xcom["name"]
    assert outcome.xcom["proxy_address"] == f"grpc://{name}-pathways-head-0-0.{name}:29000"
    assert outcome.xcom["pathways_dir"] == "gs://pathways-test-bucket/scratch"
    # progress and the end of the program's log reach the task log
    assert "slices ready" in logs
    assert "step 200: loss=0.33" in logs and "saved model" in logs
    assert "loading checkpoint" not in logs  # only the last 3 lines
    # links are persisted for the UI
    assert outcome.xcom["_link_GKEWorkloadLink"].endswith(
        f"/kubernetes/job/us-east5/tpu-cluster/train-deferrable/{name}-pathways-head-0/details?project=my-project"
    )
    assert "logs/query" in outcome.xcom["_link_CloudLoggingLink"]
    # deleted on success, with everything it owned
    assert stand_in_objects(kube, "pathwaysjobs", "train-deferrable") == []
    assert stand_in_objects(kube, "jobsets", "train-deferrable") == []


def test_training_without_a_triggerer_polls_to_the_same_result(kube: Any) -> None:
    outcome = run_dag(load_dag(DAGS, "gke_train_polling"))["train"]
    assert outcome.state == "success"
    assert outcome.xcom["status"]["phase"] == "succeeded"
    assert stand_in_objects(kube, "pathwaysjobs", "train-polling") == []


def test_plain_jobset_mode_runs_without_the_pathways_controller(kube: Any) -> None:
    outcome = run_dag(load_dag(DAGS, "gke_jobset_mode"))["train"]
    assert outcome.state == "success"
    assert outcome.xcom["kind"] == "JobSet"
    assert stand_in_objects(kube, "pathwaysjobs", "jobset-mode") == []
    assert stand_in_objects(kube, "jobsets", "jobset-mode") == []


def test_failing_program_fails_at_once_with_its_exit_code_and_output(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    outcome = run_dag(load_dag(DAGS, "gke_program_fails"))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "failed"
    assert outcome.try_number == 1  # retries=3, yet no retry
    assert "exited with code 3" in logs
    assert "ValueError: bad batch" in logs
    if RETRY_POLICIES:  # the retry policy's reason for failing at once (Airflow 3.3+)
        assert "user program failed" in logs
    assert stand_in_objects(kube, "pathwaysjobs", "program-fails") == []


def test_topology_the_controller_rejects_fails_at_once_naming_it(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    outcome = run_dag(load_dag(DAGS, "gke_controller_rejects"))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "failed"
    assert outcome.try_number == 1
    assert "topology '3x3'" in logs and "ct6e-standard-4t" in logs
    assert outcome.xcom["status"]["failure"] == "spec_rejected"


@RETRY_AFTER_DEFERRAL
def test_preempted_slice_is_retried_and_never_runs_two_jobs_at_once(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    kube.control("requests/reset")
    namespace = "preempted"
    preempted: list[str] = []

    def preempt(name: str) -> None:
        preempted.append(name)
        kube.action(namespace, name, "preempt-slice", slice=1)

    watcher = act_when(lambda: running_jobset(kube, namespace, 2), preempt)
    outcome = run_dag(load_dag(DAGS, "gke_preempted_then_retried"))["train"]
    watcher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "success"
    assert outcome.try_number == 2
    if RETRY_POLICIES:  # the retry policy's reason (Airflow 3.3+)
        assert "preemption, retrying with backoff" in logs
    assert creates(kube) == 2  # the failed job was replaced once, after it was deleted
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


@RETRY_AFTER_DEFERRAL
@pytest.mark.end_to_end  # a rarer whole run (seconds): `make test` runs it
def test_preemption_is_retried_when_the_dag_sets_no_retries(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    namespace = "preempted-budget"
    dag = load_dag(DAGS, "gke_preempted_without_retries")
    assert dag.get_task("train").retries == 3  # the default preemption budget
    watcher = act_when(
        lambda: running_jobset(kube, namespace, 2),
        lambda name: kube.action(namespace, name, "preempt-slice", slice=1),
    )
    outcome = run_dag(dag)["train"]
    watcher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "success" and outcome.try_number == 2
    if RETRY_POLICIES:  # the retry policy's reason (Airflow 3.3+)
        assert "preemption, retrying with backoff" in logs
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


def test_a_failing_program_is_not_retried_by_the_preemption_budget(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    outcome = run_dag(load_dag(DAGS, "gke_program_fails_without_retries"))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "failed" and outcome.try_number == 1
    if RETRY_POLICIES:  # the retry policy's reason (Airflow 3.3+)
        assert "user program failed" in logs
    assert stand_in_objects(kube, "pathwaysjobs", "fails-budget") == []


@pytest.mark.slow
@DEFERRED_EXECUTION_TIMEOUT
def test_execution_timeout_ends_a_deferred_wait_and_deletes_the_job(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    outcome = run_dag(load_dag(DAGS, "gke_execution_timeout_deferred"))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "failed"
    assert time.monotonic() - started < 60  # the program would run for 120 s
    assert "within the task's execution_timeout" in logs
    assert stand_in_objects(kube, "pathwaysjobs", "deferred-timeout") == []


@RETRY_AFTER_DEFERRAL
def test_retry_reattaches_to_the_job_it_created(kube: Any, capfd: pytest.CaptureFixture[str]) -> None:
    kube.control("requests/reset")
    namespace = "suspended"
    uids: set[str] = set()

    def suspend(name: str) -> None:
        uids.add(stand_in_objects(kube, "pathwaysjobs", namespace)[0]["metadata"]["uid"])
        kube.action(namespace, name, "suspend")

    def followed_by_second_try() -> str | None:
        for job in stand_in_objects(kube, "pathwaysjobs", namespace):
            if followed_by_try(job) == 2:
                return running_jobset(kube, namespace, 1)
        return None

    watcher = act_when(lambda: running_jobset(kube, namespace, 1), suspend)
    # the job's program ends only once the retry follows it, however long the retry takes to start
    finisher = act_when(
        followed_by_second_try, lambda name: kube.action(namespace, name, "complete-program"), timeout=60
    )
    outcome = run_dag(load_dag(DAGS, "gke_suspended_reattach"))["train"]
    watcher.join(5)
    finisher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == [] and finisher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "success"
    assert outcome.try_number == 2
    if TASK_LOG_IN_OUTPUT:
        assert "Reattaching to PathwaysJob suspended/" in logs
    assert creates(kube) == 1
    assert len(uids) == 1


def test_a_suspended_job_found_by_its_owner_labels_is_followed_not_doubled(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """A suspended JobSet runs again once resumed (jobset: spec.suspend), so a try that finds its
    task instance's suspended job by owner labels follows it: a second job would run beside it."""
    kube.control("requests/reset")
    namespace = "left-suspended"

    def followed() -> bool:
        jobs = stand_in_objects(kube, "pathwaysjobs", namespace)
        return any(followed_by_try(job) == 1 for job in jobs)

    resumer = act_when(followed, lambda _: kube.action(namespace, "lost-try-job", "resume"), timeout=60)
    outcomes = run_dag(load_dag(DAGS, "gke_suspended_left_by_a_lost_try"))
    resumer.join(5)
    logs = capfd.readouterr().out
    assert resumer.failures == []  # type: ignore[attr-defined]
    assert outcomes["train"].state == "success" and outcomes["train"].try_number == 1
    assert outcomes["train"].xcom["name"] == "lost-try-job"
    if TASK_LOG_IN_OUTPUT:
        assert "Reattaching to PathwaysJob left-suspended/lost-try-job" in logs
    assert creates(kube) == 1  # the lost try's; the task made none
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


@EXECUTION_TIMEOUT
def test_killed_task_deletes_its_job_and_a_second_kill_is_harmless(kube: Any) -> None:
    dag = load_dag(DAGS, "gke_kill_on_timeout")
    outcome = run_dag(dag)["train"]
    assert outcome.state == "failed"
    assert stand_in_objects(kube, "pathwaysjobs", "killed") == []
    dag.get_task("train").on_kill()  # again: the job is already gone
    assert stand_in_objects(kube, "pathwaysjobs", "killed") == []


@RETRY_AFTER_DEFERRAL
@pytest.mark.parametrize("retries", [2, 0])
def test_a_job_suspended_for_good_is_replaced_by_the_retry_and_deleted_by_the_last_try(
    kube: Any, capfd: pytest.CaptureFixture[str], retries: int
) -> None:
    """``fail_on_suspend=True`` without "failure" in ``delete_on``: each retry followed the same
    suspended job and failed on it again at once, spending every retry. The retry replaces it; the
    last try deletes it (once resumed it would run unwatched)."""
    kube.control("requests/reset")
    namespace = f"suspended-retries-{retries}"
    first: list[str] = []

    def suspend(name: str) -> None:
        first.append(stand_in_objects(kube, "jobsets", namespace)[0]["metadata"]["uid"])
        kube.action(namespace, name, "suspend")

    def fresh_job_running() -> str | None:
        for js in stand_in_objects(kube, "jobsets", namespace):
            ready = [r.get("ready", 0) for r in (js.get("status") or {}).get("replicatedJobsStatus") or []]
            if first and js["metadata"]["uid"] not in first and any(ready):
                return str(js["metadata"]["name"])
        return None

    watcher = act_when(lambda: running_jobset(kube, namespace, 1), suspend)
    finisher = act_when(
        fresh_job_running, lambda name: kube.action(namespace, name, "complete-program"), timeout=60
    )
    outcome = run_dag(load_dag(DAGS, f"gke_suspended_retries_{retries}"))["train"]
    watcher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert [js["metadata"]["uid"] for js in stand_in_objects(kube, "jobsets", namespace)
            if js["metadata"]["uid"] in first] == []  # fmt: skip
    if retries:
        finisher.join(5)
        assert (outcome.state, outcome.try_number) == ("success", 2)
        assert creates(kube) == 2
        if TASK_LOG_IN_OUTPUT:
            # the kept job (task_state_store, Airflow 3.3), or the job found by its owner labels
            assert (
                "is still suspended, and an earlier try failed on that suspension" in logs
                or "created by an earlier try of this task instance, is suspended; deleting it" in logs
            )
    else:
        assert (outcome.state, outcome.try_number) == ("failed", 1)
        assert creates(kube) == 1 and stand_in_objects(kube, "pathwaysjobs", namespace) == []


@pytest.mark.slow  # waits out a timeout of seconds
@pytest.mark.versioned  # the alarm and the deferral deadline differ by Airflow version
@EXECUTION_TIMEOUT
@pytest.mark.parametrize(("events", "kept"), [(("success", "failure"), False), (("kill",), True)])
def test_a_polling_try_past_its_execution_timeout_applies_the_failure_policy(
    kube: Any, capfd: pytest.CaptureFixture[str], events: tuple[str, ...], kept: bool
) -> None:
    """The timeout is the try's failure, not a kill (docs/outcomes.rst, *Giving up*): with
    ``delete_on=("success", "failure")`` the job is deleted (Airflow's alarm calls ``on_kill``, and
    an operator that looked only at "kill" left it running); with ``("kill",)`` it is kept."""
    outcome = run_dag(load_dag(DAGS, f"gke_timeout_delete_on_{'_'.join(events)}"))["train"]
    logs = capfd.readouterr().out
    assert (outcome.state, outcome.try_number) == ("failed", 1)
    if TASK_LOG_IN_OUTPUT:
        assert "within the task's execution_timeout" in logs
    jobs = stand_in_objects(kube, "pathwaysjobs", f"timeout-{'-'.join(events)}")
    assert [job["metadata"].get("deletionTimestamp") is None for job in jobs] == ([True] if kept else [])


@pytest.mark.slow  # waits out a timeout of seconds
@pytest.mark.versioned  # the alarm and the deferral deadline differ by Airflow version
@DEFERRED_EXECUTION_TIMEOUT
@pytest.mark.parametrize(("events", "kept"), [(("success", "failure"), False), (("kill",), True)])
def test_a_deferred_try_past_its_execution_timeout_applies_the_failure_policy(
    kube: Any, capfd: pytest.CaptureFixture[str], events: tuple[str, ...], kept: bool
) -> None:
    """The trigger's timeout event at the try's ``execution_timeout`` gives up on the job as the
    failure policy says (on Airflow 2, tests/operators/test_deferred_execution_timeout.py)."""
    outcome = run_dag(load_dag(DAGS, f"gke_deferred_timeout_delete_on_{'_'.join(events)}"))["train"]
    logs = capfd.readouterr().out
    assert (outcome.state, outcome.try_number) == ("failed", 1)
    if TASK_LOG_IN_OUTPUT:
        assert "within the task's execution_timeout" in logs
    jobs = stand_in_objects(kube, "pathwaysjobs", f"deferred-timeout-{'-'.join(events)}")
    assert [job["metadata"].get("deletionTimestamp") is None for job in jobs] == ([True] if kept else [])


def test_invalid_specs_fail_before_anything_is_sent(kube: Any, capfd: pytest.CaptureFixture[str]) -> None:
    from tests.support.airflow_runs import _module

    cases = _module(DAGS).INVALID_SPECS
    assert len(cases) >= 20
    kube.control("requests/reset")
    outcomes = run_dag(load_dag(DAGS, "gke_invalid_specs"))
    logs = capfd.readouterr().out
    for task_id, field, _manifest in cases:
        assert outcomes[task_id].state == "failed", task_id
        assert outcomes[task_id].try_number == 1, task_id  # a rejected spec is not retried
        assert field in logs, f"{task_id}: no error naming {field}"
    counts = kube.control("requests")["by_verb"]
    assert counts.get("create", 0) == 0
    assert stand_in_objects(kube, "pathwaysjobs", "invalid-specs") == []


def test_teardown_of_a_job_that_is_already_gone_succeeds(kube: Any) -> None:
    outcome = run_dag(load_dag(DAGS, "gke_delete_missing"))["teardown"]
    assert outcome.state == "success"
    assert outcome.xcom["return_value"] is False


@pytest.mark.end_to_end  # a rarer whole run (seconds): `make test` runs it
@pytest.mark.versioned  # XComArg and mapping resolve differently per Airflow version
def test_mapped_tasks_each_follow_their_own_job_deferred_and_polling(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    outcomes = run_dag(load_dag(DAGS, "gke_mapped"))
    logs = capfd.readouterr().out
    for mode in ("deferred", "polling"):
        names = set()
        for index in range(3):
            outcome = outcomes[f"train_{mode}[{index}]"]
            assert outcome.state == "success", (mode, index)
            result = outcome.xcom["return_value"]
            assert result["name"] == outcome.xcom["name"] == outcome.xcom["status"]["name"], (mode, index)
            assert result["status"]["phase"] == "succeeded", (mode, index)
            names.add(result["name"])
        assert len(names) == 3, mode  # three jobs, each index reporting its own
        assert stand_in_objects(kube, "pathwaysjobs", f"mapped-{mode}") == []
    for index in range(3):
        assert f"shard {index} done" in logs
