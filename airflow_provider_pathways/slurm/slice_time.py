"""How long the slices of a Pathways service ran, from Slurm's own records of its worker array.

On Slurm the TPU slices are the tasks of the worker array the service job submits (one task per
slice, ``run_worker_slice.sh``): a slice holds its chips from its task's start to its end, and a
requeued slice (preempted, node failure) once per run. :func:`slice_time` sums those runs, within a
window (a workload's run) or over the array's life (the service's), in slice-hours; TPU-hours are
slice-hours * chips per slice (:mod:`~airflow_provider_pathways.tpu_hours`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from airflow_provider_pathways.slurm.job import SlurmJob
from airflow_provider_pathways.tpu_hours import MAX_SLICE_CHANGES, SECONDS_PER_HOUR, SliceCount


@dataclass(frozen=True)
class SliceRun:
    """One run of one slice: its array task's start to its end (None: still running)."""

    task: str
    started: float
    ended: float | None


@dataclass(frozen=True)
class SliceTime:
    """Slice-hours within a window, the running-slice count over it, and why the hours are not
    known (None when they are)."""

    slice_hours: float | None
    running: tuple[SliceCount, ...] = ()
    unknown: str | None = None


def slice_runs(records: Iterable[SlurmJob]) -> list[SliceRun]:
    """The current run of each of the array's tasks that started (slurmctld's records, or
    accounting's last attempts once slurmctld forgot the array)."""
    runs = [
        SliceRun(
            job.display_id,
            job.start_time.timestamp(),
            job.end_time.timestamp() if job.end_time is not None and job.terminal else None,
        )
        for job in records
        if job.array_task_id is not None and job.start_time is not None
    ]
    return sorted(runs, key=lambda run: (run.started, run.task))


def running_series(
    runs: Iterable[SliceRun], since: float | None, until: float | None
) -> tuple[SliceCount, ...]:
    """The number of slices running, at each change within the window (the first
    :data:`~airflow_provider_pathways.tpu_hours.MAX_SLICE_CHANGES`)."""
    steps: dict[float, int] = {}
    for run in runs:
        start = run.started if since is None else max(run.started, since)
        end = run.ended if until is None or run.ended is None else min(run.ended, until)
        if (until is not None and start > until) or (end is not None and end <= start):
            continue
        steps[start] = steps.get(start, 0) + 1
        if end is not None:
            steps[end] = steps.get(end, 0) - 1
    series: list[SliceCount] = []
    count = 0
    for at in sorted(steps):
        count += steps[at]
        if series and series[-1][1] == count:
            continue
        series.append((at, count))
        if len(series) >= MAX_SLICE_CHANGES:
            break
    return tuple(series)


def slice_time(
    records: Iterable[SlurmJob], *, since: float | None = None, until: float | None = None
) -> SliceTime:
    """
    The slice-hours of the array's tasks within ``since``..``until`` (epoch seconds; None: from
    their first start, to their last end).

    Rules (the same unknowns as on GKE, never guessed):

    - a task's run counts from its start (or ``since``) to its end (or ``until``); a run still
      going with no ``until`` leaves the hours unknown (the slices had not stopped when the try
      ended);
    - a requeued task (restarts > 0) ran before its current run, until the requeue; Slurm's job
      records keep the times of the current run only (an accounting record of an earlier attempt
      is a ``REQUEUED`` one without them), so those earlier runs are unknown, and so are the hours,
      unless the requeue came before the window (slurmctld sets a requeued job's submit time to the
      requeue's moment; tests/operators/test_slurm.py sees it on real Slurm);
    - no record of the array at all: unknown.
    """
    jobs = [job for job in records if job.array_task_id is not None]
    if not jobs:
        return SliceTime(None, unknown="slice time (no record of the worker array)")
    runs = slice_runs(jobs)
    series = running_series(runs, since, until)
    for job in jobs:
        requeued = job.submit_time.timestamp() if job.submit_time is not None else None
        if job.restarts and (since is None or requeued is None or requeued > since):
            return SliceTime(
                None,
                series,
                f"slice time (slice {job.display_id} was requeued: Slurm keeps the times of its "
                "current run only)",
            )
    seconds = 0.0
    for run in runs:
        end = run.ended if until is None or run.ended is None else min(run.ended, until)
        if end is None:
            end = until
        if end is None:
            return SliceTime(None, series, "end (a slice was still running when the try ended)")
        start = run.started if since is None else max(run.started, since)
        seconds += max(0.0, end - start)
    return SliceTime(seconds / SECONDS_PER_HOUR, series)
