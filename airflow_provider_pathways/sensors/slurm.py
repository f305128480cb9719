"""Sensor that waits until the Pathways service on Slurm has written a fresh ``cluster.env``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    BaseSensorOperator,
    PokeReturnValue,
    conf,
)

from airflow_provider_pathways.airflow_features import deferred_by, resumed_by_an_earlier_try
from airflow_provider_pathways.failures import FailureClass, PathwaysJobFailed, apply_retry_policy
from airflow_provider_pathways.slurm.end_states import JobOutcome, job_outcome
from airflow_provider_pathways.slurm.job import SlurmJob
from airflow_provider_pathways.slurm.service import (
    DEFAULT_CLUSTER_ENV_PATH,
    DEFAULT_PROXY_KEYS,
    DEFAULT_SERVICE_JOB_KEY,
    DEFAULT_WORKER_ARRAY_KEY,
    DEFAULT_WORKER_JOB_NAME,
    ServiceProbe,
    check_pathways_service,
    optional_count,
)

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

    from airflow_provider_pathways.hooks.slurm import SlurmHook


class PathwaysClusterEnvSensor(BaseSensorOperator):
    """
    Wait until the Pathways service job has written ``cluster.env`` with the proxy address.

    Ready when the file exists, was written after the service job started (a file left by an
    earlier run never counts; nor does one naming another service job), holds the proxy address
    (``grpc://host:port`` or ``host:port``), and, with ``min_slices``, at least that many worker
    array tasks are RUNNING. Fails at once, without a retry whatever the task's ``retries``, naming
    the job's state and reason, if the service job ended. Returns ``{"proxy_address", "values",
    "running_slices", "worker_array_job_id"}`` and pushes ``proxy_address`` to XCom. The file is
    parsed, never executed.

    :param service_job_id: the service job's id (templated, e.g. from the service operator).
    :param slurm_conn_id: a ``pathways_slurm`` connection.
    :param cluster_env_path: path of ``cluster.env`` on the cluster (``~`` is the cluster user's home).
    :param proxy_key: key (or keys, first present wins) holding the proxy address.
    :param min_slices: also require this many RUNNING worker array tasks.
    :param worker_array_job_id: the worker array's job id; default: read from ``cluster.env``, else
        the array job named ``worker_job_name`` that the service job submitted while no other job
        of the Slurm user that may be a service job ran (any name; docs/sensors/cluster_env.rst).
    :param worker_job_name: the worker array's job name (default ``run_worker_slice.sh``: sbatch
        names a job after its script file).
    :param cluster_env_per_job: ``cluster_env_path`` is this service job's alone (its script was
        given the path, e.g. the service operator's ``cluster_env_path`` XCom): a file there that
        names no service job is not checked against other service jobs.
    :param deferrable: wait in the triggerer.
    """

    template_fields: Sequence[str] = (
        "service_job_id",
        "cluster_env_path",
        "min_slices",
        "worker_array_job_id",
        "slurm_conn_id",
    )
    ui_color = "#e6f4ea"

    def __init__(
        self,
        *,
        service_job_id: int | str,
        slurm_conn_id: str = "pathways_slurm_default",
        cluster_env_path: str = DEFAULT_CLUSTER_ENV_PATH,
        proxy_key: str | Sequence[str] | None = None,
        min_slices: int | str | None = None,
        worker_array_job_id: int | str | None = None,
        worker_array_key: str = DEFAULT_WORKER_ARRAY_KEY,
        service_job_key: str = DEFAULT_SERVICE_JOB_KEY,
        worker_job_name: str = DEFAULT_WORKER_JOB_NAME,
        cluster_env_per_job: bool = False,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        apply_retry_policy(kwargs)
        super().__init__(**kwargs)
        self.service_job_id = service_job_id
        self.slurm_conn_id = slurm_conn_id
        self.cluster_env_path = cluster_env_path
        self.proxy_keys = [proxy_key] if isinstance(proxy_key, str) else list(proxy_key or DEFAULT_PROXY_KEYS)
        self.min_slices = min_slices
        self.worker_array_job_id = worker_array_job_id
        self.worker_array_key = worker_array_key
        self.service_job_key = service_job_key
        self.worker_job_name = worker_job_name
        self.cluster_env_per_job = cluster_env_per_job
        self.deferrable = deferrable

    @cached_property
    def hook(self) -> SlurmHook:
        from airflow_provider_pathways.hooks.slurm import SlurmHook

        return SlurmHook(slurm_conn_id=self.slurm_conn_id)

    def probe(self) -> ServiceProbe:
        """Where the service reports and what ready asks for (templated values checked)."""
        try:
            return ServiceProbe.of(self)
        except ValueError as err:
            raise AirflowFailException(str(err)) from None

    def _job_id(self) -> int:
        try:
            job_id = optional_count("service_job_id", self.service_job_id)
        except ValueError as err:
            raise AirflowFailException(str(err)) from None
        if job_id is None:
            raise AirflowFailException("service_job_id: empty; pass the Pathways service job's id")
        return job_id

    def _fail_ended(self, job: dict[str, Any] | None) -> NoReturn:
        """Fail, not to be retried: a retry of the sensor would only watch the same ended job."""
        if job is None:
            raise PathwaysJobFailed.for_class(
                FailureClass.INFRASTRUCTURE,
                f"the Pathways service job {self.service_job_id} is no longer known to the cluster",
                job=str(self.service_job_id),
                retry=False,
            )
        ended = SlurmJob.from_dict(job)
        outcome, failure, message = job_outcome(ended)
        if outcome is JobOutcome.SUCCEEDED:
            failure = FailureClass.INFRASTRUCTURE  # a service that ended cannot serve a workload
        reason = f" ({ended.reason})" if ended.reason else ""
        raise PathwaysJobFailed.for_class(
            failure or FailureClass.UNKNOWN,
            f"the Pathways service job {ended.job_id} ended before it was ready: {ended.state}{reason}; "
            f"{message}",
            job=str(ended.job_id),
            exit_code=ended.exit_code,
            retry=False,
        )

    def _ready(self, context: Context, readiness: dict[str, Any]) -> dict[str, Any]:
        context["ti"].xcom_push(key="proxy_address", value=readiness["proxy_address"])
        self.log.info("Pathways service is ready: %s (%s)", readiness["proxy_address"], readiness["reason"])
        return {
            "proxy_address": readiness["proxy_address"],
            "values": readiness["values"],
            "running_slices": readiness["running_slices"],
            "worker_array_job_id": readiness["worker_array_job_id"],
        }

    def poke(self, context: Context) -> PokeReturnValue:
        job_id, probe = self._job_id(), self.probe()
        check = self.hook.run_on_private_loop(lambda: check_pathways_service(self.hook, job_id, probe))
        if check.service_ended:
            self._fail_ended(check.job.to_dict() if check.job else None)
        if not check.readiness.ready:
            self.log.info("Pathways service %s: %s", job_id, check.readiness.reason)
            return PokeReturnValue(is_done=False)
        return PokeReturnValue(is_done=True, xcom_value=self._ready(context, check.readiness.to_dict()))

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from airflow_provider_pathways.triggers.slurm import PathwaysClusterEnvTrigger

        timeout = self.timeout.total_seconds() if isinstance(self.timeout, timedelta) else float(self.timeout)
        self.defer(
            trigger=PathwaysClusterEnvTrigger(
                service_job_id=self._job_id(),
                slurm_conn_id=self.slurm_conn_id,
                poll_interval=float(self.poke_interval.total_seconds())
                if isinstance(self.poke_interval, timedelta)
                else float(self.poke_interval),
                deadline=time.time() + timeout,
                **self.probe().to_dict(),
            ),
            method_name="execute_complete",
            kwargs=deferred_by(context),
            timeout=timedelta(seconds=timeout),
        )
        return None

    def execute_complete(self, context: Context, event: dict[str, Any], **newer: Any) -> dict[str, Any]:
        """Resume after the trigger fired."""
        if resumed_by_an_earlier_try(context, newer, self.log):
            return self.execute(context)  # type: ignore[no-any-return]
        status = event.get("status")
        if status == "service_ended":
            self._fail_ended(event.get("job"))
        if status == "timeout":
            raise AirflowSensorTimeout(f"the Pathways service {self.service_job_id} was not ready in time")
        if status != "ready":
            raise AirflowException(event.get("message") or f"unexpected trigger event {event!r}")
        return self._ready(context, event["readiness"])
