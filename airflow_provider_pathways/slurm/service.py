"""The Pathways service on Slurm: its ``cluster.env``, which service job wrote that file and
submitted a worker array, and one look at the service (its job, ``cluster.env`` and RUNNING slices).

``cluster.env`` is shell-style ``KEY=VALUE`` lines, parsed, never executed. Its key names are not
published: the proxy address key is configurable and defaults to the first of
:data:`DEFAULT_PROXY_KEYS` present.

The service job writes the proxy address to ``~/pathways/cluster.env`` once ``MIN_SLICES`` slices
run, and submits the workers as a job array of ``run_worker_slice.sh``; nothing names the service
job in either, and the file is one per Slurm user whatever the service job's name. What Slurm does
tell: a job runs as its submitter's user, is named after its script file unless given another name,
and has a submit time; a service job has start and end times (only its last run's, once requeued).
A file or an array can only come from a service job of the same user that was running when it was
written or submitted. Any job of the user that is not an array task may be such a service job,
whatever its name, unless this provider submitted it as something else (its comment's role):
when only ours ran, the file or array is ours; when another that may be a service ran too, it
cannot be told apart, and nothing is taken (:data:`AMBIGUITY_FIX` says how to lift that).
"""

from __future__ import annotations

import asyncio
import re
import shlex
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from airflow_provider_pathways.slurm.job import JOB_ROLE, SlurmJob, comment_role
from airflow_provider_pathways.transient import describe_error

DEFAULT_CLUSTER_ENV_PATH = "~/pathways/cluster.env"
DEFAULT_PROXY_KEYS: tuple[str, ...] = ("PATHWAYS_PROXY_ADDRESS", "JAX_BACKEND_TARGET", "PATHWAYS_PROXY")
DEFAULT_SERVICE_JOB_KEY = "PATHWAYS_SERVICE_JOB_ID"
DEFAULT_WORKER_ARRAY_KEY = "PATHWAYS_WORKER_ARRAY_JOB_ID"
#: The worker array's job name: the service job runs ``sbatch run_worker_slice.sh`` (seed 002), and
#: sbatch names a job after its script file unless given ``--job-name``.
DEFAULT_WORKER_JOB_NAME = "run_worker_slice.sh"
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ADDRESS = re.compile(r"^(?:grpc://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(?P<port>\d{1,5})/?$")
# mtime and Slurm's times come from the same cluster clock; Slurm's have whole seconds.
CLOCK_SLACK_SECONDS = 1.0
CLOCK_SLACK = timedelta(seconds=CLOCK_SLACK_SECONDS)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def per_run_cluster_env_path(ti: Any) -> str:
    """A ``cluster.env`` path of one task instance's own (dag, run, task and map index), the same on
    every try, so a retry that reattaches finds the file again."""
    parts = [ti.dag_id, ti.task_id] + ([str(ti.map_index)] if getattr(ti, "map_index", -1) >= 0 else [])
    name = ".".join(_UNSAFE.sub("_", str(part)) for part in [*parts, ti.run_id])
    return f"~/pathways/airflow/{name}.env"


class ClusterEnvError(ValueError):
    """``cluster.env`` has a line that is not ``KEY=VALUE``."""


def parse_cluster_env(text: str) -> dict[str, str]:
    """Parse ``KEY=VALUE`` lines: ``#`` comments, ``export``, single and double quotes; no expansion."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, rest = line.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            raise ClusterEnvError(f"cluster.env line {number} is not KEY=VALUE")
        try:
            words = shlex.split(rest, comments=True, posix=True)
        except ValueError as err:
            raise ClusterEnvError(f"cluster.env line {number} ({key}): {err}") from None
        values[key] = " ".join(words)
    return values


def normalize_proxy_address(value: str) -> str:
    """``grpc://host:port`` for ``grpc://host:port`` or ``host:port``; ValueError otherwise."""
    match = _ADDRESS.fullmatch(value.strip())
    if not match or not 0 < int(match["port"]) < 65536:
        raise ValueError(f"{value!r} is not a proxy address; expected grpc://host:port or host:port")
    return f"grpc://{match['host']}:{match['port']}"


