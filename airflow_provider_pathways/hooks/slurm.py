"""Hook for Slurm clusters over slurmrestd (REST) or SSH, with ``a_*`` async twins for triggers.

The connection's ``transport`` extra picks the transport; both sit behind one async interface
(:class:`SlurmTransport`) and all parsing and state mapping lives in
:mod:`airflow_provider_pathways.slurm`. The async implementation is the only one: sync methods
run it on a private event loop thread owned by the hook (so they also work when the calling thread
already runs an event loop, and they reuse one HTTP session / SSH connection across calls); REST
transports are shared per event loop and connection id. Call :meth:`SlurmHook.close` (sync) or
:meth:`SlurmHook.a_close` (async) when done.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from airflow.providers.common.compat.sdk import BaseHook

from airflow_provider_pathways.hooks.loop_thread import LoopShared, LoopThread, blocking
from airflow_provider_pathways.slurm.accounting import latest_attempts
from airflow_provider_pathways.slurm.errors import SlurmAuthError, SlurmError, SlurmJobLost, is_transient
from airflow_provider_pathways.slurm.job import SlurmJob, expand_task_ids
from airflow_provider_pathways.slurm.settings import SlurmSettings
from airflow_provider_pathways.slurm.submit import SubmitRequest
from airflow_provider_pathways.slurm.transport import FileAccess, SlurmTransport, expand_user
from airflow_provider_pathways.transient import CallRetry

T = TypeVar("T")


#: The REST transports of each event loop, one per connection id (one HTTP session for all the
#: hooks on a loop: a triggerer runs hundreds of Slurm triggers on one connection).
REST_TRANSPORTS: LoopShared[SlurmTransport] = LoopShared(lambda transport: transport.close())


class SlurmHook(BaseHook):
    """
    Submit, follow and cancel Slurm jobs and read their files, over slurmrestd or SSH.

    Connection (``conn_type`` ``pathways_slurm``): ``host``, ``port``, ``login`` (the cluster user),
    ``password`` (REST: the JWT; SSH: optional password) and extra JSON with ``transport``
    (``rest`` or ``ssh``; default ``rest``) and, for REST, ``api_version`` (``auto`` or v0.0.38..v0.0.45),
    ``scheme``, ``verify_ssl``, ``token_file``, ``shared_fs`` (files are read from this machine's
    filesystem, which shares the cluster's paths) or ``ssh_host``/``ssh_port`` (files over SFTP;
    wins over ``shared_fs``): a REST connection with neither is refused; for SSH (and
    ``ssh_host``): ``private_key`` (PEM text) or ``key_file``, ``private_key_passphrase``,
    ``known_hosts`` (text or path) and ``strict_host_key_checking`` (default true; false must be
    given explicitly).

    ``slurm_bin_dir`` (where sbatch/scontrol/scancel live if not on the SSH PATH) and the timeouts
    ``connect_timeout``, ``request_timeout``, ``command_timeout`` are optional. Extra keys may also
    carry the UI prefix ``extra__pathways_slurm__``.

    Differences between the transports: REST jobs get only ``PATH``, ``HOME``, ``USER``,
    ``LOGNAME`` plus ``environment`` (slurmrestd passes no login environment), and their
    ``working_directory`` defaults to the user's home; SSH jobs inherit the SSH session's
    environment like an interactive ``sbatch``, and submissions are staged (mode 0700) under
    ``~/.airflow-pathways/submit/`` and removed right after ``sbatch``.

    Sync methods run on a private event loop thread; ``a_*`` twins run in the caller's loop and
    never block it (aiohttp, asyncssh, file reads in a worker thread).
    """

    conn_name_attr = "slurm_conn_id"
    default_conn_name = "pathways_slurm_default"
    conn_type = "pathways_slurm"
    hook_name = "Pathways on Slurm"
    call_retry = CallRetry()

    def __init__(self, slurm_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.slurm_conn_id = slurm_conn_id
        self._settings: SlurmSettings | None = None
        self.runner = LoopThread("slurm-hook-loop")
        self._async_transport: tuple[asyncio.AbstractEventLoop, SlurmTransport] | None = None
        self._private_close: Callable[[], Coroutine[Any, Any, None]] | None = None
        self._array_size_cache: weakref.WeakKeyDictionary[SlurmTransport, int | None] = (
            weakref.WeakKeyDictionary()
        )
        self._finalizer = weakref.finalize(self, self.runner.stop)

    # ---- settings and transports ----------------------------------------------------------

    @property
    def settings(self) -> SlurmSettings:
        """The parsed connection (read once, synchronously)."""
        if self._settings is None:
            self._settings = SlurmSettings.from_connection(self.get_connection(self.slurm_conn_id))
        return self._settings

    async def _a_settings(self) -> SlurmSettings:
        if self._settings is None:
            aget_connection = getattr(self, "aget_connection", None)  # Airflow 3.1+
            if aget_connection is not None:
                conn = await aget_connection(self.slurm_conn_id)
            else:  # Airflow 2.11 and 3.0: read in a thread, off the triggerer's loop
                conn = await asyncio.to_thread(self.get_connection, self.slurm_conn_id)
            self._settings = SlurmSettings.from_connection(conn)
        return self._settings

    @staticmethod
    def _make_transport(settings: SlurmSettings) -> SlurmTransport:
        if settings.transport == "rest":
            from airflow_provider_pathways.hooks.slurm_rest import RestTransport

            return RestTransport(settings)
        from airflow_provider_pathways.hooks.slurm_ssh import SshTransport

        return SshTransport(settings)

    def run_on_private_loop(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run a coroutine that uses this hook's ``a_*`` methods on the hook's private event loop.

        For synchronous callers (pokes, polling loops): the HTTP session or SSH connection opened
        there is kept for the next call instead of a new event loop and connection per call."""
        return self.runner.run(make())

    def _log_retry(self, err: BaseException, delay: float) -> None:
        self.log.warning("Slurm error (%s); retrying in %.1fs", self._safe_message(err), delay)

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        return await self.call_retry.a_call(call, is_transient=is_transient, on_retry=self._log_retry)

    async def _a_transport(self) -> SlurmTransport:
        loop = asyncio.get_running_loop()
        if self._async_transport is not None and self._async_transport[0] is loop:
            return self._async_transport[1]
        settings = await self._a_settings()
        if self._async_transport is not None and self._async_transport[0] is loop:
            return self._async_transport[1]  # another coroutine made it while we awaited
        if settings.transport == "rest":  # one HTTP session per connection and loop for all hooks

            async def make() -> SlurmTransport:
                return self._make_transport(settings)

            transport = await REST_TRANSPORTS.acquire(self.slurm_conn_id, make)
            if self._async_transport is not None and self._async_transport[0] is loop:
                await REST_TRANSPORTS.release(self.slurm_conn_id, transport)  # another coroutine's won
                return self._async_transport[1]
        else:  # an SSH server caps sessions per connection (MaxSessions): one connection per hook
            transport = self._make_transport(settings)
        self._async_transport = (loop, transport)
        if self.runner.owns(loop):  # the sync methods' transport: closed when the private loop stops
            self._private_close = _once(_release, loop, self.slurm_conn_id, transport)
            self.runner.at_stop(self._private_close)
        return transport

    async def _with_fresh_token(
        self, transport: SlurmTransport, make: Callable[[SlurmTransport], Awaitable[T]]
    ) -> T:
        """``make(transport)``; when the token is refused (expired, rotated), once more with a fresh
        one if the connection has a source of them. A refused call did nothing, so a submission too
        is safe to repeat."""
        try:
            return await make(transport)
        except SlurmAuthError as refused:
            if not await transport.refresh_token():
                raise
            self.log.info(
                "Slurm connection %r: the token was refused (%s); trying a fresh one",
                self.slurm_conn_id,
                self._safe_message(refused),
            )
            return await make(transport)

    async def _a_call(self, make: Callable[[SlurmTransport], Awaitable[T]], *, retry: bool = True) -> T:
        async def call() -> T:
            return await self._with_fresh_token(await self._a_transport(), make)

        return await (self._retrying(call) if retry else call())

    # ---- shared logic ----------------------------------------------------------------------

    async def _expand(self, transport: SlurmTransport, path: str) -> str:
        if not path.startswith("~"):
            return path
        home = await transport.files.home() if transport.files is not None else None
        return expand_user(path, home, self._settings.login if self._settings else "")

    def _files(self, transport: SlurmTransport) -> FileAccess:
        if transport.files is None:
            raise SlurmError(
                f"Slurm connection {self.slurm_conn_id!r} has no file access: "
                "set extra shared_fs=true (files visible on this machine) or ssh_host (SFTP)"
            )
        return transport.files

    async def _submit(self, transport: SlurmTransport, request: SubmitRequest) -> int:
        changes: dict[str, Any] = {}
        for name in ("working_directory", "output", "error", "script_path"):
            value = getattr(request, name)
            if value is not None and value.startswith("~"):
                changes[name] = await self._expand(transport, value)
        request = dataclasses.replace(request, **changes) if changes else request
        if request.script_path is not None:
            files = self._files(transport)
            if await files.stat(request.script_path) is None:
                raise FileNotFoundError(
                    f"script_path {request.script_path!r} does not exist on the cluster "
                    f"(checked via {files.description}); nothing was submitted"
                )
        if request.array is not None:
            highest = max(expand_task_ids(request.array), default=0)
            limit = await self._max_array_size(transport)
            if limit is not None and highest >= limit:
                raise ValueError(
                    f"array {request.array!r}: index {highest} is out of range: the cluster's "
                    f"MaxArraySize is {limit} (indices 0..{limit - 1}); nothing was submitted"
                )
        job_id = await transport.submit(request)
        self.log.info("Submitted Slurm job %s (%s)", job_id, request.display_name)
        return job_id

    async def _max_array_size(self, transport: SlurmTransport) -> int | None:
        """``MaxArraySize``, read once per connection (transport)."""
        cache = self._array_size_cache
        if transport not in cache:
            cache[transport] = await transport.max_array_size()
        return cache[transport]

    @staticmethod
    def _pick(records: list[SlurmJob], job_id: int) -> SlurmJob | None:
        for job in records:
            if job.job_id == job_id:
                return job
        return records[0] if len(records) == 1 else None

    @classmethod
    async def _get_job(
        cls, transport: SlurmTransport, job_id: int, required: bool = False
    ) -> SlurmJob | None:
        """slurmctld's record; once slurmctld forgot the job (MinJobAge after its end), accounting's
        last attempt; when neither knows it: None, or :class:`SlurmJobLost` if ``required``."""
        job = cls._pick(await transport.jobs(job_id), job_id)
        if job is not None:
            return job
        history = await transport.accounting_jobs(job_id)
        if history is not None:
            job = cls._pick(latest_attempts(history), job_id)
            if job is not None:
                return job
        if required:
            raise SlurmJobLost(job_id, accounting=history is not None)
        return None

    @staticmethod
    async def _array_tasks(transport: SlurmTransport, array_job_id: int) -> list[SlurmJob]:
        records = await transport.jobs(array_job_id)
        if not records:  # slurmctld forgot the array: its tasks' last attempts from accounting
            records = latest_attempts(await transport.accounting_jobs(array_job_id) or [])
        tasks = [j for j in records if j.array_job_id == array_job_id and j.array_task_id is not None]
        return sorted(tasks, key=lambda j: j.array_task_id or 0)

    @staticmethod
    async def _jobs_named(transport: SlurmTransport, name: str) -> list[SlurmJob]:
        if not name:
            raise ValueError("name: empty; pass the Slurm job name to look for")
        records = await transport.jobs_named(name)
        return sorted(records, key=lambda j: (j.array_job_id or j.job_id, j.array_task_id or 0, j.job_id))

    @staticmethod
    async def _user_jobs(transport: SlurmTransport) -> list[SlurmJob]:
        records = await transport.user_jobs()
        return sorted(records, key=lambda j: (j.array_job_id or j.job_id, j.array_task_id or 0, j.job_id))

    async def _cancel(self, transport: SlurmTransport, job_id: int) -> bool:
        records = await transport.jobs(job_id)
        if not records or all(job.terminal for job in records):
            return False
        await transport.cancel(job_id)
        self.log.info("Cancelled Slurm job %s", job_id)
        return True

    async def _read(self, transport: SlurmTransport, path: str, tail_bytes: int | None) -> str | None:
        if tail_bytes is not None and tail_bytes < 0:
            raise ValueError("tail_bytes must be >= 0")
        data = await self._files(transport).read(await self._expand(transport, path), tail_bytes)
        return None if data is None else data.decode("utf-8", errors="replace")

    async def _stat(self, transport: SlurmTransport, path: str) -> tuple[float, int] | None:
        return await self._files(transport).stat(await self._expand(transport, path))

    # ---- the API (async; each sync method below runs the same coroutine) --------------------

    async def a_submit_job(self, request: SubmitRequest | None = None, **fields: Any) -> int:
        """Submit a batch job and return its id: ``request``, or the fields of
        :meth:`SubmitRequest.build <airflow_provider_pathways.slurm.submit.SubmitRequest.build>`.

        Exactly one of ``script`` (the script text; SSH uploads it over SFTP and runs ``sbatch`` on
        it, REST sends it in the body) or ``script_path`` (a path on the cluster, checked to exist
        first: FileNotFoundError otherwise; SSH runs ``sbatch <path>``, REST submits a wrapper that
        ``exec``s it). Parameters override the script's ``#SBATCH`` lines; over REST, which ignores
        such lines, the hook applies the ones it can map (name, partition, account, qos, time,
        chdir, output, error, array, comment, requeue, open-mode, cpus-per-task, ntasks,
        constraint, dependency, hold) and logs the others. ``time_limit`` is minutes or a Slurm
        time string. ``environment`` values arrive byte for byte (SSH: written to a file over SFTP,
        never put on a command line). ``extra_options`` are further sbatch long options
        (``{"cpus-per-task": "4"}``, ``""`` for a flag; REST maps them to job fields, dashes to
        underscores). Paths may start with ``~``. Bad input raises ValueError/TypeError naming
        the field before anything is submitted. Not retried: a submission could run twice.
        """
        request = _request(request, fields)
        return await self._a_call(lambda t: self._submit(t, request), retry=False)

    async def a_get_job(self, job_id: int, *, required: bool = False) -> SlurmJob | None:
        """The job (or array task with that id): slurmctld's record, or, once slurmctld forgot the
        ended job (``MinJobAge`` after its end, 300 s by default), the last attempt in accounting
        (``source == "accounting"``). None when neither knows it; with ``required=True`` (a job
        this caller submitted) that raises :class:`~airflow_provider_pathways.slurm.errors.SlurmJobLost`
        instead ("job N is no longer known to slurmctld and the cluster keeps no accounting"),
        an infrastructure failure whose end is unknown."""
        return await self._a_call(lambda t: self._get_job(t, int(job_id), required))

    async def a_max_array_size(self) -> int | None:
        """The cluster's ``MaxArraySize`` (array indices go from 0 to MaxArraySize - 1; Slurm's
        default is 1001), read once per connection: ``scontrol show config`` over SSH (also for REST
        connections with ``ssh_host``), ``GET /slurm/vX/conf`` from slurmrestd v0.0.45 (Slurm
        26.05) on. None when the connection cannot read it (slurmrestd before v0.0.45 without
        ``ssh_host``); slurmctld then still refuses a too large array at submission."""
        return await self._a_call(self._max_array_size)

    async def a_get_array_tasks(self, array_job_id: int) -> list[SlurmJob]:
        """Every task of an array, pending ranges expanded, sorted by task id (one Slurm query)."""
        return await self._a_call(lambda t: self._array_tasks(t, int(array_job_id)))

    async def a_expand_path(self, path: str) -> str:
        """The path with a leading ``~`` replaced by the cluster user's home (read over the
        connection's file access)."""
        return await self._a_call(lambda t: self._expand(t, path))

    async def a_get_jobs_named(self, name: str) -> list[SlurmJob]:
        """Every job and array task of the connection's user with exactly this name that slurmctld
        still knows (one listing: slurmrestd's job list, or ``squeue -u -n`` over SSH), sorted by
        job id. Ended jobs drop out ``MinJobAge`` after their end."""
        return await self._a_call(lambda t: self._jobs_named(t, name))

    async def a_get_user_jobs(self) -> list[SlurmJob]:
        """Every job and array task of the connection's user that slurmctld still knows, whatever
        its name (one listing: slurmrestd's job list, or ``squeue -u`` over SSH), sorted by job id.
        Ended jobs drop out ``MinJobAge`` after their end."""
        return await self._a_call(self._user_jobs)

    async def a_cancel_job(self, job_id: int) -> bool:
        """Cancel the job (an array id cancels every task): True if it was active and is now being
        cancelled, False if it had already ended or is unknown. Never raises for an ended job."""
        return await self._a_call(lambda t: self._cancel(t, int(job_id)))

    async def a_set_job_comment(self, job_id: int, comment: str) -> None:
        """Replace the job's comment (``scontrol update JobId=<id> Comment=...``, or slurmrestd's job
        update): the provider's own marks of which task instance and try follow the job."""
        await self._a_call(lambda t: t.set_comment(int(job_id), comment))

    async def a_read_file(self, path: str, *, tail_bytes: int | None = None) -> str | None:
        """The file's text (UTF-8, undecodable bytes replaced; only the last ``tail_bytes`` if
        given), or None if it does not exist. ``~`` is the cluster user's home."""
        return await self._a_call(lambda t: self._read(t, path, tail_bytes))

    async def a_stat_file(self, path: str) -> tuple[float, int] | None:
        """``(mtime in epoch seconds, size in bytes)``, or None if the file does not exist."""
        return await self._a_call(lambda t: self._stat(t, path))

    async def a_test_connection(self) -> tuple[bool, str]:
        """Check that Slurm answers with these credentials; never raises."""
        try:
            return True, await self._a_call(lambda t: t.describe(), retry=False)
        except Exception as err:
            return False, self._safe_message(err)

    async def a_close(self) -> None:
        """Close the HTTP session / SSH connection used by the ``a_*`` methods in this loop (a
        shared HTTP session closes with its last hook)."""
        pooled, self._async_transport = self._async_transport, None
        loop = asyncio.get_running_loop()
        if pooled is None or pooled[0] is not loop:
            return
        if self.runner.owns(loop) and self._private_close is not None:
            await self._private_close()  # not again when the private loop stops
            return
        await _release(loop, self.slurm_conn_id, pooled[1])

    def close(self) -> None:
        """Close what the sync methods (and :meth:`run_on_private_loop`) opened on the private loop,
        and stop its thread."""
        if self._async_transport is not None and self.runner.owns(self._async_transport[0]):
            with contextlib.suppress(Exception):  # best effort: the loop is stopped next
                self.runner.run(self.a_close())
        self._finalizer()

    # ---- sync methods: the coroutines above, run on the private loop --------------------------

    submit_job = blocking(a_submit_job)
    get_job = blocking(a_get_job)
    max_array_size = blocking(a_max_array_size)
    get_array_tasks = blocking(a_get_array_tasks)
    expand_path = blocking(a_expand_path)
    get_jobs_named = blocking(a_get_jobs_named)
    get_user_jobs = blocking(a_get_user_jobs)
    cancel_job = blocking(a_cancel_job)
    set_job_comment = blocking(a_set_job_comment)
    read_file = blocking(a_read_file)
    stat_file = blocking(a_stat_file)
    test_connection = blocking(a_test_connection)

    # ---- helpers --------------------------------------------------------------------------

    def _safe_message(self, err: BaseException) -> str:
        message = f"{type(err).__name__}: {err}" if not isinstance(err, SlurmError) else str(err)
        settings = self._settings
        for secret in settings.secrets if settings else ():
            message = message.replace(secret, "***")
        return message


async def _release(loop: asyncio.AbstractEventLoop, conn_id: str, transport: SlurmTransport) -> None:
    """Give back ``transport`` of ``loop`` (a shared HTTP session closes with its last hook), or
    close it."""
    if not await REST_TRANSPORTS.release(conn_id, transport, loop):
        await transport.close()


def _once(
    close: Callable[..., Coroutine[Any, Any, None]], *args: Any
) -> Callable[[], Coroutine[Any, Any, None]]:
    """``close(*args)`` the first time it is awaited, nothing after; holds no reference to the hook,
    so that the hook can be collected (and its private loop stopped) while the loop holds this."""
    done = False

    async def once() -> None:
        nonlocal done
        if not done:
            done = True
            await close(*args)

    return once


def _request(request: SubmitRequest | None, fields: Mapping[str, Any]) -> SubmitRequest:
    """A submission given as a request or as its fields, not both."""
    if request is None:
        return SubmitRequest.build(**fields)
    if fields:
        raise TypeError(f"give a SubmitRequest or its fields, not both (got {', '.join(sorted(fields))})")
    return request
