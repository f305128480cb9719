"""Sensor that waits until a Pathways job has its head and at least ``min_slices`` slices ready."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    BaseSensorOperator,
    PokeReturnValue,
    conf,
)

from airflow_provider_pathways.airflow_features import deferred_by, resumed_by_an_earlier_try
from airflow_provider_pathways.failures import (
    FailureClass,
    PathwaysJobFailed,
    apply_retry_policy,
    never_retried,
)
from airflow_provider_pathways.gke.objects import (
    HEAD_REPLICATED_JOB,
    WORKER_REPLICATED_JOB,
    JobKind,
    StatusOptions,
    proxy_address,
)
from airflow_provider_pathways.gke.status import (
    PathwaysJobStatus,
    Phase,
    WaitUntil,
    judge_status,
    validate_wait_arguments,
)
from airflow_provider_pathways.transient import CONNECTION_TO_FIX, ConnectionToFix

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook


class PathwaysJobReadySensor(BaseSensorOperator):
    """
    Wait until the job's head is ready and at least ``min_slices`` worker slices are ready.

    Returns (and pushes to XCom) the proxy address ``grpc://<name>-pathways-head-0-0.<name>:29000``.
    Fails at once, without a retry whatever the task's ``retries``, when the job failed, was
    rejected or was deleted: only making the job again helps. A suspended job is waited for, since
    the queue resumes it.

    :param job_name: the job's name (templated).
    :param namespace: its namespace; default: the connection's, then ``default``.
    :param min_slices: slices needed; default: every slice of the job.
    :param kind: ``PathwaysJob`` or ``JobSet``.
    :param kubernetes_conn_id: cncf-kubernetes connection.
    :param deferrable: wait in the triggerer (a watch, not a poll).
    :param worker_replicated_job: name of the workers' replicated job in the JobSet.
    :param head_replicated_job: name of the head's replicated job in the JobSet.
    """

    template_fields: Sequence[str] = ("job_name", "namespace", "min_slices", "kubernetes_conn_id")
    ui_color = "#e6f4ea"

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str | None = None,
        min_slices: int | None = None,
        kind: str = JobKind.PATHWAYS_JOB.value,
        kubernetes_conn_id: str | None = "kubernetes_default",
        cluster_context: str | None = None,
        config_file: str | None = None,
        in_cluster: bool | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        worker_replicated_job: str = WORKER_REPLICATED_JOB,
        head_replicated_job: str = HEAD_REPLICATED_JOB,
        **kwargs: Any,
    ) -> None:
        apply_retry_policy(kwargs)
        super().__init__(**kwargs)
        validate_wait_arguments(name=job_name or "x", wait_until="ready", min_slices=None, kind=kind)
        self.job_name = job_name
        self.namespace = namespace
        self.min_slices = min_slices
        self.kind = kind
        self.kubernetes_conn_id = kubernetes_conn_id
        self.cluster_context = cluster_context
        self.config_file = config_file
        self.in_cluster = in_cluster
        self.deferrable = deferrable
        self.worker_replicated_job = worker_replicated_job
        self.head_replicated_job = head_replicated_job

    @cached_property
    def hook(self) -> PathwaysJobHook:
        from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

        return PathwaysJobHook.for_task(self)

    @property
    def status_options(self) -> StatusOptions:
        return StatusOptions.for_task(self)

    def _min_slices(self) -> int | None:
        if self.min_slices in (None, ""):
            return None
        value = int(self.min_slices)
        if value < 1:
            raise AirflowFailException(f"min_slices: {value} must be >= 1")
        return value

    def _check(self, status: PathwaysJobStatus) -> str | None:
        """The proxy address when ready; raises, not to be retried, when the job can never become
        ready (a retry of the sensor would only watch the same dead job)."""
        need = self._min_slices() or status.slices_total
        if status.terminal:
            if status.phase is Phase.SUCCEEDED:
                raise AirflowFailException(f"{status.namespace}/{status.name} finished before it was ready")
            failure = judge_status(status).failure or FailureClass.UNKNOWN
            raise PathwaysJobFailed.for_class(
                failure,
                f"{status.namespace}/{status.name} will never be ready ({failure.value}): {status.message}; "
                "only a new job can become ready: clear the task that made it together with this sensor",
                job=status.name,
                exit_code=status.exit_code,
                retry=False,
            )
        if status.slices_total and need > status.slices_total:
            raise AirflowFailException(
                f"min_slices: {need} exceeds the job's {status.slices_total} slices; lower min_slices"
            )
        if status.ready_for(need):
            return proxy_address(status.name, self.head_replicated_job)
        self.log.info("%s", status.progress(need))
        return None

    def _look(self) -> tuple[str, str | None]:
        """The job's namespace, and its proxy address once it is ready. A connection that must be
        fixed (:class:`~airflow_provider_pathways.transient.ConnectionToFix`, e.g. credentials that
        get no new token) fails the sensor for good: no retry gets past it."""
        try:
            namespace = self.hook.resolve_namespace(self.namespace)
            return namespace, self._check(self.hook.get_status(self.job_name, namespace, self.status_options))
        except ConnectionToFix as err:
            raise never_retried(type(err), str(err)) from err

    def poke(self, context: Context) -> PokeReturnValue:
        address = self._look()[1]
        return PokeReturnValue(is_done=address is not None, xcom_value=address)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        namespace, address = self._look()
        if address is not None:
            return address
        from airflow_provider_pathways.triggers.pathways_job import PathwaysJobTrigger

        self.defer(
            trigger=PathwaysJobTrigger.for_task(
                self,
                name=self.job_name,
                namespace=namespace,
                wait_until=WaitUntil.READY.value,
                min_slices=self._min_slices(),
                fail_on_suspend=False,
                delete_on_kill=False,
                deadline=time.time() + self._timeout_seconds(),
            ),
            method_name="execute_complete",
            kwargs=deferred_by(context),
            timeout=timedelta(seconds=self._timeout_seconds()),
        )
        return None

    def _timeout_seconds(self) -> float:
        timeout = self.timeout
        return timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)

    def execute_complete(self, context: Context, event: dict[str, Any], **newer: Any) -> str:
        """Resume after the trigger fired."""
        if resumed_by_an_earlier_try(context, newer, self.log):
            return self.execute(context)  # type: ignore[no-any-return]
        if event.get("status") == "timeout":
            raise AirflowSensorTimeout(f"{self.job_name} was not ready within {self._timeout_seconds()}s")
        if event.get("status") == "error" and event.get(CONNECTION_TO_FIX):
            from airflow_provider_pathways.hooks.kubernetes_google import GkeConnectionError

            raise never_retried(GkeConnectionError, event.get("message") or f"{event!r}")
        if event.get("status") != "done":
            raise AirflowException(event.get("message") or f"unexpected trigger event {event!r}")
        address = self._check(PathwaysJobStatus.from_dict(event["job"]))
        if address is None:
            raise AirflowException(f"the trigger fired before {self.job_name} was ready: {event!r}")
        return address