@dataclass(frozen=True)
class Readiness:
    """Whether the Pathways service on Slurm is ready, and why (not)."""

    ready: bool
    reason: str
    proxy_address: str | None = None
    values: Mapping[str, str] = field(default_factory=dict)
    running_slices: int | None = None
    worker_array_job_id: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "ready": self.ready,
            "reason": self.reason,
            "proxy_address": self.proxy_address,
            "values": dict(self.values),
            "running_slices": self.running_slices,
            "worker_array_job_id": self.worker_array_job_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Readiness:
        return cls(
            ready=bool(data["ready"]),
            reason=str(data.get("reason") or ""),
            proxy_address=data.get("proxy_address"),
            values=dict(data.get("values") or {}),
            running_slices=data.get("running_slices"),
            worker_array_job_id=data.get("worker_array_job_id"),
        )


def worker_array_id(values: Mapping[str, str], key: str = DEFAULT_WORKER_ARRAY_KEY) -> int | None:
    """The worker array job id recorded in ``cluster.env``, if any."""
    raw = values.get(key, "").strip()
    return int(raw) if raw.isdigit() else None


def evaluate_cluster_env(
    *,
    service_job_id: int,
    service_started: datetime | None,
    stat: tuple[float, int] | None,
    text: str | None,
    proxy_keys: Sequence[str] = DEFAULT_PROXY_KEYS,
    service_job_key: str = DEFAULT_SERVICE_JOB_KEY,
) -> Readiness:
    """Readiness from the file alone (slice counts are checked separately)."""
    if stat is None or text is None:
        return Readiness(False, "cluster.env does not exist yet")
    if service_started is None:
        return Readiness(False, "the service job has not started yet")
    mtime, _size = stat
    if mtime + CLOCK_SLACK_SECONDS < service_started.timestamp():
        return Readiness(False, "cluster.env is older than the service job (left by an earlier run)")
    try:
        values = parse_cluster_env(text)
    except ClusterEnvError as err:
        return Readiness(False, f"cluster.env is being written or malformed: {err}")
    owner = values.get(service_job_key)
    if owner and owner.strip() != str(service_job_id):
        return Readiness(
            False, f"cluster.env belongs to service job {owner}, not {service_job_id}", values=values
        )
    key = next((k for k in proxy_keys if values.get(k)), None)
    if key is None:
        return Readiness(False, f"cluster.env has none of {', '.join(proxy_keys)}", values=values)
    try:
        address = normalize_proxy_address(values[key])
    except ValueError as err:
        return Readiness(False, f"cluster.env {key}: {err}", values=values)
    return Readiness(True, f"cluster.env has {key}", proxy_address=address, values=values)


def count_running(tasks: Iterable[object]) -> int:
    """Worker array tasks that are RUNNING (one per TPU slice)."""
    return sum(1 for task in tasks if getattr(task, "state", None) == "RUNNING")


#: What lifts the ambiguity, said with every message about it: the published script writes one
#: ``~/pathways/cluster.env`` per Slurm user, so two service jobs of one user that overlap overwrite
#: each other's file, whatever their names.
AMBIGUITY_FIX = (
    "run one Pathways service job per Slurm user at a time (max_active_runs=1 for one DAG; a pool "
    "with one slot for the service tasks of several DAGs), or give each service its own cluster.env "
    "(cluster_env_variable, for a script that takes its path)"
)
#: And for the worker array: name it.
ARRAY_AMBIGUITY_FIX = f"{AMBIGUITY_FIX}, or pass worker_array_job_id"


def may_be_service(job: SlurmJob) -> bool:
    """Whether ``job`` may be a Pathways service job: one that is not an array task (the service is
    one job, its workers an array), unless this provider submitted it as another kind of job (the
    role in its comment, :data:`~airflow_provider_pathways.slurm.job.JOB_ROLE`). Its name tells
    nothing: a service job is named after its script unless given a name, by hand or by a DAG."""
    return job.array_job_id is None and comment_role(job.comment) != JOB_ROLE


def peer_services(service: SlurmJob, records: Iterable[SlurmJob]) -> list[SlurmJob]:
    """The other jobs of ``service``'s user, whatever their names, that may be Pathways service
    jobs (:func:`may_be_service`)."""
    return [
        job
        for job in records
        if job.job_id != service.job_id
        and may_be_service(job)
        and (service.user is None or job.user in (None, service.user))
    ]


