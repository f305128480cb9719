"""Which Pathways service job wrote ``cluster.env`` and submitted a worker array, from Slurm's records.

Published: the service job writes the proxy address to ``~/pathways/cluster.env`` once
``MIN_SLICES`` slices run, and submits the workers as a job array of ``run_worker_slice.sh``. Nothing
names the service job in either. What Slurm does tell: a job runs as its submitter's user, is named
after its script file unless given another name, and has a submit time; a service job has start
and end times. A file or an array can only come from a service job that was running when it was
written or submitted. When that is ours alone, it is ours; when another service job of the same
user and name was running too, it cannot be told apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from airflow_provider_pathways.slurm.job import SlurmJob

# mtime and Slurm's times come from the same cluster clock; Slurm's have whole seconds.
CLOCK_SLACK = timedelta(seconds=1)


#: What lifts the ambiguity, said with every message about it.
AMBIGUITY_FIX = (
    "run one service job of this name per Slurm user at a time (e.g. max_active_runs=1), or give "
    "each its own cluster.env (cluster_env_variable, for a script that takes its path), or pass "
    "worker_array_job_id"
)


def peer_services(service: SlurmJob, records: Iterable[SlurmJob]) -> list[SlurmJob]:
    """The other service jobs: same user and name as ``service``, not arrays, not ``service``."""
    return [
        job
        for job in records
        if job.job_id != service.job_id
        and job.array_job_id is None
        and job.name == service.name
        and (service.user is None or job.user in (None, service.user))
    ]


def running_at(job: SlurmJob, moment: datetime, slack: timedelta = CLOCK_SLACK) -> bool:
    """The job may have been running at ``moment`` (its start and end, widened by ``slack``)."""
    if job.start_time is None or job.start_time > moment + slack:
        return False
    return job.end_time is None or job.end_time >= moment - slack


def ids(jobs: Iterable[SlurmJob]) -> str:
    return ", ".join(str(job.job_id) for job in jobs)


@dataclass(frozen=True)
class WorkerArrayMatch:
    """The worker array found for a service job: ``array_job_id`` with its ``tasks``, or why not."""

    array_job_id: int | None
    reason: str
    tasks: Sequence[SlurmJob] = field(default_factory=tuple)
    #: Other service jobs that could have submitted the arrays found (then none is taken).
    rivals: Sequence[SlurmJob] = field(default_factory=tuple)


def match_worker_array(
    service: SlurmJob, peers: Sequence[SlurmJob], records: Iterable[SlurmJob], worker_job_name: str
) -> WorkerArrayMatch:
    """The array ``service`` submitted: an array job of the same user named ``worker_job_name``,
    submitted while ``service`` was running and no peer service job was. Several: the newest."""
    started = service.start_time
    if started is None:
        return WorkerArrayMatch(None, "the service job has not started yet")
    arrays: dict[int, list[SlurmJob]] = {}
    for job in records:
        if job.array_job_id is None or job.name != worker_job_name:
            continue
        if service.user is not None and job.user not in (None, service.user):
            continue
        arrays.setdefault(job.array_job_id, []).append(job)
    ours: list[tuple[datetime, int]] = []
    rivals: dict[int, SlurmJob] = {}
    for array_id, tasks in arrays.items():
        submitted = min((t.submit_time for t in tasks if t.submit_time is not None), default=None)
        if submitted is None or submitted < started:
            continue
        could = [peer for peer in peers if running_at(peer, submitted, slack=timedelta(0))]
        if could:
            rivals.update((peer.job_id, peer) for peer in could)
        else:
            ours.append((submitted, array_id))
    if ours:
        array_id = max(ours)[1]
        tasks = sorted(arrays[array_id], key=lambda t: t.array_task_id or 0)
        return WorkerArrayMatch(array_id, f"worker array {array_id} ({worker_job_name!r})", tasks)
    if rivals:
        found = sorted(rivals.values(), key=lambda j: j.job_id)
        return WorkerArrayMatch(
            None,
            f"cannot tell which worker array {worker_job_name!r} is service job {service.job_id}'s: "
            f"service job(s) {ids(found)} of the same user and name ran when it was submitted; "
            f"{AMBIGUITY_FIX}",
            rivals=found,
        )
    return WorkerArrayMatch(
        None,
        f"no worker array {worker_job_name!r} submitted since service job {service.job_id} started yet",
    )
