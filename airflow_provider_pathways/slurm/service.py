"""One look at the Pathways service on Slurm: its job, its ``cluster.env`` and its RUNNING slices."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any, Protocol

from airflow_provider_pathways.slurm.attribution import (
    AMBIGUITY_FIX,
    ids,
    match_worker_array,
    peer_services,
    running_at,
)
from airflow_provider_pathways.slurm.cluster_env import (
    DEFAULT_CLUSTER_ENV_PATH,
    DEFAULT_PROXY_KEYS,
    DEFAULT_SERVICE_JOB_KEY,
    DEFAULT_WORKER_ARRAY_KEY,
    DEFAULT_WORKER_JOB_NAME,
    Readiness,
    count_running,
    evaluate_cluster_env,
    parse_cluster_env,
    worker_array_id,
)
from airflow_provider_pathways.slurm.job import SlurmJob


class SlurmReader(Protocol):
    """What a look at the service needs from a cluster (``SlurmHook``'s async methods)."""

    async def a_get_job(self, job_id: int, *, required: bool = False) -> SlurmJob | None: ...

    async def a_get_array_tasks(self, array_job_id: int) -> list[SlurmJob]: ...

    async def a_read_file(self, path: str, *, tail_bytes: int | None = None) -> str | None: ...

    async def a_stat_file(self, path: str) -> tuple[float, int] | None: ...

    async def a_get_jobs_named(self, name: str) -> list[SlurmJob]: ...


@dataclass(frozen=True)
class ServiceProbe:
    """Where the Pathways service reports (its ``cluster.env`` and the keys in it) and what ready
    asks for: ``min_slices`` RUNNING worker array tasks (None: the file alone). The worker array is
    ``worker_array_job_id`` when given, else the one ``cluster.env`` names, else the array job named
    ``worker_job_name`` that the service job submitted (:mod:`~airflow_provider_pathways.slurm.attribution`).
    ``cluster_env_per_job``: the path is this service job's alone (passed to its script), so a file
    there that names no service job is still its."""

    cluster_env_path: str | None = DEFAULT_CLUSTER_ENV_PATH
    proxy_keys: Sequence[str] = DEFAULT_PROXY_KEYS
    min_slices: int | None = None
    worker_array_job_id: int | None = None
    worker_array_key: str = DEFAULT_WORKER_ARRAY_KEY
    service_job_key: str = DEFAULT_SERVICE_JOB_KEY
    worker_job_name: str = DEFAULT_WORKER_JOB_NAME
    cluster_env_per_job: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain values (a trigger's serialized keywords). Fields added after 0.1.0 are left out at
        their defaults, so that a triggerer of that version, which refuses keywords it does not
        know, still runs what a newer worker deferred."""
        values = {**asdict(self), "proxy_keys": list(self.proxy_keys)}
        for name in _ADDED_AFTER_0_1_0:
            if values[name] == getattr(ServiceProbe, name):
                del values[name]
        return values


_ADDED_AFTER_0_1_0 = ("worker_job_name", "cluster_env_per_job")


@dataclass(frozen=True)
class ServiceCheck:
    """One look at the Pathways service job: the job, and readiness when it is alive."""

    job: SlurmJob | None
    readiness: Readiness

    @property
    def service_ended(self) -> bool:
        return self.job is None or self.job.terminal


async def check_pathways_service(
    hook: SlurmReader, service_job_id: int, probe: ServiceProbe = ServiceProbe()
) -> ServiceCheck:
    """Service job state, ``cluster.env`` freshness, owner and content, and RUNNING slices."""
    if not probe.cluster_env_path:
        raise ValueError("cluster_env_path: empty; pass the path of cluster.env on the cluster")
    job = await hook.a_get_job(service_job_id)
    if job is None or job.terminal:
        return ServiceCheck(job, Readiness(False, "the service job is not running"))
    stat = await hook.a_stat_file(probe.cluster_env_path)
    text = await hook.a_read_file(probe.cluster_env_path) if stat is not None else None
    readiness = evaluate_cluster_env(
        service_job_id=service_job_id,
        service_started=job.start_time,
        stat=stat,
        text=text,
        proxy_keys=probe.proxy_keys,
        service_job_key=probe.service_job_key,
    )
    if not readiness.ready or stat is None:
        return ServiceCheck(job, readiness)
    peers = _Peers(hook, job)
    if not probe.cluster_env_per_job and not readiness.values.get(probe.service_job_key, "").strip():
        written = datetime.fromtimestamp(stat[0], tz=timezone.utc)
        writers = [peer for peer in await peers.get() if running_at(peer, written)]
        if writers:
            return ServiceCheck(
                job,
                Readiness(
                    False,
                    f"cannot tell whose {probe.cluster_env_path} this is: it names no service "
                    f"job and service job(s) {ids(writers)} of the same user and name ran when it was "
                    f"written; {AMBIGUITY_FIX}",
                ),
            )
    array_id = probe.worker_array_job_id or worker_array_id(readiness.values, probe.worker_array_key)
    if not probe.min_slices:
        return ServiceCheck(job, replace(readiness, worker_array_job_id=array_id))
    if array_id is not None:
        tasks = await hook.a_get_array_tasks(array_id)
    else:
        records = await hook.a_get_jobs_named(probe.worker_job_name)
        match = match_worker_array(job, await peers.get(), records, probe.worker_job_name)
        if match.array_job_id is None:
            return ServiceCheck(job, Readiness(False, match.reason, values=readiness.values))
        array_id, tasks = match.array_job_id, list(match.tasks)
    running = count_running(tasks)
    return ServiceCheck(
        job,
        replace(
            readiness,
            ready=running >= probe.min_slices,
            reason=f"{running} slices running, need {probe.min_slices}",
            running_slices=running,
            worker_array_job_id=array_id,
        ),
    )


class _Peers:
    """The other service jobs of the same user and name, listed once per look."""

    def __init__(self, hook: SlurmReader, service: SlurmJob) -> None:
        self._hook = hook
        self._service = service
        self._jobs: list[SlurmJob] | None = None

    async def get(self) -> list[SlurmJob]:
        if self._jobs is None:
            records = await self._hook.a_get_jobs_named(self._service.name) if self._service.name else []
            self._jobs = peer_services(self._service, records)
        return self._jobs


async def service_worker_arrays(
    hook: SlurmReader, service_job_ids: Sequence[int], probe: ServiceProbe = ServiceProbe()
) -> list[int]:
    """The worker arrays of these service jobs: the probe's id, else the one ``cluster.env`` names
    when that file belongs to one of them, else each running service job's array found by name."""
    if probe.worker_array_job_id:
        return [probe.worker_array_job_id]

    async def named_in_cluster_env() -> int | None:
        if not probe.cluster_env_path:
            return None
        text = await hook.a_read_file(probe.cluster_env_path)
        values = parse_cluster_env(text) if text else {}
        if values.get(probe.service_job_key, "").strip() in {str(i) for i in service_job_ids}:
            return worker_array_id(values, probe.worker_array_key)
        return None

    # Reads that do not depend on each other go at once (a killed task has seconds): the file and
    # the service jobs, then the listings the attribution needs.
    named, jobs = await asyncio.gather(
        named_in_cluster_env(), asyncio.gather(*(hook.a_get_job(job_id) for job_id in service_job_ids))
    )
    if named:
        return [named]
    running = [job for job in jobs if job is not None and not job.terminal and job.array_job_id is None]
    if not running:
        return []
    names = sorted({job.name for job in running if job.name})
    records, listings = await asyncio.gather(
        hook.a_get_jobs_named(probe.worker_job_name),
        asyncio.gather(*(hook.a_get_jobs_named(name) for name in names)),
    )
    peers_by_name = dict(zip(names, listings, strict=True))
    arrays: list[int] = []
    for job in running:
        peers = peer_services(job, peers_by_name[job.name]) if job.name else []
        match = match_worker_array(job, peers, records, probe.worker_job_name)
        if match.array_job_id is not None:
            arrays.append(match.array_job_id)
    return arrays
