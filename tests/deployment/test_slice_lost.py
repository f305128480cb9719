"""A slice of the Pathways service's worker array is lost while the workload runs on Slurm (``scontrol
requeue`` of the array task, as preemption with ``PreemptMode=REQUEUE`` or a node failure does), and
the program dies with DATA_LOSS: a preemption, retried with a fresh job, not the program's failure."""

from __future__ import annotations

import pytest

from tests.deployment.harness import TaskOutcome, outcome, wait_for
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import WAIT, task_waiting

CASES = ("deferred-rest", "polling-ssh")
RUN_TIMEOUT = 300


@scenario("slice_lost[{case}]", case=CASES)
def slice_lost(stage: Stage, name: str, case: str) -> TaskOutcome:
    mode, transport = case.split("-")
    dag_id = f"slurm_slice_lost_{mode}_{transport}"
    slurm = stage.slurm
    run_id = stage.airflow.trigger(dag_id, stage.slurm_conf)
    if mode == "deferred":  # a trigger that fires before the deferral was taken in fails the try
        stage.airflow.settle_deferred(dag_id, run_id, "service")
    slurm.release_service(dag_id)
    workload = slurm.job_name(f"{dag_id}-train")
    wait_for(
        lambda: any(j["state"] == "RUNNING" for j in slurm.queue(workload)),
        f"the workload of {dag_id} to run",
        WAIT,
        0.5,
        describe=lambda: slurm.queue(workload),
    )
    task_waiting(stage, dag_id, run_id, mode)
    written = dict(
        line.split("=", 1)
        for line in slurm.path(dag_id, "written.env").read_text().splitlines()
        if "=" in line
    )
    lost = f"{written['PATHWAYS_WORKER_ARRAY_JOB_ID']}_0"
    slurm.run("scontrol", "requeue", lost)
    marker = slurm.path(dag_id, "marker")
    marker.touch()
    marker.chmod(0o644)
    task_waiting(stage, dag_id, run_id, mode, 2)
    wait_for(
        lambda: len(slurm.program_runs(dag_id)) >= 2,
        f"the retry's program of {dag_id} to start",
        WAIT,
        0.5,
        describe=lambda: slurm.queue(workload),
    )
    again = marker.with_name(f"{marker.name}.again")
    again.touch()
    again.chmod(0o644)
    stage.airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    seen = outcome(stage.airflow, dag_id, run_id, xcom_keys=("return_value",))
    seen.extra["lost"] = lost
    seen.extra["stop"] = stage.airflow.task_instance(dag_id, run_id, "stop")["state"]
    seen.extra["runs"] = slurm.program_runs(dag_id)
    seen.extra["jobs"] = slurm.job_ids(workload)
    seen.extra["leftovers"] = slurm.active(workload) + slurm.active(slurm.job_name(dag_id))
    return seen


@pytest.mark.scenario("slice_lost[{case}]")
@pytest.mark.parametrize("case", CASES)
def test_a_slice_lost_under_a_slurm_workload_is_a_preemption_and_is_retried(
    seen: TaskOutcome, case: str
) -> None:
    assert (seen.state, seen.try_number) == ("success", 2), seen.log(1)[-2000:]
    first = seen.log(1)
    assert f"slice {seen.extra['lost']} was requeued while the workload ran" in first
    assert "a lost slice, retried as a preemption" in first
    assert "second run: finishing" in seen.log(2)
    assert seen.xcom["return_value"]["state"] == "COMPLETED"
    assert len(seen.extra["jobs"]) == 2 and len(seen.extra["runs"]) == 2  # a fresh job for the retry
    assert seen.extra["stop"] == "success" and seen.extra["leftovers"] == []
