"""A partitioned worker comes back after its task was retried elsewhere (SIGSTOP past the heartbeat
timeout, then SIGCONT): the old try is killed by its own supervisor, and its ``on_kill`` must leave
alone the job the newer try reattached to."""

from __future__ import annotations

import psutil
import pytest

from tests.deployment.harness import TaskOutcome
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import REATTACHED
from tests.deployment.test_worker_crash import PLATFORMS, Crash

SUPERSEDED = "superseded"


def _still_there(run: Crash) -> bool:
    if run.gke:
        return bool(run.stage.kube.leftovers(run.namespace))
    return bool(run.stage.slurm.active(run.stage.slurm.job_name(run.dag_id)))


@scenario("superseded[{platform}]", platform=PLATFORMS)
def superseded_try(stage: Stage, name: str, platform: str) -> TaskOutcome:
    run = Crash(stage, platform, SUPERSEDED)
    run.wait_following()
    frozen = run.airflow.freeze_process_of(run.dag_id, run.run_id, "train")
    try:
        ti = run.wait_retry_running(2)
        if ti["state"] == "running":
            run.airflow.wait_log(run.dag_id, run.run_id, "train", 2, REATTACHED, 240)
            run.wait_marked(2)
    finally:
        run.airflow.thaw(frozen)
    # The old try's supervisor hears that the try is over (409 on its heartbeat) and terminates the
    # task process, which runs on_kill.
    gone, alive = psutil.wait_procs(frozen[1:2], timeout=120)
    job_after_old_try = _still_there(run)
    if ti["state"] == "running":
        run.end_job(0)
    seen = run.result()
    seen.extra["old_try_ended"] = bool(gone) and not alive
    seen.extra["job_after_old_try"] = job_after_old_try
    return seen


@pytest.mark.scenario("superseded[{platform}]")
@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_superseded_try_killed_late_leaves_the_job_the_newer_try_follows(
    seen: TaskOutcome, platform: str
) -> None:
    assert seen.extra["old_try_ended"]  # the thawed try was terminated by its supervisor
    assert seen.extra["job_after_old_try"]  # ... and did not delete or cancel the job
    assert "follows it" in seen.log(1) and "alone" in seen.log(1)
    assert (seen.state, seen.try_number) == ("success", 2)
    assert REATTACHED.search(seen.log(2))
    assert len(seen.extra["jobs"]) == 1 and seen.extra["program_runs"] == 1  # one job, run once
    assert not seen.extra["leftovers"]
