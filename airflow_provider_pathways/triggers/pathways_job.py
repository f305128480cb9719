"""Trigger that watches a PathwaysJob (or plain JobSet) until it is ready or finished."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import TriggerEvent

from airflow_provider_pathways import metrics
from airflow_provider_pathways.gke.objects import (
    HEAD_REPLICATED_JOB,
    MAIN_CONTAINER,
    WORKER_REPLICATED_JOB,
    JobKind,
    StatusOptions,
)
from airflow_provider_pathways.gke.status import (
    Phase,
    WaitUntil,
    observe_status,
    queue_time_left,
    validate_wait_arguments,
    wait_is_over,
)
from airflow_provider_pathways.gke.task_job import JobRef, Release, describe_release
from airflow_provider_pathways.tpu_hours import Timeline
from airflow_provider_pathways.transient import (
    CONNECTION_TO_FIX,
    DEFAULT_OUTAGE_TOLERANCE,
    ConnectionToFix,
    OutageTooLong,
    validate_outage_tolerance,
)
from airflow_provider_pathways.transient import describe_error as describe
from airflow_provider_pathways.triggers.killable import KillableTrigger

if TYPE_CHECKING:
    from airflow_provider_pathways.gke.status import PathwaysJobStatus
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook


# While a job is queued, repeat its progress line this often (the watch is silent meanwhile).
_QUEUED_LOG_EVERY = 300.0


class PathwaysJobTrigger(KillableTrigger):
    """
    Watch a Pathways job and fire once it is ready (``min_slices``), finished, or failed.

    :param name: job name.
    :param namespace: job namespace.
    :param kubernetes_conn_id: cncf-kubernetes connection.
    :param kind: ``PathwaysJob`` or ``JobSet``.
    :param wait_until: ``ready`` or ``finished``.
    :param min_slices: worker slices that must be ready (``ready`` only); default: all of them.
    :param fail_on_suspend: fire when the JobSet is suspended (preempted) instead of waiting.
    :param delete_on_kill: delete the job when the user kills the deferred task.
    :param deadline: fire a ``timeout`` event at this epoch time.
    :param outage_tolerance: seconds an API server outage may last before the wait fails.
    :param deadline_reason: which limit set ``deadline`` (``wait_timeout`` or ``execution_timeout``),
        echoed in the ``timeout`` event.
    :param queue_timeout: fire a ``queue_timeout`` event when the job has been queued by Kueue for
        this many seconds; a queued job is otherwise waited for (and never counts as preempted).
    :param uid: the job's UID; on kill, only that object is deleted.
    :param owner_labels: the owner labels of the task instance; on kill, only its job is deleted.
    :param try_number: the try that deferred; on kill, a job a newer try follows is left alone.
    :param metric_tags: tags of the metrics the wait sends (:mod:`airflow_provider_pathways.metrics`:
        ``tpu_type``; ``dag_id`` and ``task_id`` come from the trigger's task instance).
    :param newer: arguments a newer version of this provider serialized; ignored.
    """

    def __init__(
        self,
        *,
        name: str,
        namespace: str,
        kubernetes_conn_id: str | None = "kubernetes_default",
        kind: str = JobKind.PATHWAYS_JOB.value,
        wait_until: str = WaitUntil.FINISHED.value,
        min_slices: int | None = None,
        worker_replicated_job: str = WORKER_REPLICATED_JOB,
        head_replicated_job: str = HEAD_REPLICATED_JOB,
        main_container: str = MAIN_CONTAINER,
        cluster_context: str | None = None,
        config_file: str | None = None,
        in_cluster: bool | None = None,
        fail_on_suspend: bool = True,
        delete_on_kill: bool = True,
        watch_timeout_seconds: int = 900,
        deadline: float | None = None,
        outage_tolerance: float = DEFAULT_OUTAGE_TOLERANCE,
        queue_timeout: float | None = None,
        deadline_reason: str | None = None,
        uid: str | None = None,
        owner_labels: dict[str, str] | None = None,
        try_number: int | None = None,
        metric_tags: dict[str, str] | None = None,
        **newer: Any,
    ) -> None:
        super().__init__()
        validate_wait_arguments(name=name, wait_until=wait_until, min_slices=min_slices, kind=kind)
        if wait_until == WaitUntil.CREATED.value:
            raise ValueError("wait_until: a trigger waits for 'ready' or 'finished', not 'created'")
        if watch_timeout_seconds < 1:
            raise ValueError("watch_timeout_seconds: must be >= 1")
        self.name = name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.kind = kind
        self.wait_until = wait_until
        self.min_slices = min_slices
        self.worker_replicated_job = worker_replicated_job
        self.head_replicated_job = head_replicated_job
        self.main_container = main_container
        self.cluster_context = cluster_context
        self.config_file = config_file
        self.in_cluster = in_cluster
        self.fail_on_suspend = fail_on_suspend
        self.delete_on_kill = delete_on_kill
        self.watch_timeout_seconds = watch_timeout_seconds
        self.deadline = deadline
        self.outage_tolerance = validate_outage_tolerance(outage_tolerance)
        self.queue_timeout = queue_timeout
        self.deadline_reason = deadline_reason
        self.uid = uid
        self.owner_labels = dict(owner_labels or {})
        self.try_number = try_number
        self.metric_tags = dict(metric_tags or {})
        self.timeline = Timeline()
        self._fired = False
        self._queued = False

    @classmethod
    def for_task(cls, task: Any, **arguments: Any) -> PathwaysJobTrigger:
        """The trigger for an operator or sensor: its connection, kind and replicated-job names,
        and ``arguments``."""
        inherited = {
            key: getattr(task, key)
            for key in (
                "kubernetes_conn_id",
                "kind",
                "worker_replicated_job",
                "head_replicated_job",
                "cluster_context",
                "config_file",
                "in_cluster",
            )
        }
        return cls(**{**inherited, **arguments})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "kubernetes_conn_id": self.kubernetes_conn_id,
            "kind": self.kind,
            "wait_until": self.wait_until,
            "min_slices": self.min_slices,
            "worker_replicated_job": self.worker_replicated_job,
            "head_replicated_job": self.head_replicated_job,
            "main_container": self.main_container,
            "cluster_context": self.cluster_context,
            "config_file": self.config_file,
            "in_cluster": self.in_cluster,
            "fail_on_suspend": self.fail_on_suspend,
            "delete_on_kill": self.delete_on_kill,
            "watch_timeout_seconds": self.watch_timeout_seconds,
            "deadline": self.deadline,
            "outage_tolerance": self.outage_tolerance,
            "queue_timeout": self.queue_timeout,
            "deadline_reason": self.deadline_reason,
        }
        # Added after 0.1.0: sent only when set, so that a trigger built from 0.1.0's arguments
        # serializes as it did; a triggerer that does not know them ignores them (**newer) and on
        # kill deletes the job by name.
        if self.uid is not None:
            kwargs["uid"] = self.uid
        if self.owner_labels:
            kwargs["owner_labels"] = self.owner_labels
        if self.try_number is not None:
            kwargs["try_number"] = self.try_number
        if self.metric_tags:
            kwargs["metric_tags"] = self.metric_tags
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    @cached_property
    def hook(self) -> PathwaysJobHook:
        from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

        return PathwaysJobHook.for_task(self)

    def _done(self, status: PathwaysJobStatus) -> bool:
        return wait_is_over(
            status,
            wait_until=self.wait_until,
            min_slices=self.min_slices,
            fail_on_suspend=self.fail_on_suspend,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        event = await self._wait()
        self._fired = True
        # the job followed, for a task resumed without task_state_store (Airflow before 3.3)
        event["followed"] = JobRef(self.name, self.namespace, self.kind, self.uid).to_id()
        event["timeline"] = self.timeline.to_dict()  # the milestones seen (and sent) here
        yield TriggerEvent(event)

    async def _wait(self) -> dict[str, Any]:
        """Follow the job until it is done; the event payload. The watch is closed before returning."""
        options = dataclasses.replace(
            StatusOptions.for_task(self, main_container=self.main_container), uid=self.uid
        )
        need = self.min_slices if self.wait_until == WaitUntil.READY.value else None
        statuses = self.hook.a_watch_status(
            self.name,
            self.namespace,
            options,
            watch_timeout_seconds=self.watch_timeout_seconds,
            outage_tolerance=self.outage_tolerance,
            on_recovered=self._reconnected,
        )
        status: PathwaysJobStatus | None = None
        # The next status, awaited across waits that time out (cancelling it would end the watch).
        pending: asyncio.Future[PathwaysJobStatus] | None = None
        try:
            while True:
                remaining = None if self.deadline is None else max(self.deadline - time.time(), 0)
                queue_left = queue_time_left(status, self.queue_timeout)
                wait = min((t for t in (remaining, queue_left) if t is not None), default=None)
                if status is not None and status.phase is Phase.QUEUED:
                    wait = _QUEUED_LOG_EVERY if wait is None else min(wait, _QUEUED_LOG_EVERY)
                if pending is None:
                    pending = asyncio.ensure_future(statuses.__anext__())
                done, _ = await asyncio.wait({pending}, timeout=wait)
                if not done:
                    if self.deadline is not None and time.time() >= self.deadline:
                        timed_out: dict[str, Any] = {
                            "status": "timeout",
                            "message": "the wait timed out",
                            "reason": self.deadline_reason,
                        }
                        if status is not None:  # a queued job is deleted whatever delete_on says
                            timed_out["job"] = status.to_dict()
                        return timed_out
                    if status is not None and queue_time_left(status, self.queue_timeout) == 0:
                        return {"status": "queue_timeout", "job": status.to_dict()}
                    if status is not None:
                        self.log.info("%s", status.progress(need))  # still queued
                    continue
                finished, pending = pending, None
                status = finished.result()
                self._queued = status.phase is Phase.QUEUED
                self.log.info("%s", status.progress(need))
                await self._measure(status)
                if self._done(status):
                    return {"status": "done", "job": status.to_dict()}
        except StopAsyncIteration:
            return {"status": "error", "message": "the watch ended without a final status"}
        except OutageTooLong as err:
            self.log.error("Giving up on %s/%s: %s", self.namespace, self.name, err)
            return {"status": "error", "message": f"watching {self.namespace}/{self.name}: {err}"}
        except ConnectionToFix as err:  # e.g. the credentials got no new token: no retry gets past it
            self.log.error("Giving up on %s/%s: %s", self.namespace, self.name, err)
            return {
                "status": "error",
                "message": f"watching {self.namespace}/{self.name}: {err}",
                CONNECTION_TO_FIX: True,
            }
        except Exception as err:
            self.log.exception("Watching %s/%s failed", self.namespace, self.name)
            return {
                "status": "error",
                "message": f"watching {self.namespace}/{self.name} failed: {describe(err)}",
            }
        finally:
            if pending is not None:
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pending
            await statuses.aclose()

    def _tags(self) -> dict[str, str]:
        ti = getattr(self, "task_instance", None)
        return {**metrics.task_tags(ti, backend="gke"), **self.metric_tags}

    async def _measure(self, status: PathwaysJobStatus) -> None:
        """Record the milestones ``status`` shows; send those newly reached (off the event loop)."""
        try:
            reached = observe_status(self.timeline, status, self.min_slices)
            for milestone in reached:
                seconds = self.timeline.since_submitted(milestone)
                if seconds is not None:
                    await metrics.a_emit(metrics.MILESTONE_METRICS[milestone], seconds, self._tags())
        except Exception as err:  # measuring never ends the wait
            self.log.debug("Could not measure the job: %s", err)

    async def _reconnected(self, lasted: float) -> None:
        try:
            await metrics.a_emit(metrics.TRIGGER_RECONNECTS, 1, self._tags())
        except Exception as err:
            self.log.debug("Could not send a metric: %s", err)

    async def end_job_on_kill(self) -> None:
        """Delete the job when the user kills the deferred task (always while it is queued, so it
        does not start later unwatched); harmless if it is already gone."""
        if not (self.delete_on_kill or self._queued):
            return
        ref = JobRef(self.name, self.namespace, self.kind, self.uid)
        if not self.owner_labels:  # deferred by a task that names no owner: the job by name
            deleted = await self.hook.a_delete_job(self.name, self.namespace, JobKind(self.kind))
            released = Release.DELETE if deleted else Release.GONE
        else:
            released = await self.hook.a_release_job(ref, self.owner_labels, self.try_number)
        self.log.info("%s", describe_release(released, ref, "task killed"))
