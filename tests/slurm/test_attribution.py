"""Which service job submitted a worker array, from Slurm's records alone.

The rules: seed 002 promises only that the service job submits the workers as a job array of
``run_worker_slice.sh``; sbatch names a job after its script file unless given ``--job-name``
(sbatch(1), ``--job-name``); a job can only submit another while it runs, so the array's submit
time lies between the service job's start and end (slurmctld's StartTime, EndTime, SubmitTime).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_provider_pathways.slurm.job import SlurmJob
from airflow_provider_pathways.slurm.service import DEFAULT_WORKER_JOB_NAME, match_worker_array, peer_services

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)
NAME = DEFAULT_WORKER_JOB_NAME


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def service(job_id: int, start: float, end: float | None = None, name: str = "dag.service") -> SlurmJob:
    state = "RUNNING" if end is None else "CANCELLED"
    return SlurmJob(
        job_id=job_id,
        name=name,
        state=state,
        user="alice",
        start_time=at(start),
        submit_time=at(start),
        end_time=None if end is None else at(end),
    )


def array(
    array_id: int, submitted: float, tasks: int = 2, name: str = NAME, user: str = "alice"
) -> list[SlurmJob]:
    return [
        SlurmJob(
            job_id=array_id + task,
            name=name,
            state="RUNNING",
            user=user,
            array_job_id=array_id,
            array_task_id=task,
            submit_time=at(submitted),
        )
        for task in range(tasks)
    ]


def test_the_array_submitted_while_only_this_service_ran_is_its() -> None:
    ours = service(100, start=0)
    records = array(90, submitted=-5) + array(101, submitted=2)  # 90: before our start, not ours
    match = match_worker_array(ours, [], records, NAME)
    assert match.array_job_id == 101
    assert [t.array_task_id for t in match.tasks] == [0, 1]


def test_other_names_users_and_plain_jobs_are_not_the_worker_array() -> None:
    ours = service(100, start=0)
    records = (
        array(101, submitted=2, name="pathways-workers-100")  # named otherwise: --job-name was given
        + array(102, submitted=2, user="bob")
        + [SlurmJob(job_id=103, name=NAME, state="RUNNING", user="alice", submit_time=at(2))]  # no array
    )
    match = match_worker_array(ours, [], records, NAME)
    assert match.array_job_id is None
    assert "no worker array 'run_worker_slice.sh' submitted since service job 100 started yet" in match.reason


def test_an_array_submitted_while_another_service_of_that_name_ran_is_nobodys() -> None:
    ours = service(100, start=0)
    peers = peer_services(ours, [ours, service(105, start=10), service(99, start=-60, end=-30)])
    assert [p.job_id for p in peers] == [105, 99]
    match = match_worker_array(ours, peers, array(106, submitted=11), NAME)
    assert match.array_job_id is None
    assert [r.job_id for r in match.rivals] == [105]
    assert "service job(s) 105 of the same user and name ran when it was submitted" in match.reason
    assert "max_active_runs=1" in match.reason  # the fix is named


def test_a_service_that_ended_before_the_submission_is_no_rival() -> None:
    ours = service(100, start=0)
    peers = peer_services(ours, [service(99, start=-60, end=1)])
    assert match_worker_array(ours, peers, array(101, submitted=2), NAME).array_job_id == 101
