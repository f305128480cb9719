"""Whether a Pathways slice was lost while a workload ran: the workload's failure is then a
preemption, as on GKE, not the program's fault.

On Slurm the slices are the tasks of the worker array the service job submitted (one per TPU
slice, ``run_worker_slice.sh``). The workload only talks to the IFRT proxy: when a slice goes, its
program fails (Pathways reports a lost slice as ``DATA_LOSS``). Evidence, from what Slurm reports:

- a worker array task (or one attempt of it, from accounting) that ended ``PREEMPTED``,
  ``NODE_FAIL`` or ``BOOT_FAIL`` while the workload ran;
- a worker array task that was requeued (preemption with ``PreemptMode=REQUEUE``, a node failure,
  ``scontrol requeue``) while the workload ran, or waits to start again: Slurm sets a requeued
  job's submit time to the moment of the requeue and holds it about two minutes (``BeginTime``),
  so a slice requeued under the workload may start again only after the workload ended;
- when Slurm shows none of the slices (their records are gone), the workload's output ending in a
  ``DATA_LOSS`` error (the last lines, where the program died). Where Slurm shows the slices and
  none was lost, a ``DATA_LOSS`` is the program's own: no lost slice is behind it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from airflow_provider_pathways.slurm.job import SlurmJob

#: States of a worker array task (or attempt) that mean its slice was taken away.
LOST_SLICE_STATES = frozenset({"PREEMPTED", "NODE_FAIL", "BOOT_FAIL"})
#: How many of the output's last lines may hold the program's final error.
DATA_LOSS_TAIL_LINES = 5
_SLACK = timedelta(seconds=1)  # Slurm reports whole seconds


def slice_lost_during(
    workload: SlurmJob, worker_tasks: Iterable[SlurmJob], output_tail: str = ""
) -> str | None:
    """Why a slice was lost while ``workload`` ran (its start to its end), or None."""
    started, ended = workload.start_time, workload.end_time
    if started is None:
        return None

    def during(moment: datetime | None) -> bool:
        return (
            moment is not None and started - _SLACK <= moment and (ended is None or moment <= ended + _SLACK)
        )

    tasks = list(worker_tasks)
    for task in tasks:
        if task.state in LOST_SLICE_STATES and during(task.end_time):
            return f"slice {task.display_id} ended {task.state} while the workload ran"
        if task.restarts > 0 and (task.requeued or during(task.submit_time) or during(task.start_time)):
            return f"slice {task.display_id} was requeued while the workload ran (restarts {task.restarts})"
    last = [line for line in output_tail.splitlines() if line.strip()][-DATA_LOSS_TAIL_LINES:]
    if not tasks and any("DATA_LOSS" in line for line in last):
        return "the program ended with DATA_LOSS (how Pathways reports a lost slice)"
    return None
