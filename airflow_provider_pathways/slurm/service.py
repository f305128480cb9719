"""One look at the Pathways service on Slurm: its job, its ``cluster.env`` and its RUNNING slices."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from airflow_provider_pathways.slurm.cluster_env import (
    DEFAULT_CLUSTER_ENV_PATH,
    DEFAULT_PROXY_KEYS,
    DEFAULT_SERVICE_JOB_KEY,
    DEFAULT_WORKER_ARRAY_KEY,
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


@dataclass(frozen=True)
class ServiceProbe:
    """Where the Pathways service reports (its ``cluster.env`` and the keys in it) and what ready
    asks for: ``min_slices`` RUNNING worker array tasks (None: the file alone). The worker array is
    ``worker_array_job_id`` when given, else the one ``cluster.env`` names."""

    cluster_env_path: str | None = DEFAULT_CLUSTER_ENV_PATH
    proxy_keys: Sequence[str] = DEFAULT_PROXY_KEYS
    min_slices: int | None = None
    worker_array_job_id: int | None = None
    worker_array_key: str = DEFAULT_WORKER_ARRAY_KEY
    service_job_key: str = DEFAULT_SERVICE_JOB_KEY

    def to_dict(self) -> dict[str, Any]:
        """Plain values (a trigger's serialized keywords)."""
        return {**asdict(self), "proxy_keys": list(self.proxy_keys)}


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
    """Service job state, ``cluster.env`` freshness and content, and RUNNING slices (one call each)."""
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
    array_id = probe.worker_array_job_id or worker_array_id(readiness.values, probe.worker_array_key)
    if not readiness.ready:
        return ServiceCheck(job, readiness)
    readiness = replace(readiness, worker_array_job_id=array_id)
    if probe.min_slices and array_id is None:
        readiness = replace(
            readiness,
            ready=False,
            reason="cannot count slices: no worker_array_job_id given and no "
            f"{probe.worker_array_key} in cluster.env",
        )
    elif probe.min_slices and array_id is not None:
        running = count_running(await hook.a_get_array_tasks(array_id))
        readiness = replace(
            readiness,
            ready=running >= probe.min_slices,
            reason=f"{running} slices running, need {probe.min_slices}",
            running_slices=running,
        )
    return ServiceCheck(job, readiness)


async def service_worker_arrays(
    hook: SlurmReader, service_job_ids: Sequence[int], probe: ServiceProbe = ServiceProbe()
) -> list[int]:
    """The worker arrays of these service jobs: the probe's id, else the one ``cluster.env`` names
    when that file belongs to one of them."""
    if probe.worker_array_job_id:
        return [probe.worker_array_job_id]
    if not probe.cluster_env_path:
        return []
    text = await hook.a_read_file(probe.cluster_env_path)
    if not text:
        return []
    values = parse_cluster_env(text)
    if values.get(probe.service_job_key, "").strip() not in {str(i) for i in service_job_ids}:
        return []
    array = worker_array_id(values, probe.worker_array_key)
    return [array] if array else []
