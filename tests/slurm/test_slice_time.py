"""TPU-hours on Slurm: the slices are the worker array's tasks, each holding its chips from its
start to its end, with the same rules and unknowns as on GKE. Records are as slurmctld and slurmdbd
report them (slurm/job.py pins their sources): a task's record has the times of its current run
only (accounting's earlier attempts are REQUEUED records without them), and a requeue sets the
task's submit time to its moment (seen on real Slurm in tests/operators/test_slurm.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_pathways.slurm.job import SlurmJob
from airflow_provider_pathways.slurm.slice_time import running_series, slice_runs, slice_time
from airflow_provider_pathways.tpu_hours import TryUsage, tpu_hours

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def epoch(minutes: float) -> float:
    return at(minutes).timestamp()


def task(index: int, start: float | None, end: float | None = None, **fields: object) -> SlurmJob:
    state = "COMPLETED" if end is not None else "RUNNING" if start is not None else "PENDING"
    return SlurmJob(
        job_id=41 + index,
        name="run_worker_slice.sh",
        state=str(fields.pop("state", state)),
        array_job_id=41,
        array_task_id=index,
        start_time=None if start is None else at(start),
        end_time=None if end is None else at(end),
        **fields,  # type: ignore[arg-type]
    )


def test_a_workload_counts_the_slices_running_while_it_ran() -> None:
    # slice 0 runs throughout, slice 1 joins at 15, slice 2 ends at 12: workload from 10 to 20
    tasks = [task(0, 5), task(1, 15), task(2, 5, 12)]
    time = slice_time(tasks, since=epoch(10), until=epoch(20))
    assert time.slice_hours == pytest.approx((10 + 5 + 2) / 60)
    assert time.unknown is None
    assert time.running == ((epoch(10), 2), (epoch(12), 1), (epoch(15), 2))


def test_a_service_counts_its_slices_whole_runs_once_they_all_ended() -> None:
    ended = [task(0, 5, 65), task(1, 6, 36)]
    assert slice_time(ended).slice_hours == pytest.approx(1.5)
    one_running = [task(0, 5, 65), task(1, 6)]
    time = slice_time(one_running)
    assert time.slice_hours is None
    assert time.unknown == "end (a slice was still running when the try ended)"


def test_a_requeued_slice_leaves_the_hours_unknown_unless_requeued_before_the_window() -> None:
    # requeued at 15 (its submit time since), pending again: its run before 15 is in no record
    requeued = task(1, None, restarts=1, submit_time=at(15))
    during = slice_time([task(0, 5), requeued], since=epoch(10), until=epoch(20))
    assert during.slice_hours is None
    assert during.unknown is not None and "slice 41_1 was requeued" in during.unknown
    assert during.running == ((epoch(10), 1),)  # what is known is still drawn
    before = slice_time([task(0, 5), requeued], since=epoch(16), until=epoch(20))
    assert before.slice_hours == pytest.approx(4 / 60)  # slice 0 alone, from 16 to 20
    again = task(1, 17, 25, restarts=1, submit_time=at(15))  # running again: its earlier run unknown
    assert slice_time([task(0, 5, 30), again]).slice_hours is None  # the array's whole life


def test_no_record_of_the_array_is_unknown() -> None:
    assert (
        slice_time([], since=epoch(0), until=epoch(1)).unknown == "slice time (no record of the worker array)"
    )


def test_the_running_series_stays_bounded() -> None:
    runs = slice_runs(task(i, i, i + 0.5) for i in range(600))
    assert len(running_series(runs, None, None)) == 200


def test_tpu_hours_are_chips_per_slice_times_slice_hours() -> None:
    measured = TryUsage(try_number=1, job="50", chips_per_slice=8, slice_hours=0.5, started=0.0, ended=60.0)
    assert measured.tpu_hours == pytest.approx(4.0)
    assert measured.unknown() is None
    no_shape = TryUsage(try_number=1, job="50", slice_hours=0.5)
    assert no_shape.tpu_hours is None and no_shape.unknown() == "chips per slice"
    unknown = TryUsage(try_number=2, job="51", chips_per_slice=8, slice_hours_unknown="end (still running)")
    assert unknown.tpu_hours is None and unknown.unknown() == "end (still running)"
    usage = tpu_hours([measured, unknown])
    assert usage.total == pytest.approx(4.0) and not usage.complete
    assert "8 chips x 30.00 slice-min" in usage.summary(1)
    assert TryUsage.from_dict(measured.to_dict()) == measured
