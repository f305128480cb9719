"""Truthful outcomes of PathwaysJobOperator (dag.test against the Kubernetes stand-in): deletion by
someone else, a kubelet eviction for the pod's own storage use, a wait for ``ready`` that the job
outran, cleanup that fails, and outages longer than the task tolerates."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowException
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_0_PLUS

from airflow_provider_pathways.airflow_features import RETRY_POLICIES
from airflow_provider_pathways.gke.task_job import RELEASE_ATTEMPTS
from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator
from tests.dags.gke_scenarios import knobs, spec
from tests.operators.test_pathways_job import running_jobset
from tests.support.airflow_runs import load_dag, run_dag
from tests.support.airflow_versions import TASK_LOG_IN_OUTPUT
from tests.support.kube_jobs import CONN, act_when, held_for, relayed_connection, stand_in_objects
from tests.support.lost_answer import LosingRelay
from tests.support.task_kill import FirstTry, killed_when

DAGS = "gke_scenarios.py"
pytestmark = pytest.mark.usefixtures("kube")
JOBSET_API = "/apis/jobset.x-k8s.io/v1alpha2"
PATHWAYSJOB_API = "/apis/pathways-job.pathways.domain/v1"


def requests(kube: Any, verb_resource: str) -> int:
    return int(kube.control("requests")["by_verb_resource"].get(verb_resource, 0))


def test_a_job_deleted_by_someone_else_is_an_infrastructure_failure_and_retried(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """Not an unknown end: nobody else's deletion says anything about the program, and the
    preemption budget retries it with a fresh job."""
    kube.control("requests/reset")
    namespace = "deleted-elsewhere"
    watcher = act_when(
        lambda: running_jobset(kube, namespace, 2),
        lambda name: kube.request("DELETE", f"{PATHWAYSJOB_API}/namespaces/{namespace}/pathwaysjobs/{name}"),
    )
    outcome = run_dag(load_dag(DAGS, "gke_deleted_elsewhere"))["train"]
    watcher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "success" and outcome.try_number == 2
    if RETRY_POLICIES:  # the retry policy's reason (Airflow 3.3+)
        assert "infrastructure failure, retrying with backoff" in logs
    assert "someone else deleted it" in logs
    assert requests(kube, "create pathwaysjobs") == 2
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


def test_a_job_being_deleted_is_terminating_not_running(kube: Any, capfd: pytest.CaptureFixture[str]) -> None:
    """A finalizer holds the JobSet after someone deleted it: its status still counts ready slices
    (jobset_controller.go does not reconcile a JobSet marked for deletion), yet it will never end.
    The try fails as an infrastructure failure; the retry waits until it is gone, then starts
    afresh."""
    from airflow_provider_pathways.gke.objects import JOBSET
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

    kube.control("requests/reset")
    namespace = "terminating"
    client = PathwaysJobHook(kubernetes_conn_id=CONN).custom_object_client

    def finalizers(name: str, value: list[str] | None) -> None:  # a merge patch, as kubectl's
        client.patch_namespaced_custom_object(
            **JOBSET.object_coordinates(namespace, name), body={"metadata": {"finalizers": value}}
        )

    def delete_held(name: str) -> None:
        finalizers(name, ["example.com/hold"])
        kube.request(
            "DELETE",
            f"{JOBSET_API}/namespaces/{namespace}/jobsets/{name}",
            {"propagationPolicy": "Foreground"},
        )

    def release(name: str) -> None:
        finalizers(name, None)

    held: list[str] = []
    deleting = act_when(
        lambda: running_jobset(kube, namespace, 2), lambda n: (held.append(n), delete_held(n))
    )
    # the retry deletes the terminating job again and waits for it to go: then the hold ends
    releasing = act_when(
        lambda: held and requests(kube, "delete jobsets") >= 2 and held[0], release, timeout=60
    )
    outcome = run_dag(load_dag(DAGS, "gke_terminating"))["train"]
    deleting.join(5)
    releasing.join(5)
    logs = capfd.readouterr().out
    assert deleting.failures == [] and releasing.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "success" and outcome.try_number == 2
    assert "is being deleted (deletionTimestamp" in logs
    if RETRY_POLICIES:  # the retry policy's reason (Airflow 3.3+)
        assert "infrastructure failure, retrying with backoff" in logs
    assert requests(kube, "create jobsets") == 2
    assert stand_in_objects(kube, "jobsets", namespace) == []


def test_a_pod_evicted_for_its_own_storage_use_fails_at_once(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """The kubelet evicts the head pod for writing past its container's ephemeral-storage limit
    (eviction_manager.go localStorageEviction): the program's failure, not a preemption, so the
    task's retries are not spent running it again."""
    namespace = "storage-evicted"
    watcher = act_when(
        lambda: running_jobset(kube, namespace, 2),
        lambda name: kube.action(
            namespace, name, "exceed-ephemeral-storage", slice=0, replicatedJob="pathways-head", limit="1Gi"
        ),
    )
    outcome = run_dag(load_dag(DAGS, "gke_evicted_for_storage"))["train"]
    watcher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "failed" and outcome.try_number == 1  # retries=2, yet no retry
    assert outcome.xcom["status"]["failure"] == "user_program_failed"
    assert 'exceeded its local ephemeral storage limit "1Gi"' in logs
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


