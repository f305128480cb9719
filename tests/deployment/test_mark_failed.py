"""A user marks the waiting task failed through the REST API: the job must not outlive the task."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from tests.deployment.harness import ConditionTimeout, TaskOutcome, outcome, wait_for
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import WAIT, gke_waiting, namespace, slurm_waiting

PLATFORMS = ("gke", "slurm_rest", "slurm_ssh", "service_rest", "service_ssh")
MODES = ("polling", "deferred")
CLEANUP_TIMEOUT = 45


@scenario("mark_failed[{platform}-{mode}]", platform=PLATFORMS, mode=MODES)
def mark_failed(stage: Stage, name: str, platform: str, mode: str) -> TaskOutcome:
    airflow = stage.airflow
    kind, _, transport = platform.partition("_")
    task_id = "service" if kind == "service" else "train"
    if kind == "gke":
        dag_id = f"gke_mark_failed_{mode}"
        run_id = airflow.trigger(dag_id)
        gke_waiting(stage, dag_id, run_id, mode)
    elif kind == "slurm":
        dag_id = f"slurm_mark_failed_{mode}_{transport}"
        run_id = airflow.trigger(dag_id, stage.slurm_conf)
        slurm_waiting(stage, dag_id, run_id, mode)
    else:
        dag_id = f"service_mark_failed_{mode}_{transport}"
        run_id = airflow.trigger(dag_id, stage.slurm_conf)
        # waiting for readiness that never comes, while the service and its worker array run
        wait_for(
            stage.slurm.path(dag_id, "written.env").exists,
            f"the service of {dag_id} to start its slices",
            WAIT,
            0.3,
        )
        _service_waiting(stage, dag_id, run_id, mode)
    with airflow.user_acting():  # until the kill had its chance to clean up
        airflow.mark_task_failed(dag_id, run_id, task_id)
        airflow.wait_run(dag_id, run_id, WAIT)
        seen = outcome(airflow, dag_id, run_id, task_id, xcom_keys=("job_id",))
        seen.extra["left"] = _wait_cleaned_up(stage, kind, dag_id, seen)
    return seen


def _service_waiting(stage: Stage, dag_id: str, run_id: str, mode: str) -> None:
    state = "deferred" if mode == "deferred" else "running"
    ti = stage.airflow.wait_ti(dag_id, run_id, "service", state, lambda t: t["state"] == state, WAIT)
    if mode == "deferred":
        stage.airflow.wait_workers_done([str(ti["id"])])


def _wait_cleaned_up(stage: Stage, kind: str, dag_id: str, seen: TaskOutcome) -> Any:
    """What is left of the job once it had time to go (at most ``CLEANUP_TIMEOUT`` seconds)."""
    if kind == "gke":

        def left() -> Any:
            return stage.kube.leftovers(namespace(dag_id))
    else:
        name = stage.slurm.job_name(dag_id)
        array = f"pathways-workers-{seen.xcom['job_id']}"

        def left() -> Any:
            return stage.slurm.active(name) + (stage.slurm.active(array) if kind == "service" else [])

    with contextlib.suppress(ConditionTimeout):
        wait_for(lambda: not left(), f"the job of {dag_id} to go", CLEANUP_TIMEOUT, 0.5)
    return left()


@pytest.mark.scenario("mark_failed[{platform}-{mode}]")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("platform", PLATFORMS)
def test_marking_the_task_failed_deletes_or_cancels_its_job(
    seen: TaskOutcome, platform: str, mode: str
) -> None:
    assert (seen.state, seen.try_number) == ("failed", 1)  # not retried
    assert not seen.extra["left"]  # no PathwaysJob/JobSet/pods; nothing in squeue, worker array included


@scenario("mark_failed_submitting")
def mark_failed_submitting(stage: Stage, name: str) -> TaskOutcome:
    """The service task is marked failed while its submission is held on its way to slurmrestd;
    the relay carries it out when the killed try sends its next request (its search for the job)."""
    airflow, dag_id = stage.airflow, "service_mark_failed_submitting"
    assert stage.slurm is not None and stage.held is not None
    job_name = stage.slurm.job_name(dag_id)
    stage.held.hold("/job/submit", job_name.encode())
    run_id = airflow.trigger(dag_id, stage.slurm_conf)
    wait_for(stage.held.held.is_set, f"the submission of {dag_id} to reach the relay", WAIT, 0.2)
    held = stage.held
    with airflow.user_acting():
        airflow.mark_task_failed(dag_id, run_id, "service")
        airflow.wait_run(dag_id, run_id, WAIT)  # failed at once; the kill follows at the next heartbeat
        wait_for(
            lambda: any("/job/submit" in request for request, _ in held.requests),
            f"the held submission of {dag_id} to reach slurmrestd",
            WAIT,
            0.2,
        )
        wait_for(
            lambda: "Killed while submitting" in airflow.task_log(dag_id, run_id, "service", 1),
            f"the killed try of {dag_id} to look for its job",
            WAIT,
            0.5,
        )
        seen = outcome(airflow, dag_id, run_id, "service", xcom_keys=("job_id",))
    slurm = stage.slurm

    def left() -> list[dict[str, str]]:
        arrays = [slurm.active(f"pathways-workers-{job}") for job in slurm.job_ids(job_name)]
        return slurm.active(job_name) + [task for array in arrays for task in array]

    with contextlib.suppress(ConditionTimeout):
        wait_for(lambda: not left(), f"the jobs of {dag_id} to go", CLEANUP_TIMEOUT, 0.5)
    seen.extra["left"] = left()
    seen.extra["jobs"] = slurm.queue(job_name)
    return seen


@pytest.mark.scenario("mark_failed_submitting")
def test_marking_the_task_failed_while_it_submits_cancels_the_job_the_submission_makes(
    seen: TaskOutcome,
) -> None:
    """The try knew no job id when it was killed, and slurmrestd made the service job after the
    kill began: the try's ``on_kill`` found it by its marker and cancelled it, so nothing runs
    unwatched (a soak found such a service and its worker array left running)."""
    assert (seen.state, seen.try_number) == ("failed", 1)
    assert [job["state"] for job in seen.extra["jobs"]] == ["CANCELLED"]  # made, then cancelled
    assert not seen.extra["left"]
    assert "Killed while submitting; ended Slurm job" in seen.log(1)
