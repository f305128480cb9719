"""The worker dies (SIGKILL of the task process and its supervisor) during a polling wait.

The scheduler notices the missing heartbeats and retries the task; the retry must reattach to the
job the first try made. Then the job succeeds, fails (exit 3) or is preempted; or it fails while no
worker is alive at all.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_pathways.gke.task_job import FOLLOWED_BY_TRY
from tests.deployment.harness import FINISHED_TI_STATES, TaskOutcome, outcome, wait_for
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import REATTACHED, WAIT, gke_end_program, gke_waiting, namespace, slurm_waiting

PLATFORMS = ("gke", "slurm_rest", "slurm_ssh")
OUTCOMES = ("success", "fail", "preempt")
RUN_TIMEOUT = 300
ROOM = 12  # idle CPUs before a job meant to be preempted is submitted
FIRST_BURST = ("slurm_happy", "service_happy", "mark_failed")


def dag_for(platform: str, kind: str) -> str:
    if platform == "gke":
        return f"gke_crash_{kind}"
    return f"slurm_crash_{kind}_{platform.split('_')[1]}"


class Crash:
    """One polling run whose worker is killed once the job runs and the task follows it."""

    def __init__(self, stage: Stage, platform: str, kind: str) -> None:
        self.stage = stage
        self.airflow = stage.airflow
        self.platform = platform
        self.dag_id = dag_for(platform, kind)
        self.gke = platform == "gke"
        if not self.gke and kind == "preempt":
            stage.after(FIRST_BURST)  # the suite's first burst of high jobs would preempt it early
            stage.slurm.wait_room(ROOM)
        conf = None if self.gke else stage.slurm_conf
        self.run_id = self.airflow.trigger(self.dag_id, conf)
        self.job = ""

    def wait_following(self, try_number: int = 1, starts: int = 1) -> str:
        """Wait until the job runs and try ``try_number`` follows it (the job is in the task's state
        store, which a retry reads); returns the job (name or id)."""
        if self.gke:
            self.job = gke_waiting(self.stage, self.dag_id, self.run_id, "polling", try_number)
        else:
            self.job = slurm_waiting(self.stage, self.dag_id, self.run_id, "polling", try_number, starts)
        wait_for(
            lambda: self.airflow.state_store(self.dag_id, self.run_id, "train"),
            f"{self.dag_id} to keep its job in the task state store",
            WAIT,
            1.0,
        )
        return self.job

    @property
    def namespace(self) -> str:
        return namespace(self.dag_id)

    def wait_marked(self, try_number: int) -> None:
        """Wait until try ``try_number`` has marked the job as the one it follows (GKE: the
        ``followed-by-try`` annotation of the PathwaysJob; Slurm: ``try=<n>`` in the job's comment)."""
        if self.gke:
            wanted = str(try_number)
            wait_for(
                lambda: any(
                    (o["metadata"].get("annotations") or {}).get(FOLLOWED_BY_TRY) == wanted
                    for o in self.stage.kube.list(self.namespace, "pathwaysjobs")
                ),
                f"the job of {self.dag_id} marked as followed by try {try_number}",
                WAIT,
                1.0,
            )
        else:
            wait_for(
                lambda: f" try={try_number} " in f"{self.stage.slurm.comment(self.job)} ",
                f"Slurm job {self.job} marked as followed by try {try_number}",
                WAIT,
                1.0,
                describe=lambda: self.stage.slurm.comment(self.job),
            )

    def kill_worker(self) -> dict[str, int]:
        return self.airflow.kill_process_of(self.dag_id, self.run_id, "train")

    def wait_retry_running(self, try_number: int) -> dict[str, Any]:
        """Wait until try ``try_number`` runs, or the task has ended."""
        return self.airflow.wait_ti(
            self.dag_id,
            self.run_id,
            "train",
            f"try {try_number} running",
            lambda t: (
                (t["try_number"] >= try_number and t["state"] == "running")
                or t["state"] in FINISHED_TI_STATES
            ),
            WAIT,
        )

    def end_job(self, exit_code: int) -> None:
        if self.gke:
            gke_end_program(self.stage, self.dag_id, self.job, exit_code)
        else:
            self.stage.slurm.release(self.dag_id, exit_code)

    def preempt(self, name: str) -> None:
        if self.gke:
            self.stage.kube.action(namespace(self.dag_id), self.job, "preempt-slice", slice=0)
        else:
            self.stage.drill("preemption").arrive(name, self.job)

    def program_runs(self) -> int:
        if self.gke:
            return self.stage.kube.program_runs(namespace(self.dag_id))
        return len(self.stage.slurm.program_runs(self.dag_id))

    def wait_job_failed(self) -> None:
        if self.gke:
            ns = namespace(self.dag_id)
            wait_for(
                lambda: any(
                    (js.get("status") or {}).get("terminalState") == "Failed"
                    for js in self.stage.kube.list(ns, "jobsets")
                ),
                f"the JobSet in {ns} to fail",
                60,
                0.3,
            )
        else:
            self.stage.slurm.wait_state(self.job, {"FAILED"}, 60)

    def result(self) -> TaskOutcome:
        self.airflow.wait_run(self.dag_id, self.run_id, RUN_TIMEOUT)
        keys = ("return_value", "status") if self.gke else ("return_value", "job")
        seen = outcome(self.airflow, self.dag_id, self.run_id, xcom_keys=keys)
        if self.gke:
            ns = namespace(self.dag_id)
            seen.extra["jobs"] = list(self.stage.kube.jobs_created(ns))
            seen.extra["program_runs"] = self.program_runs()
            seen.extra["leftovers"] = self.stage.kube.leftovers(ns)
        else:
            name = self.stage.slurm.job_name(self.dag_id)
            seen.extra["jobs"] = self.stage.slurm.job_ids(name)
            seen.extra["program_runs"] = self.program_runs()
            seen.extra["leftovers"] = self.stage.slurm.active(name)
        return seen


def _preemption_drill(platform: str, outcome: str) -> str | None:
    return "preemption" if platform != "gke" and outcome == "preempt" else None


@scenario("crash[{platform}-{outcome}]", drill=_preemption_drill, platform=PLATFORMS, outcome=OUTCOMES)
def crash_then(stage: Stage, name: str, platform: str, outcome: str) -> TaskOutcome:
    run = Crash(stage, platform, outcome)
    run.wait_following()
    run.kill_worker()
    ti = run.wait_retry_running(2)
    if ti["state"] == "running":
        run.airflow.wait_log(run.dag_id, run.run_id, "train", 2, REATTACHED, WAIT)
        if outcome == "success":
            run.end_job(0)
        elif outcome == "fail":
            run.end_job(3)
        else:
            run.preempt(name)
            ti = run.wait_retry_running(3)
            if ti["state"] == "running":
                run.wait_following(3, starts=2)
                run.end_job(0)
    return run.result()


@pytest.mark.scenario("crash[{platform}-success]")
@pytest.mark.parametrize("platform", PLATFORMS)
def test_retry_reattaches_and_the_job_succeeds(seen: TaskOutcome, platform: str) -> None:
    assert (seen.state, seen.try_number) == ("success", 2)
    assert REATTACHED.search(seen.log(2))
    assert len(seen.extra["jobs"]) == 1 and seen.extra["program_runs"] == 1  # no second job
    log = seen.log(2)
    assert "Program finished successfully" in log  # the program's log tail
    if platform == "gke":
        assert seen.xcom["status"]["phase"] == "succeeded"
        assert seen.xcom["return_value"]["status"]["phase"] == "succeeded"
        assert seen.extra["leftovers"] == {}  # deleted on success
    else:
        assert seen.xcom["return_value"]["state"] == "COMPLETED"
        assert seen.xcom["job"]["state"] == "COMPLETED"
        assert seen.extra["leftovers"] == []


@pytest.mark.scenario("crash[{platform}-fail]")
@pytest.mark.parametrize("platform", PLATFORMS)
def test_retry_reattaches_and_the_failing_job_fails_the_task_without_a_rerun(
    seen: TaskOutcome, platform: str
) -> None:
    assert (seen.state, seen.try_number) == ("failed", 2)  # retries=2, but a failing program is final
    assert REATTACHED.search(seen.log(2))
    assert "exit code 3" in seen.log(2)
    assert len(seen.extra["jobs"]) == 1 and seen.extra["program_runs"] == 1  # the job was not rerun
    assert not seen.extra["leftovers"]


@pytest.mark.scenario("crash[{platform}-preempt]")
@pytest.mark.parametrize("platform", PLATFORMS)
def test_retry_reattaches_then_a_preemption_is_retried_with_a_fresh_job(
    seen: TaskOutcome, platform: str
) -> None:
    assert (seen.state, seen.try_number) == ("success", 3)
    assert REATTACHED.search(seen.log(2))
    assert "preemption, retrying with backoff" in seen.log(2)
    assert len(seen.extra["jobs"]) == 2 and seen.extra["program_runs"] == 2  # one fresh job, once
    assert not seen.extra["leftovers"]


@scenario("crash[{platform}-fails-meanwhile]", platform=PLATFORMS)
def crash_fails_meanwhile(stage: Stage, name: str, platform: str) -> TaskOutcome:
    run = Crash(stage, platform, "fails_meanwhile")
    run.wait_following()
    run.kill_worker()
    run.end_job(3)
    run.wait_job_failed()  # while the task has no worker: it is still "running" without heartbeats
    still = run.airflow.task_instance(run.dag_id, run.run_id, "train")
    wait_for(
        lambda: run.airflow.run_finished(run.dag_id, run.run_id) or run.program_runs() >= 2,
        f"{run.dag_id} to end, or to run the program again",
        RUN_TIMEOUT,
        1.0,
    )
    if not run.airflow.run_finished(run.dag_id, run.run_id):
        run.end_job(3)  # the program runs a second time: let that run end too
    seen = run.result()
    seen.extra["state_when_job_failed"] = (still["state"], still["try_number"])
    return seen


@pytest.mark.scenario("crash[{platform}-fails-meanwhile]")
@pytest.mark.parametrize("platform", PLATFORMS)
def test_program_that_failed_while_no_worker_was_alive_fails_the_retry_without_a_rerun(
    seen: TaskOutcome, platform: str
) -> None:
    assert seen.extra["state_when_job_failed"] == ("running", 1)
    assert (seen.state, seen.try_number) == ("failed", 2)
    assert "exit code 3" in seen.log(2)
    assert seen.extra["program_runs"] == 1  # the program did not run twice
    assert len(seen.extra["jobs"]) == 1