def may_have_run_at(job: SlurmJob, moment: datetime, slack: timedelta = CLOCK_SLACK) -> bool:
    """The job may have been running at ``moment`` (its start and end, widened by ``slack``). Of a
    requeued job Slurm keeps only the last run's start: an earlier run may have been at any time
    before its end."""
    if job.end_time is not None and job.end_time < moment - slack:
        return False
    if job.restarts > 0:
        return True
    return job.start_time is not None and job.start_time <= moment + slack


def may_have_run_by(job: SlurmJob, moment: datetime) -> bool:
    """The job may have been running at some time up to ``moment``."""
    return job.restarts > 0 or (job.start_time is not None and job.start_time <= moment)


def ids(jobs: Iterable[SlurmJob]) -> str:
    return ", ".join(str(job.job_id) for job in jobs)


def rivals_phrase(jobs: Sequence[SlurmJob]) -> str:
    """Who else may have written a file or submitted an array, for a message."""
    return f"job(s) {ids(jobs)} of the same Slurm user, which may be Pathways service jobs too,"


@dataclass(frozen=True)
class WorkerArrayMatch:
    """The worker array found for a service job: ``array_job_id`` with its ``tasks``, or why not."""

    array_job_id: int | None
    reason: str
    tasks: Sequence[SlurmJob] = field(default_factory=tuple)
    #: Other jobs that may be service jobs and could have submitted the arrays found (then none is
    #: taken).
    rivals: Sequence[SlurmJob] = field(default_factory=tuple)


@dataclass(frozen=True)
class WorkerArray:
    """An array job of the user named like the worker array: its tasks and when it was submitted.
    ``exact``: ``submitted`` is when; else every task was requeued since (a requeue resets a task's
    submit time) and the array was submitted at the latest then."""

    array_job_id: int
    submitted: datetime
    exact: bool
    tasks: Sequence[SlurmJob]


def worker_arrays(records: Iterable[SlurmJob], worker_job_name: str, user: str | None) -> list[WorkerArray]:
    """The array jobs of ``user`` named ``worker_job_name`` among ``records``."""
    arrays: dict[int, list[SlurmJob]] = {}
    for job in records:
        if job.array_job_id is None or job.name != worker_job_name:
            continue
        if user is not None and job.user not in (None, user):
            continue
        arrays.setdefault(job.array_job_id, []).append(job)
    found = []
    for array_id, tasks in sorted(arrays.items()):
        first = [t.submit_time for t in tasks if t.submit_time is not None and t.restarts == 0]
        latest = [t.submit_time for t in tasks if t.submit_time is not None]
        if not latest:
            continue
        ordered = sorted(tasks, key=lambda t: t.array_task_id or 0)
        found.append(WorkerArray(array_id, min(first or latest), bool(first), ordered))
    return found


def submitters(
    services: Sequence[SlurmJob], peers: Sequence[SlurmJob], array: WorkerArray
) -> tuple[list[SlurmJob], list[SlurmJob]]:
    """Which of ``services`` could have submitted ``array`` (running since their last start when it
    was submitted: a job is submitted by a job that runs), and which ``peers`` may have. When only
    a bound of the submission is known, every peer that may have run by then may have."""
    moment = array.submitted
    ours = [
        job
        for job in services
        if job.start_time is not None
        and job.start_time <= moment
        and (not array.exact or job.end_time is None or job.end_time >= moment)
    ]
    if array.exact:
        rivals = [peer for peer in peers if may_have_run_at(peer, moment, slack=timedelta(0))]
    else:
        rivals = [peer for peer in peers if may_have_run_by(peer, moment)]
    return ours, rivals


def match_worker_array(
    service: SlurmJob, peers: Sequence[SlurmJob], records: Iterable[SlurmJob], worker_job_name: str
) -> WorkerArrayMatch:
    """The array ``service`` submitted: an array job of the same user named ``worker_job_name``,
    submitted while ``service`` was running and no peer (:func:`peer_services`) may have been.
    Several: the newest."""
    if service.start_time is None:
        return WorkerArrayMatch(None, "the service job has not started yet")
    arrays = {array.array_job_id: array for array in worker_arrays(records, worker_job_name, service.user)}
    ours: list[tuple[datetime, int]] = []
    rivals: dict[int, SlurmJob] = {}
    for array in arrays.values():
        could, others = submitters([service], peers, array)
        if not could:
            continue
        if others:
            rivals.update((peer.job_id, peer) for peer in others)
        else:
            ours.append((array.submitted, array.array_job_id))
    if ours:
        array_id = max(ours)[1]
        tasks = arrays[array_id].tasks
        return WorkerArrayMatch(array_id, f"worker array {array_id} ({worker_job_name!r})", tasks)
    if rivals:
        found = sorted(rivals.values(), key=lambda j: j.job_id)
        return WorkerArrayMatch(
            None,
            f"cannot tell which worker array {worker_job_name!r} is service job {service.job_id}'s: "
            f"{rivals_phrase(found)} ran when it was submitted; {ARRAY_AMBIGUITY_FIX}",
            rivals=found,
        )
    return WorkerArrayMatch(
        None,
        f"no worker array {worker_job_name!r} submitted since service job {service.job_id} started yet",
    )


