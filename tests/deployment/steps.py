"""Steps the scenarios share: bring a run to the point where its task waits on a live job."""

from __future__ import annotations

import re
from typing import Any

from tests.deployment.harness import wait_for
from tests.deployment.scenarios import Stage

# the SDK's ResumableJobMixin says "Reconnecting to existing job"; an operator may say it its own way
REATTACHED = re.compile(r"Reconnecting to existing job|Reattaching to ")
WAIT = 240  # seconds for a task to start, submit and wait (tasks start slowly when dozens run at once)


def namespace(dag_id: str) -> str:
    return dag_id.replace("_", "-")


def task_waiting(stage: Stage, dag_id: str, run_id: str, mode: str, try_number: int = 1) -> dict[str, Any]:
    """Wait until try ``try_number`` of ``train`` waits: deferred (and settled) or running (polling)."""
    if mode in ("deferrable", "deferred"):
        ti = stage.airflow.wait_ti(
            dag_id,
            run_id,
            "train",
            f"try {try_number} deferred",
            lambda t: t["try_number"] == try_number and t["state"] == "deferred",
            WAIT,
        )
        stage.airflow.wait_workers_done([str(ti["id"])] if "id" in ti else [])  # Airflow 2: no ids
        return ti
    return stage.airflow.wait_ti(
        dag_id,
        run_id,
        "train",
        f"try {try_number} running",
        lambda t: t["try_number"] == try_number and t["state"] == "running",
        WAIT,
    )


def gke_waiting(stage: Stage, dag_id: str, run_id: str, mode: str, try_number: int = 1) -> str:
    """Wait until the task waits and its job's program runs; returns the job's name."""
    jobset = stage.kube.wait_program_running(namespace(dag_id), WAIT)
    task_waiting(stage, dag_id, run_id, mode, try_number)
    return str(jobset["metadata"]["name"])


def slurm_waiting(
    stage: Stage, dag_id: str, run_id: str, mode: str, try_number: int = 1, starts: int = 1
) -> str:
    """Wait until the task waits and its job's program has started ``starts`` times; returns the job id."""
    wait_for(
        lambda: len(stage.slurm.program_runs(dag_id)) >= starts,
        f"the program of {dag_id} to start ({starts})",
        WAIT,
        0.3,
        describe=lambda: stage.slurm.queue(stage.slurm.job_name(dag_id)),
    )
    task_waiting(stage, dag_id, run_id, mode, try_number)
    line = stage.slurm.program_runs(dag_id)[-1]
    return line.split("job=", 1)[1].split()[0]


def gke_end_program(stage: Stage, dag_id: str, name: str, exit_code: int = 0) -> None:
    """End the running program of job ``name`` (``complete-program`` or ``fail-program``)."""
    if exit_code == 0:
        stage.kube.action(namespace(dag_id), name, "complete-program")
    else:
        stage.kube.action(namespace(dag_id), name, "fail-program", exit_code=exit_code)
