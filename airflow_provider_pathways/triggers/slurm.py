"""Triggers that follow Slurm jobs and the Pathways service's ``cluster.env`` readiness."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import TriggerEvent

from airflow_provider_pathways import metrics
from airflow_provider_pathways.slurm.end_states import (
    DEFAULT_HOLD_TIMEOUT,
    DEFAULT_MAX_REQUEUES,
    StuckJobWatch,
)
from airflow_provider_pathways.slurm.errors import SlurmJobLost, is_transient
from airflow_provider_pathways.slurm.service import (
    DEFAULT_CLUSTER_ENV_PATH,
    DEFAULT_PROXY_KEYS,
    DEFAULT_SERVICE_JOB_KEY,
    DEFAULT_WORKER_ARRAY_KEY,
    DEFAULT_WORKER_JOB_NAME,
    ServiceProbe,
    cancel_services,
    check_pathways_service,
)
from airflow_provider_pathways.transient import (
    DEFAULT_OUTAGE_TOLERANCE,
    OutageTooLong,
    OutageWindow,
    describe_error,
    validate_outage_tolerance,
)
from airflow_provider_pathways.triggers.killable import KillableTrigger

if TYPE_CHECKING:
    from airflow_provider_pathways.hooks.slurm import SlurmHook


def _validate_common(job_id: Any, poll_interval: float) -> None:
    if not isinstance(job_id, int) or job_id <= 0:
        raise ValueError(f"job_id: {job_id!r} must be a positive integer Slurm job id")
    if poll_interval <= 0:
        raise ValueError("poll_interval: must be > 0 seconds")


class _SlurmPollingTrigger(KillableTrigger):
    """Common parts: the hook, a deadline, riding out an outage of Slurm. Every event names the
    job it is about (``job_id``), so that the task resuming needs nothing else to find it."""

    def __init__(
        self,
        *,
        job_id: int,
        slurm_conn_id: str,
        poll_interval: float,
        deadline: float | None,
        outage_tolerance: float = DEFAULT_OUTAGE_TOLERANCE,
        deadline_reason: str | None = None,
    ) -> None:
        _validate_common(job_id, poll_interval)
        super().__init__()
        self.job_id = job_id
        self.slurm_conn_id = slurm_conn_id
        self.poll_interval = poll_interval
        self.deadline = deadline
        self.outage_tolerance = validate_outage_tolerance(outage_tolerance)
        self.deadline_reason = deadline_reason
        self._fired = False

    def _hook(self) -> SlurmHook:
        from airflow_provider_pathways.hooks.slurm import SlurmHook

        return SlurmHook(slurm_conn_id=self.slurm_conn_id)

    async def _poll(self, hook: SlurmHook) -> dict[str, Any] | None:
        """One poll; an event payload when done."""
        raise NotImplementedError

    async def _reconnected(self) -> None:
        """Count the reconnect (never raises: it does not change the wait)."""
        try:
            tags = metrics.task_tags(getattr(self, "task_instance", None), backend="slurm")
            await metrics.a_emit(metrics.TRIGGER_RECONNECTS, 1, tags)
        except Exception as err:
            self.log.debug("Could not send a metric: %s", err)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self._hook()
        outage = OutageWindow(self.outage_tolerance, what=f"Slurm (connection {self.slurm_conn_id!r})")
        try:
            while True:
                delay = self.poll_interval
                try:
                    payload = await self._poll(hook)
                    lasted = outage.recovered()
                    if lasted is not None:
                        self.log.info("Slurm answers again after %.0fs", lasted)
                        await self._reconnected()
                except Exception as err:
                    if not is_transient(err):
                        payload = {"status": "error", "message": f"Slurm error: {describe_error(err)}"}
                    else:
                        try:
                            delay = outage.failed(err, describe_error(err))
                        except OutageTooLong as too_long:
                            self.log.error("%s", too_long)
                            payload = {"status": "error", "message": str(too_long)}
                        else:
                            if outage.failures == 1:
                                self.log.warning(
                                    "Slurm unreachable (%s); retrying for up to %gs",
                                    describe_error(err),
                                    outage.tolerance,
                                )
                            payload = None
                if payload is not None:
                    break
                if self.deadline is not None and time.time() >= self.deadline:
                    payload = {
                        "status": "timeout",
                        "message": "the wait timed out",
                        "reason": self.deadline_reason,
                    }
                    break
                await asyncio.sleep(delay)
        finally:
            await hook.a_close()
        self._fired = True
        yield TriggerEvent({**payload, "job_id": self.job_id})

    def _common(self) -> dict[str, Any]:
        return {
            "slurm_conn_id": self.slurm_conn_id,
            "poll_interval": self.poll_interval,
            "deadline": self.deadline,
            "outage_tolerance": self.outage_tolerance,
            "deadline_reason": self.deadline_reason,
        }


class SlurmJobTrigger(_SlurmPollingTrigger):
    """
    Fire when a Slurm job ends (or Slurm forgets it).

    :param job_id: the job id.
    :param slurm_conn_id: a ``pathways_slurm`` connection.
    :param poll_interval: seconds between looks (one Slurm call each).
    :param deadline: give up at this epoch time with a ``timeout`` event.
    :param cancel_on_kill: cancel the job when the user kills the deferred task.
    :param hold_timeout: seconds the job may stay held before a ``stuck`` event (``None``: no bound).
    :param max_requeues: requeues after which a ``stuck`` event fires (``None``: no bound).
    :param newer: arguments a newer version of this provider serialized; ignored.

    Events: ``done`` with the ended job (``job`` None once the cluster forgot it), ``stuck`` with
    the job, the failure class and message when it will not end by itself (the task cancels it),
    ``timeout`` and ``error``.
    """

    def __init__(
        self,
        *,
        job_id: int,
        slurm_conn_id: str,
        poll_interval: float = 10.0,
        deadline: float | None = None,
        cancel_on_kill: bool = True,
        outage_tolerance: float = DEFAULT_OUTAGE_TOLERANCE,
        deadline_reason: str | None = None,
        hold_timeout: float | None = DEFAULT_HOLD_TIMEOUT,
        max_requeues: int | None = DEFAULT_MAX_REQUEUES,
        **newer: Any,
    ) -> None:
        super().__init__(
            job_id=job_id,
            slurm_conn_id=slurm_conn_id,
            poll_interval=poll_interval,
            deadline=deadline,
            outage_tolerance=outage_tolerance,
            deadline_reason=deadline_reason,
        )
        self.cancel_on_kill = cancel_on_kill
        self.stuck_watch = StuckJobWatch(hold_timeout=hold_timeout, max_requeues=max_requeues)
        self._restarts: int | None = None
        self._last_state = ""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        # Bounds at their defaults are left out: a triggerer of 0.1.0 can still run the trigger.
        bounds = {
            key: value
            for key, value, default in (
                ("hold_timeout", self.stuck_watch.hold_timeout, DEFAULT_HOLD_TIMEOUT),
                ("max_requeues", self.stuck_watch.max_requeues, DEFAULT_MAX_REQUEUES),
            )
            if value != default
        }
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"job_id": self.job_id, "cancel_on_kill": self.cancel_on_kill, **self._common(), **bounds},
        )

    async def _poll(self, hook: SlurmHook) -> dict[str, Any] | None:
        try:
            job = await hook.a_get_job(self.job_id, required=True)
        except SlurmJobLost as lost:
            return {"status": "done", "job": None, "message": str(lost)}
        if job is None:
            return {"status": "done", "job": None}
        if self._restarts is not None and job.restarts > self._restarts:
            self.log.warning(
                "Slurm job %s was requeued (restarts %d); Slurm runs it again", job.job_id, job.restarts
            )
        self._restarts = job.restarts
        state = f"{job.state}{f' ({job.reason})' if job.reason else ''}"
        if state != self._last_state:
            self.log.info("Slurm job %s: %s", job.job_id, state)
            self._last_state = state
        if job.terminal:
            return {"status": "done", "job": job.to_dict()}
        stuck = self.stuck_watch.stuck(job, time.time())
        if stuck is None:
            return None
        failure, message = stuck
        return {"status": "stuck", "job": job.to_dict(), "failure": failure.value, "message": message}

    async def end_job_on_kill(self) -> None:
        """Cancel the job when the user kills the deferred task; harmless if it already ended."""
        if not self.cancel_on_kill:
            return
        hook = self._hook()
        try:
            cancelled = await hook.a_cancel_job(self.job_id)
        finally:
            await hook.a_close()
        self.log.info(
            "Slurm job %s %s on kill", self.job_id, "cancelled" if cancelled else "had already ended"
        )


class PathwaysClusterEnvTrigger(_SlurmPollingTrigger):
    """
    Fire when the Pathways service on Slurm is ready, or when its service job ends.

    Ready: ``cluster.env`` exists, was written after the service job started, holds the proxy
    address, and (with ``min_slices``) at least that many worker array tasks are RUNNING; the worker
    array and the file are attributed to the service job as :class:`ServiceProbe` says. Arguments a
    newer version of this provider serialized are ignored.
    """

    def __init__(
        self,
        *,
        service_job_id: int,
        slurm_conn_id: str,
        cluster_env_path: str = DEFAULT_CLUSTER_ENV_PATH,
        proxy_keys: Sequence[str] = DEFAULT_PROXY_KEYS,
        min_slices: int | None = None,
        worker_array_job_id: int | None = None,
        worker_array_key: str = DEFAULT_WORKER_ARRAY_KEY,
        service_job_key: str = DEFAULT_SERVICE_JOB_KEY,
        worker_job_name: str = DEFAULT_WORKER_JOB_NAME,
        cluster_env_per_job: bool = False,
        poll_interval: float = 5.0,
        deadline: float | None = None,
        cancel_on_kill: bool = False,
        outage_tolerance: float = DEFAULT_OUTAGE_TOLERANCE,
        deadline_reason: str | None = None,
        **newer: Any,
    ) -> None:
        if min_slices is not None and (not isinstance(min_slices, int) or min_slices < 1):
            raise ValueError(f"min_slices: {min_slices!r} must be an integer >= 1")
        if not cluster_env_path:
            raise ValueError("cluster_env_path: empty; pass the path of cluster.env on the cluster")
        super().__init__(
            job_id=service_job_id,
            slurm_conn_id=slurm_conn_id,
            poll_interval=poll_interval,
            deadline=deadline,
            outage_tolerance=outage_tolerance,
            deadline_reason=deadline_reason,
        )
        self.cancel_on_kill = cancel_on_kill
        self.probe = ServiceProbe(
            cluster_env_path=cluster_env_path,
            proxy_keys=tuple(proxy_keys),
            min_slices=min_slices,
            worker_array_job_id=worker_array_job_id,
            worker_array_key=worker_array_key,
            service_job_key=service_job_key,
            worker_job_name=worker_job_name,
            cluster_env_per_job=cluster_env_per_job,
        )
        self._last_reason = ""

    @property
    def service_job_id(self) -> int:
        """The service job (its events' ``job_id``)."""
        return self.job_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "service_job_id": self.service_job_id,
                **self.probe.to_dict(),
                "cancel_on_kill": self.cancel_on_kill,
                **self._common(),
            },
        )

    async def _poll(self, hook: SlurmHook) -> dict[str, Any] | None:
        check = await check_pathways_service(hook, self.service_job_id, self.probe)
        if check.service_ended:
            return {"status": "service_ended", "job": check.job.to_dict() if check.job else None}
        if check.readiness.reason != self._last_reason:
            self.log.info("Pathways service %s: %s", self.service_job_id, check.readiness.reason)
            self._last_reason = check.readiness.reason
        if check.readiness.ready:
            return {
                "status": "ready",
                "readiness": check.readiness.to_dict(),
                "job": check.job.to_dict() if check.job else None,
                "seen_at": check.seen_at,
            }
        return None

    async def end_job_on_kill(self) -> None:
        """Cancel the service job and its worker array when the user kills the deferred task
        (only with ``cancel_on_kill``); harmless if they already ended."""
        if not self.cancel_on_kill:
            return
        hook = self._hook()
        try:
            results = await cancel_services(hook, [self.service_job_id], self.probe)
        finally:
            await hook.a_close()
        for result in results:
            log = self.log.warning if isinstance(result.ended, BaseException) else self.log.info
            log("%s on kill", result.describe())