class SlurmReader(Protocol):
    """What a look at the service needs from a cluster (``SlurmHook``'s async methods)."""

    async def a_get_job(self, job_id: int, *, required: bool = False) -> SlurmJob | None: ...

    async def a_get_array_tasks(self, array_job_id: int) -> list[SlurmJob]: ...

    async def a_read_file(self, path: str, *, tail_bytes: int | None = None) -> str | None: ...

    async def a_stat_file(self, path: str) -> tuple[float, int] | None: ...

    async def a_get_user_jobs(self) -> list[SlurmJob]: ...


class SlurmCanceller(SlurmReader, Protocol):
    """A cluster the service's jobs can also be cancelled on."""

    async def a_cancel_job(self, job_id: int) -> bool: ...


def optional_count(name: str, value: Any) -> int | None:
    """A rendered job id or count: None when empty (``None``, ``""``, ``"None"``), else an integer
    >= 1; ``ValueError`` naming ``name`` otherwise."""
    if value in (None, "", "None"):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {value!r} is not an integer") from None
    if number < 1:
        raise ValueError(f"{name}: {number} must be >= 1")
    return number


@dataclass(frozen=True)
class ServiceProbe:
    """Where the Pathways service reports (its ``cluster.env`` and the keys in it) and what ready
    asks for: ``min_slices`` RUNNING worker array tasks (None: the file alone). The worker array is
    ``worker_array_job_id`` when given, else the one ``cluster.env`` names, else the array job named
    ``worker_job_name`` that the service job submitted (:func:`match_worker_array`).
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

    @classmethod
    def of(cls, task: object, **given: Any) -> ServiceProbe:
        """The probe of an operator or sensor whose attributes carry the probe's fields under their
        names (rendered template values: a job id or slice count as text, ``""`` or ``"None"`` for
        none); ``given`` values take their place. ``ValueError`` names a bad field."""
        values = {f.name: getattr(task, f.name) for f in fields(cls) if hasattr(task, f.name)}
        values.update(given)
        for name in ("min_slices", "worker_array_job_id"):
            if name in values:
                values[name] = optional_count(name, values[name])
        if "proxy_keys" in values:
            values["proxy_keys"] = tuple(values["proxy_keys"])
        return cls(**values)

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
    """One look at the Pathways service job: the job, readiness when it is alive, and when the look
    was taken (epoch seconds)."""

    job: SlurmJob | None
    readiness: Readiness
    seen_at: float = field(default_factory=time.time)

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
    user = _UserJobs(hook)
    if not probe.cluster_env_per_job and not readiness.values.get(probe.service_job_key, "").strip():
        written = datetime.fromtimestamp(stat[0], tz=timezone.utc)
        writers = [peer for peer in peer_services(job, await user.jobs()) if may_have_run_at(peer, written)]
        if writers:
            return ServiceCheck(
                job,
                Readiness(
                    False,
                    f"cannot tell whose {probe.cluster_env_path} this is: it names no service job, "
                    f"and {rivals_phrase(writers)} ran when it was written; {AMBIGUITY_FIX}",
                ),
            )
    array_id = probe.worker_array_job_id or worker_array_id(readiness.values, probe.worker_array_key)
    if not probe.min_slices:
        return ServiceCheck(job, replace(readiness, worker_array_job_id=array_id))
    if array_id is not None:
        tasks = await hook.a_get_array_tasks(array_id)
    else:
        records = await user.jobs()
        match = match_worker_array(job, peer_services(job, records), records, probe.worker_job_name)
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


class _UserJobs:
    """The jobs of the connection's user, listed at most once per look."""

    def __init__(self, hook: SlurmReader) -> None:
        self._hook = hook
        self._jobs: list[SlurmJob] | None = None

    async def jobs(self) -> list[SlurmJob]:
        if self._jobs is None:
            self._jobs = await self._hook.a_get_user_jobs()
        return self._jobs


def attributed_worker_arrays(
    services: Sequence[SlurmJob], records: Sequence[SlurmJob], worker_job_name: str
) -> list[int]:
    """Every array job named ``worker_job_name`` that one of ``services`` (of one user) submitted
    while it ran and no other job of the user that may be a service job may have run: what
    cancelling them may cancel. An array another service job may have submitted stays."""
    if not services:
        return []
    chosen = {job.job_id for job in services}
    others = [peer for peer in peer_services(services[0], records) if peer.job_id not in chosen]
    found = []
    for array in worker_arrays(records, worker_job_name, services[0].user):
        could, rivals = submitters(services, others, array)
        if could and not rivals:
            found.append(array.array_job_id)
    return found


async def service_worker_arrays(
    hook: SlurmReader, service_job_ids: Sequence[int], probe: ServiceProbe = ServiceProbe()
) -> list[int]:
    """The worker arrays of these service jobs, for cancelling them with the jobs: the probe's id,
    else the one ``cluster.env`` names when that file belongs to one of them, else the arrays found
    in Slurm that only they can have submitted (:func:`attributed_worker_arrays`); never one that
    another service job of the user may have submitted."""
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

    async def service_jobs() -> list[SlurmJob | None]:
        return list(await asyncio.gather(*(hook.a_get_job(job_id) for job_id in service_job_ids)))

    # Reads that do not depend on each other go at once (a killed task has seconds): the file, the
    # service jobs and the user's jobs (needed only when the file names no array; a file that cannot
    # be read or parsed names none).
    named, jobs, records = await asyncio.gather(
        named_in_cluster_env(), service_jobs(), hook.a_get_user_jobs(), return_exceptions=True
    )
    if isinstance(named, int):
        return [named]
    if isinstance(jobs, BaseException):
        raise jobs
    if isinstance(records, BaseException):
        raise records
    services = [job for job in jobs if job is not None and job.array_job_id is None]
    return attributed_worker_arrays(services, records, probe.worker_job_name)


@dataclass(frozen=True)
class Cancelled:
    """What cancelling one job did: ``ended`` True (cancelled now), False (it had already ended), or
    the error; ``array_of``: for a worker array, the service jobs it belongs to."""

    job_id: int
    ended: bool | BaseException
    array_of: tuple[int, ...] = ()

    def describe(self) -> str:
        what = f"Slurm job {self.job_id}"
        if self.array_of:
            what = f"Worker array {self.job_id} of Slurm job {', '.join(map(str, self.array_of))}"
        if isinstance(self.ended, BaseException):
            return f"{what} could not be cancelled: {describe_error(self.ended)}"
        return f"{what} {'cancelled' if self.ended else 'had already ended'}"


async def cancel_services(
    hook: SlurmCanceller,
    service_job_ids: Sequence[int],
    probe: ServiceProbe = ServiceProbe(),
    on_lookup_error: Callable[[BaseException], None] | None = None,
) -> list[Cancelled]:
    """Cancel Pathways service jobs and their worker arrays (:func:`service_worker_arrays`). A
    killed task has seconds before SIGKILL: the service jobs' cancels go out at once, while the
    arrays are looked up (a just-cancelled service job still names the array it submitted), and the
    arrays' follow. A lookup that fails (``on_lookup_error`` is told) leaves the arrays running.
    Harmless for jobs that already ended; one job's error is in its result, never raised."""
    services = list(dict.fromkeys(service_job_ids))
    cancelling = [asyncio.ensure_future(hook.a_cancel_job(job_id)) for job_id in services]
    try:
        arrays = [a for a in await service_worker_arrays(hook, services, probe) if a not in services]
    except Exception as err:
        if on_lookup_error is not None:
            on_lookup_error(err)
        arrays = []
    ended = await asyncio.gather(
        *cancelling, *(hook.a_cancel_job(job_id) for job_id in arrays), return_exceptions=True
    )
    return [
        *(Cancelled(job_id, result) for job_id, result in zip(services, ended[: len(services)], strict=True)),
        *(
            Cancelled(job_id, result, tuple(services))
            for job_id, result in zip(arrays, ended[len(services) :], strict=True)
        ),
    ]