def test_waiting_for_ready_fails_when_the_job_ends_first(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """One slice never becomes ready; the program ends anyway: nothing is ready to serve later tasks."""
    namespace = "before-ready"

    def head_running(_: Any) -> str | None:
        for js in stand_in_objects(kube, "jobsets", namespace):
            for rjob in (js.get("status") or {}).get("replicatedJobsStatus") or []:
                if rjob.get("name") == "pathways-head" and rjob.get("ready", 0) >= 1:
                    return str(js["metadata"]["name"])
        return None

    watcher = act_when(
        lambda: head_running(None), lambda name: kube.action(namespace, name, "complete-program")
    )
    outcome = run_dag(load_dag(DAGS, "gke_succeeded_before_ready"))["start"]
    watcher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "failed" and outcome.try_number == 1
    assert outcome.xcom["status"]["phase"] == "succeeded"
    assert "ended (succeeded) before it was seen ready" in logs
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


def test_a_delete_that_meets_an_outage_is_tried_again_until_the_job_is_gone(
    kube: Any, faults: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """The job succeeded; the API server answers its delete with 503 for longer than one call's own
    retries: the cleanup rides the outage out (within ``outage_tolerance``) instead of leaving a job
    that bills its TPUs (a soak met an outage at a last try's cleanup)."""
    namespace = "delete-refused"
    faults(503, count=7, verb="DELETE")
    outcome = run_dag(load_dag(DAGS, "gke_delete_refused_after_success"))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "success" and outcome.try_number == 1
    assert "Could not delete PathwaysJob delete-refused/" in logs and "yet" in logs  # then it could
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


def test_a_refused_delete_after_success_does_not_fail_the_task(
    kube: Any, faults: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """The job succeeded; deleting it is cleanup: a failure is logged, the job left for a later
    DeletePathwaysJobOperator."""
    namespace = "delete-refused"
    faults(403, verb="DELETE")
    outcome = run_dag(load_dag(DAGS, "gke_delete_refused_after_success"))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "success" and outcome.try_number == 1
    assert outcome.xcom["status"]["phase"] == "succeeded"
    assert "Could not delete PathwaysJob delete-refused/" in logs and "HTTP 403" in logs
    (left,) = stand_in_objects(kube, "pathwaysjobs", namespace)
    kube.request(
        "DELETE", f"{PATHWAYSJOB_API}/namespaces/{namespace}/pathwaysjobs/{left['metadata']['name']}"
    )


def test_a_job_that_changes_before_every_delete_is_not_reported_deleted(
    kube: Any, faults: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """Each delete names the UID and resourceVersion it was decided on; when the API server answers
    409 Conflict to every one of them, nothing was deleted, and the log must not say it was."""
    namespace = "delete-refused"
    faults(409, count=RELEASE_ATTEMPTS, verb="DELETE")
    outcome = run_dag(load_dag(DAGS, "gke_delete_refused_after_success"))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "success" and outcome.try_number == 1
    assert f"changed before each of {RELEASE_ATTEMPTS} deletes (409 Conflict" in logs
    assert "it was not deleted" in logs and "was deleted" not in logs
    (left,) = stand_in_objects(kube, "pathwaysjobs", namespace)
    kube.request(
        "DELETE", f"{PATHWAYSJOB_API}/namespaces/{namespace}/pathwaysjobs/{left['metadata']['name']}"
    )


def test_a_refused_delete_after_preemption_still_reports_the_preemption(
    kube: Any, faults: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """The cleanup's failure does not hide the preemption: the budget retries it, and the retry
    replaces the job the cleanup could not delete."""
    kube.control("requests/reset")
    namespace = "delete-refused-preempted"
    faults(403, verb="DELETE")
    watcher = act_when(
        lambda: running_jobset(kube, namespace, 2),
        lambda name: kube.action(namespace, name, "preempt-slice", slice=1),
    )
    outcome = run_dag(load_dag(DAGS, "gke_delete_refused_after_preemption"))["train"]
    watcher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "success" and outcome.try_number == 2
    assert "Could not delete PathwaysJob delete-refused-preempted/" in logs
    if RETRY_POLICIES:  # the retry policy's reason (Airflow 3.3+)
        assert "preemption, retrying with backoff" in logs
    assert requests(kube, "create pathwaysjobs") == 2
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


def _outage(kube: Any, faults: Any, namespace: str) -> Any:
    """Once the job runs, every read fails: two looks of five attempts each, past a 1 s tolerance."""
    return act_when(
        lambda: running_jobset(kube, namespace, 2), lambda _name: faults(503, count=10, verb="GET")
    )


def test_a_create_that_outlasts_its_retries_is_retried_as_a_lost_watch_not_failed_unclassified(
    kube: Any, faults: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """With no ``retries`` in the DAG (the preemption budget: unclassified errors fail at once) a
    create whose every attempt failed (503) failed the task, though the job may have been made
    and would run unwatched. It is a lost watch: retried, and the retry finds or creates the job."""
    kube.control("requests/reset")
    faults(503, count=5, verb="POST")  # one create call's five attempts
    outcome = run_dag(load_dag(DAGS, "gke_create_outage"))["train"]
    logs = capfd.readouterr().out
    assert (outcome.state, outcome.try_number) == ("success", 2)
    assert "the answer to the submission was lost" in logs
    assert stand_in_objects(kube, "pathwaysjobs", "create-outage") == []


@pytest.mark.slow
def test_an_outage_on_the_last_try_deletes_the_job_it_gives_up_on(
    kube: Any, faults: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """No retry will follow the job: it must not run on unwatched."""
    namespace = "outage-last-try"
    watcher = _outage(kube, faults, namespace)
    outcome = run_dag(load_dag(DAGS, "gke_outage_on_the_last_try"))["train"]
    watcher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "failed" and outcome.try_number == 1
    assert "was unreachable for" in logs
    assert "this was the last try, so PathwaysJob outage-last-try/" in logs and "was deleted" in logs
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


@pytest.mark.slow
def test_an_outage_with_retries_left_keeps_the_job_for_the_retry(
    kube: Any, faults: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """A control-plane upgrade outlasts the tolerance: the try is retried (also on the preemption
    budget) and the retry follows the same job; nothing runs twice."""
    kube.control("requests/reset")
    namespace = "outage-retried"
    watcher = _outage(kube, faults, namespace)
    outcome = run_dag(load_dag(DAGS, "gke_outage_then_retried"))["train"]
    watcher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "success" and outcome.try_number == 2
    assert "is kept, and the next try reattaches to it" in logs
    assert "Reattaching to PathwaysJob outage-retried/" in logs
    assert requests(kube, "create pathwaysjobs") == 1
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


@pytest.mark.slow
def test_a_trigger_that_gives_up_keeps_the_job_for_the_retry(
    kube: Any, faults: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """The trigger's watch breaks and cannot be opened again within the tolerance: its ``error``
    event is a lost watch, retried on the preemption budget, and the retry follows the same job."""
    kube.control("requests/reset")
    namespace = "outage-deferred"

    def outage(_name: str) -> None:
        faults(503, count=4, verb="GET")  # the watch fails three times in 1 s; one more for slack
        kube.control("watches/drop")

    watcher = act_when(lambda: running_jobset(kube, namespace, 2), outage)
    outcome = run_dag(load_dag(DAGS, "gke_outage_deferred"))["train"]
    watcher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "success" and outcome.try_number == 2
    assert "was unreachable for" in logs and "is kept, and the next try reattaches to it" in logs
    assert "Reattaching to PathwaysJob outage-deferred/" in logs
    assert requests(kube, "create pathwaysjobs") == 1
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


def test_a_try_killed_while_creating_deletes_the_job_its_create_makes(
    kube: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user marks the task failed while its create is on its way to the API server: the try knows
    no job yet, and the API server makes the PathwaysJob only after the kill began (the relay
    carries the held create out once the try sends its next request). The try's ``on_kill`` finds
    the job by its owner labels and deletes it; the create's answer, arriving after that, changes
    nothing: the try fails, saying so."""
    namespace = "killed-creating"
    with LosingRelay("127.0.0.1", int(kube.url.rsplit(":", 1)[1])) as relay:
        relay.hold("/pathwaysjobs")
        monkeypatch.setenv("AIRFLOW_CONN_GKE_SLOW", relayed_connection(kube, relay.port, tmp_path))
        operator = PathwaysJobOperator(
            task_id="train",
            job=spec(),
            namespace=namespace,
            kubernetes_conn_id="gke_slow",
            retries=0,
            annotations=knobs(program_seconds=600),
        )
        killed = pytest.raises(AirflowException, match="killed while submitting")
        with killed_when(operator, relay.held), killed:
            operator.execute({"ti": FirstTry("gke_killed_submitting", "manual__killed_creating")})  # type: ignore[arg-type]
    logs = capfd.readouterr().out
    assert "Killed while submitting; ended PathwaysJob killed-creating/" in logs
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


def _mark_running_task_failed(dag_id: str) -> None:
    """What the UI's *Mark failed* does to a running task instance's row (the try is killed later,
    at its next heartbeat)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        (ti,) = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == dag_id, TaskInstance.state == TaskInstanceState.RUNNING
            )
        )
        ti.state = TaskInstanceState.FAILED


@pytest.mark.skipif(not AIRFLOW_V_3_0_PLUS, reason="Airflow 2 records a deferral over the marked state")
def test_a_task_instance_marked_failed_before_its_try_defers_ends_the_job(
    kube: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user marks the task failed while its create is on its way, before Airflow's heartbeat kills
    the try. Airflow 3 refuses to defer an ended task instance (the deferral's report fails), so no
    trigger would watch the job: the try reads its task instance's state before it defers, ends the
    job as the kill would, and stops (a soak found such a Slurm service left running)."""
    namespace = "marked-before-deferring"
    with LosingRelay("127.0.0.1", int(kube.url.rsplit(":", 1)[1])) as relay:
        relay.hold("/pathwaysjobs", until_next=False)
        monkeypatch.setenv("AIRFLOW_CONN_GKE_SLOW", relayed_connection(kube, relay.port, tmp_path))

        def mark_then_release() -> None:
            assert relay.held.wait(60), "the create never came"
            _mark_running_task_failed("gke_marked_before_deferring")
            relay.release()

        marker = threading.Thread(target=mark_then_release, daemon=True)
        marker.start()
        outcome = run_dag(load_dag(DAGS, "gke_marked_before_deferring"))["train"]
        marker.join(30)
    logs = capfd.readouterr().out
    assert outcome.state == "failed" and outcome.try_number == 1
    if TASK_LOG_IN_OUTPUT:
        assert "The task instance is failed now" in logs
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


def test_a_jobset_that_restarts_is_followed_through_its_restart_to_its_success(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """The program fails once; the JobSet (maxRestarts 1) restarts, its ``RestartingJobSet``
    condition True until every Job is ready again (jobset v0.12 ``failure_policy.go``,
    ``jobset_controller.go``): the wait reads it as active, not failed, and follows the restarted
    program to its success in the same try."""
    namespace = "restarting"
    watcher = act_when(
        held_for(1, lambda: running_jobset(kube, namespace, 2)),
        lambda name: kube.action(namespace, name, "fail-program", exit_code=1),
    )
    outcome = run_dag(load_dag(DAGS, "gke_restarting"))["train"]
    watcher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "success" and outcome.try_number == 1
    assert outcome.xcom["status"]["restarts"] == 1
    if TASK_LOG_IN_OUTPUT:
        assert "the JobSet is restarting" in logs
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []
