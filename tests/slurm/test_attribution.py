"""Which service job submitted a worker array, from Slurm's records alone.

The rules: seed 002 promises only that the service job submits the workers as a job array of
``run_worker_slice.sh``; sbatch names a job after its script file unless given ``--job-name``
(sbatch(1), ``--job-name``); a job can only submit another while it runs, so the array's submit
time lies between the service job's start and end (slurmctld's StartTime, EndTime, SubmitTime).
A service job may have any name (a DAG's ``<dag_id>.<task_id>``, ``start_pathways.sh`` by hand):
any job of the same user that is not an array task may be one, unless this provider submitted it
as another kind of job (``role=job`` in its comment). Slurm keeps a requeued job's last start only,
and resets a requeued array task's submit time.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_pathways.slurm.job import (
    SlurmJob,
    comment_role,
    followed_by_try,
    following_comment,
    is_marked,
    marked_comment,
    task_instance_marker,
)
from airflow_provider_pathways.slurm.service import (
    DEFAULT_WORKER_JOB_NAME,
    ServiceProbe,
    attributed_worker_arrays,
    cancel_services,
    match_worker_array,
    peer_services,
)

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)
NAME = DEFAULT_WORKER_JOB_NAME


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def service(
    job_id: int, start: float, end: float | None = None, name: str = "dag.service", comment: str | None = None
) -> SlurmJob:
    state = "RUNNING" if end is None else "CANCELLED"
    return SlurmJob(
        job_id=job_id,
        name=name,
        state=state,
        user="alice",
        start_time=at(start),
        submit_time=at(start),
        end_time=None if end is None else at(end),
        comment=comment,
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
    assert "job(s) 105 of the same Slurm user, which may be Pathways service jobs too," in match.reason
    assert "max_active_runs=1" in match.reason and "worker_array_job_id" in match.reason  # the fixes


def test_a_service_of_another_name_is_a_rival_too() -> None:
    """Issue 34: two DAGs' services under one Slurm user have two names; B's array, submitted after
    A started, is not A's, and A's own array (submitted before B started) still is."""
    ours = service(100, start=0, name="dag_a.service")
    theirs = service(103, start=3, name="dag_b.service")
    peers = peer_services(ours, [ours, theirs])
    assert peers == [theirs]
    records = array(101, submitted=1) + array(104, submitted=4)
    match = match_worker_array(ours, peers, records, NAME)
    assert match.array_job_id == 101  # the newest would be B's 104
    alone_later = match_worker_array(ours, peers, array(104, submitted=4), NAME)
    assert alone_later.array_job_id is None and [r.job_id for r in alone_later.rivals] == [103]


def test_jobs_this_provider_submitted_as_workloads_and_array_tasks_are_no_rivals() -> None:
    ours = service(100, start=0)
    marker = task_instance_marker("dag", "train", "run", None)
    workload = service(102, start=1, name="dag.train", comment=marked_comment(marker, "job", 2))
    other_service = service(103, start=1, comment=marked_comment(marker, "pathways-service"))
    unmarked = service(104, start=1, name="prep.sh")  # by hand, another tool: may be a service
    older_provider = service(105, start=1, comment=f"{marker} try=2")  # no role: may be a service
    task = replace(array(106, submitted=1)[0], state="RUNNING", start_time=at(1))
    peers = peer_services(ours, [workload, other_service, unmarked, older_provider, task])
    assert [p.job_id for p in peers] == [103, 104, 105]


def test_a_requeued_rival_may_have_run_before_its_last_start() -> None:
    """Slurm keeps only the last start of a requeued job: it may have run when the array came."""
    ours = service(100, start=0)
    requeued = replace(service(103, start=30), restarts=1)
    match = match_worker_array(ours, peer_services(ours, [requeued]), array(104, submitted=5), NAME)
    assert match.array_job_id is None and [r.job_id for r in match.rivals] == [103]


def test_an_array_whose_every_task_was_requeued_was_submitted_before_the_requeue() -> None:
    """A requeue resets a task's submit time: with every task requeued, the array was submitted at
    the latest then, and any job that may have run before counts."""
    ours = service(100, start=0)
    requeued = [replace(task, restarts=1, submit_time=at(50)) for task in array(101, submitted=2)]
    assert match_worker_array(ours, [], requeued, NAME).array_job_id == 101  # alone: ours
    earlier = service(90, start=-10, end=1)  # ended before 50, but ran before the requeue
    match = match_worker_array(ours, peer_services(ours, [earlier]), requeued, NAME)
    assert match.array_job_id is None and [r.job_id for r in match.rivals] == [90]
    one_left = requeued[:1] + array(101, submitted=2)[1:]  # one task kept its submit time
    assert match_worker_array(ours, peer_services(ours, [earlier]), one_left, NAME).array_job_id == 101


def test_cancelling_services_together_takes_every_array_only_they_can_have_submitted() -> None:
    first, second = service(100, start=0), service(103, start=3)
    bystander = service(110, start=20, name="dag_c.service")
    records = [first, second, bystander, *array(101, 1), *array(104, 4), *array(111, 21)]
    assert attributed_worker_arrays([first, second], records, NAME) == [101, 104]
    assert attributed_worker_arrays([first], records, NAME) == [101]  # 104: second may have
    assert attributed_worker_arrays([second], records, NAME) == []  # 104: first ran then too
    assert attributed_worker_arrays([], records, NAME) == []


def test_a_service_that_ended_before_the_submission_is_no_rival() -> None:
    ours = service(100, start=0)
    peers = peer_services(ours, [service(99, start=-60, end=1)])
    assert match_worker_array(ours, peers, array(101, submitted=2), NAME).array_job_id == 101


def test_a_marked_comment_keeps_the_marker_its_role_and_the_try_following_the_job() -> None:
    marker = task_instance_marker("dag", "service", "run", None)
    submitted = marked_comment(marker, "pathways-service")
    assert submitted == f"{marker} role=pathways-service"
    followed = following_comment(marker, 3, "pathways-service")
    assert followed == f"{marker} role=pathways-service try=3"
    for comment in (submitted, followed):
        assert is_marked(comment, marker) and comment_role(comment) == "pathways-service"
    assert followed_by_try(followed, marker) == 3 and followed_by_try(submitted, marker) is None
    assert followed_by_try(f"{marker} try=2", marker) == 2  # marked by an earlier version: no role
    assert comment_role(f"{marker} try=2") is None
    assert comment_role("role=job") is None  # not this provider's mark
    assert comment_role(None) is None


class Cluster:
    """One user's jobs in memory, as slurmctld would answer the reads a service lookup makes; a
    cancel ends the job now (``CANCELLED``, its ``EndTime`` set, as ``scancel`` does)."""

    def __init__(self, jobs: list[SlurmJob], now: float) -> None:
        self.jobs = {job.job_id: job for job in jobs}
        self.now = now
        self.cancelled: list[int] = []
        self.service_cancelled = asyncio.Event()

    async def a_get_job(self, job_id: int, *, required: bool = False) -> SlurmJob | None:
        return self.jobs.get(job_id)

    async def a_get_array_tasks(self, array_job_id: int) -> list[SlurmJob]:
        return [job for job in self.jobs.values() if job.array_job_id == array_job_id]

    async def a_read_file(self, path: str, *, tail_bytes: int | None = None) -> str | None:
        return None  # no cluster.env: the array is found from the records alone

    async def a_stat_file(self, path: str) -> tuple[float, int] | None:
        return None

    async def a_get_user_jobs(self) -> list[SlurmJob]:
        await self.service_cancelled.wait()  # answers only once the service's cancel went out
        return list(self.jobs.values())

    async def a_cancel_job(self, job_id: int) -> bool:
        """``scancel <id>``: an array job's id cancels every task of the array."""
        ending = [
            j for j in self.jobs.values() if job_id in (j.job_id, j.array_job_id) and j.end_time is None
        ]
        for job in ending:
            self.jobs[job.job_id] = replace(job, state="CANCELLED", end_time=at(self.now))
        if not ending:
            return False
        self.cancelled.append(job_id)
        if self.jobs[job_id].array_job_id is None:
            self.service_cancelled.set()
        return True


def test_a_killed_service_is_cancelled_before_its_array_is_looked_up_and_the_array_after() -> None:
    """Airflow gives a killed task 5 s between SIGTERM and SIGKILL (the task SDK supervisor's
    kill escalation): the service's cancel must not wait for the lookup of its worker array, and
    the array, submitted while the service ran, is still attributed to the just-cancelled service
    and cancelled; a rival's array stays."""
    ours, rival = service(100, start=0), service(110, start=20, name="dag_b.service")
    cluster = Cluster([ours, rival, *array(101, 1), *array(111, 21)], now=30)

    results = asyncio.run(asyncio.wait_for(cancel_services(cluster, [100]), timeout=5))

    assert cluster.cancelled == [100, 101]  # the service first, then its array
    assert [(r.job_id, r.ended, r.array_of) for r in results] == [(100, True, ()), (101, True, (100,))]
    assert results[1].describe() == "Worker array 101 of Slurm job 100 cancelled"
    assert cluster.jobs[102].state == "CANCELLED"  # every task of the array
    assert cluster.jobs[111].end_time is None  # the other DAG's workers run on


def test_the_probe_of_a_task_reads_its_rendered_values_and_names_a_bad_one() -> None:
    """The service operator, the sensor and the teardown build their probe one way: from their
    attributes of the probe's names, as rendered templates leave them (text, ``""``, ``"None"``)."""
    from types import SimpleNamespace

    task = SimpleNamespace(
        cluster_env_path="/home/u/pathways/cluster.env",
        proxy_keys=["JAX_BACKEND_TARGET"],
        min_slices="2",
        worker_array_job_id="None",
        worker_job_name="workers",
        unrelated="ignored",
    )
    probe = ServiceProbe.of(task, cluster_env_per_job=True)
    assert probe == ServiceProbe(
        cluster_env_path="/home/u/pathways/cluster.env",
        proxy_keys=("JAX_BACKEND_TARGET",),
        min_slices=2,
        worker_array_job_id=None,
        worker_job_name="workers",
        cluster_env_per_job=True,
    )
    assert ServiceProbe.of(task, min_slices=None).min_slices is None
    for name, value, problem in [
        ("worker_array_job_id", "12x", "worker_array_job_id: '12x' is not an integer"),
        ("min_slices", "0", "min_slices: 0 must be >= 1"),
    ]:
        with pytest.raises(ValueError, match=re.escape(problem)):
            ServiceProbe.of(SimpleNamespace(**{**vars(task), name: value}))
