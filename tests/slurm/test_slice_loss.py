"""A workload's failure while one of its service's slices was lost is a preemption (issue: a lost
slice on Slurm is a preemption, as on GKE). States and flags are as slurmctld and slurmdbd report
them (slurm/job.py pins their sources); DATA_LOSS is how Pathways reports a lost slice."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_pathways.slurm.end_states import slice_lost_during
from airflow_provider_pathways.slurm.job import SlurmJob

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


WORKLOAD = SlurmJob(job_id=50, name="run_workload.sh", state="FAILED", start_time=at(10), end_time=at(20))


def task(index: int, state: str = "RUNNING", **fields: object) -> SlurmJob:
    return SlurmJob(
        job_id=41 + index,
        name="run_worker_slice.sh",
        state=state,
        array_job_id=41,
        array_task_id=index,
        **fields,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("state", ["PREEMPTED", "NODE_FAIL", "BOOT_FAIL"])
def test_a_slice_that_ended_lost_while_the_workload_ran_is_the_cause(state: str) -> None:
    tasks = [task(0, start_time=at(5)), task(1, state, start_time=at(5), end_time=at(15))]
    assert slice_lost_during(WORKLOAD, tasks) == f"slice 41_1 ended {state} while the workload ran"


def test_a_slice_lost_before_or_after_the_workload_is_not() -> None:
    before = task(1, "PREEMPTED", start_time=at(1), end_time=at(5))
    after = task(2, "NODE_FAIL", start_time=at(5), end_time=at(25))
    assert slice_lost_during(WORKLOAD, [task(0, start_time=at(5)), before, after]) is None


def test_a_slice_requeued_during_the_workload_is_the_cause() -> None:
    restarted = task(1, start_time=at(12), restarts=1)  # running again, started after the workload
    assert "slice 41_1 was requeued" in (slice_lost_during(WORKLOAD, [restarted]) or "")
    waiting = task(2, "PENDING", flags=frozenset({"REQUEUED"}), restarts=1, submit_time=at(15))
    assert "slice 41_2 was requeued" in (slice_lost_during(WORKLOAD, [waiting]) or "")


def test_a_slice_requeued_during_the_workload_that_started_again_after_it_ended_is_the_cause() -> None:
    """Slurm holds a requeued job about two minutes and sets its submit time to the moment of the
    requeue (pinned on real Slurm in tests/slurm/test_slurm_real_clusters.py): the workload failed
    at once, its slice ran again only after it."""
    again = task(1, start_time=at(22), submit_time=at(15), restarts=1)
    assert "slice 41_1 was requeued" in (slice_lost_during(WORKLOAD, [again]) or "")


def test_a_slice_that_restarted_before_the_workload_began_is_not() -> None:
    assert slice_lost_during(WORKLOAD, [task(1, start_time=at(4), restarts=2)]) is None


def test_a_program_that_died_with_data_loss_lost_a_slice_but_a_data_loss_mention_earlier_did_not() -> None:
    died = "step 90 loss=0.41\njax.errors.JaxRuntimeError: DATA_LOSS: slice 1 is gone\n"
    assert "DATA_LOSS" in (slice_lost_during(WORKLOAD, [], died) or "")
    recovered = "retrying after DATA_LOSS on read\n" + "".join(f"step {i}\n" for i in range(10))
    assert slice_lost_during(WORKLOAD, [], recovered + "ValueError: bad batch\n") is None


def test_a_data_loss_with_every_slice_seen_healthy_is_the_programs_own() -> None:
    """Where Slurm shows the slices and none was lost, no lost slice is behind a DATA_LOSS."""
    died = "jax.errors.JaxRuntimeError: DATA_LOSS: checksum mismatch in my_reader\n"
    healthy = [task(0, start_time=at(5)), task(1, start_time=at(5))]
    assert slice_lost_during(WORKLOAD, healthy, died) is None


def test_a_workload_that_never_started_lost_nothing() -> None:
    pending = SlurmJob(job_id=50, name="run_workload.sh", state="CANCELLED")
    assert slice_lost_during(pending, [task(1, "PREEMPTED", end_time=at(15))]) is None
