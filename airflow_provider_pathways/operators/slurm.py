"""Operators for Pathways on Slurm: the service job, workload jobs, and teardown."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, ResumableJobMixin, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_pathways.cluster_env import (
    DEFAULT_CLUSTER_ENV_PATH,
    DEFAULT_PROXY_KEYS,
    DEFAULT_SERVICE_JOB_KEY,
    DEFAULT_WORKER_ARRAY_KEY,
    parse_cluster_env,
    worker_array_id,
)
from airflow_provider_pathways.failures import FailureClass, PathwaysJobFailed, PathwaysSpecRejected
from airflow_provider_pathways.retry import PathwaysRetryPolicy
from airflow_provider_pathways.spec.k8s import bucket_name_error

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context
    from pydantic import JsonValue

    from airflow_provider_pathways.hooks.slurm import SlurmHook
    from airflow_provider_pathways.slurm_job import SlurmJob

SLICE_SHAPE = re.compile(r"^[1-9][0-9]*x[1-9][0-9]*(x[1-9][0-9]*)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ACTIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING"}
)


def _environment_problems(environment: Mapping[str, Any]) -> list[str]:
    problems = []
    for key, value in environment.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            problems.append(f"environment: {key!r} is not a valid variable name (letters, digits, _)")
        if not isinstance(value, str):
            problems.append(f"environment[{key!r}]: must be a string, got {type(value).__name__}")
    return problems


def _script_problems(script: str | None, script_path: str | None) -> list[str]:
    if bool(script) == bool(script_path):
        return ["script / script_path: give exactly one (script text to upload, or a path on the cluster)"]
    return []


class _SlurmJobMixin(ResumableJobMixin, BaseOperator):
    """Submission, reattachment (``task_state_store``) and cancellation shared by the Slurm operators."""

    external_id_key = "slurm_job_id"

    def __init__(
        self,
        *,
        slurm_conn_id: str = "pathways_slurm_default",
        script: str | None = None,
        script_path: str | None = None,
        environment: Mapping[str, str] | None = None,
        job_name: str | None = None,
        partition: str | None = None,
        account: str | None = None,
        qos: str | None = None,
        time_limit: str | int | None = None,
        working_directory: str | None = None,
        output_path: str | None = None,
        sbatch_options: Mapping[str, str] | None = None,
        cancel_on_kill: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 10.0,
        wait_timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("retry_policy", PathwaysRetryPolicy())
        super().__init__(**kwargs)
        if poll_interval <= 0:
            raise ValueError("poll_interval: must be > 0 seconds")
        self.slurm_conn_id = slurm_conn_id
        self.script = script
        self.script_path = script_path
        self.environment = dict(environment or {})
        self.job_name = job_name
        self.partition = partition
        self.account = account
        self.qos = qos
        self.time_limit = time_limit
        self.working_directory = working_directory
        self.output_path = output_path
        self.sbatch_options = dict(sbatch_options or {})
        self.cancel_on_kill = cancel_on_kill
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.wait_timeout = wait_timeout
        self._job_id: int | None = None

    @cached_property
    def hook(self) -> SlurmHook:
        from airflow_provider_pathways.hooks.slurm import SlurmHook

        return SlurmHook(slurm_conn_id=self.slurm_conn_id)

    def submission_environment(self) -> dict[str, str]:
        """Environment given to the job."""
        return dict(self.environment)

    def input_problems(self) -> list[str]:
        """Problems with the operator's arguments; checked before anything is submitted."""
        return _script_problems(self.script, self.script_path) + _environment_problems(self.environment)

    def execute(self, context: Context) -> Any:
        problems = self.input_problems()
        if problems:
            raise PathwaysSpecRejected("nothing was submitted:\n" + "\n".join(f"  {p}" for p in problems))
        return self.execute_resumable(context)

    def submit_job(self, context: Context) -> JsonValue:
        try:
            job_id = self.hook.submit_job(
                script=self.script,
                script_path=self.script_path,
                job_name=self.job_name or f"{context['ti'].dag_id}.{context['ti'].task_id}",
                partition=self.partition,
                account=self.account,
                qos=self.qos,
                time_limit=self.time_limit,
                environment=self.submission_environment(),
                working_directory=self.working_directory,
                output=self.output_path,
                extra_options=self.sbatch_options,
            )
        except (FileNotFoundError, ValueError) as err:
            raise PathwaysSpecRejected(f"nothing was submitted: {err}") from err
        self._job_id = job_id
        self.log.info("Submitted Slurm job %s", job_id)
        context["ti"].xcom_push(key="job_id", value=job_id)
        return job_id

    def get_job_status(self, external_id: JsonValue, context: Context) -> str:
        job = self.hook.get_job(int(external_id))  # type: ignore[arg-type]
        if job is not None:
            self._job_id = job.job_id
        return job.state if job is not None else "UNKNOWN"

    def is_job_active(self, status: str) -> bool:
        return status in _ACTIVE_STATES

    def is_job_succeeded(self, status: str) -> bool:
        return status == "COMPLETED"

    def _deadline(self) -> float | None:
        return time.time() + self.wait_timeout if self.wait_timeout else None

    def _cancel(self, reason: str) -> None:
        if self._job_id is None:
            return
        cancelled = self.hook.cancel_job(self._job_id)
        self.log.info(
            "Slurm job %s %s (%s)", self._job_id, "cancelled" if cancelled else "had already ended", reason
        )

    def on_kill(self) -> None:
        """Cancel the job when the running task is killed; harmless if it already ended."""
        if self.cancel_on_kill:
            self._cancel("task killed")


class PathwaysSlurmServiceOperator(_SlurmJobMixin):
    """
    Submit the Pathways service job (``start_pathways.sh``) and optionally wait until it is ready.

    The script gets ``SLICE_SHAPE``, ``MIN_SLICES``, ``MAX_SLICES`` and ``GCS_BUCKET`` (validated
    before submission) plus ``environment``. Ready means: ``cluster.env`` was written after the
    service job started and holds the proxy address, and (unless ``check_slices=False``) at least
    ``min_slices`` worker array tasks are RUNNING.

    :param slice_shape: TPU slice topology, e.g. ``2x4``.
    :param min_slices: slices the workload needs (1 <= min_slices <= max_slices).
    :param max_slices: slices the service asks for.
    :param gcs_bucket: bucket for scratch and the compilation cache (name only, no ``gs://``).
    :param script_path: the service script on the cluster; or ``script``: its text, uploaded.
    :param wait_for_ready: wait for readiness before succeeding (deferrable).
    :param cluster_env_path: where the service writes ``cluster.env``.
    :param proxy_key: the key holding the proxy address (default: the first of
        ``PATHWAYS_PROXY_ADDRESS``, ``JAX_BACKEND_TARGET``, ``PATHWAYS_PROXY``).
    :param check_slices: also count RUNNING worker array tasks.
    :param worker_array_key: the ``cluster.env`` key holding the worker array job id.
    :param cancel_on_kill: cancel the service job when the task is killed.
    """

    template_fields: Sequence[str] = (
        "slice_shape",
        "min_slices",
        "max_slices",
        "gcs_bucket",
        "script",
        "script_path",
        "environment",
        "job_name",
        "partition",
        "account",
        "qos",
        "time_limit",
        "cluster_env_path",
        "slurm_conn_id",
    )
    ui_color = "#fff4e5"

    def __init__(
        self,
        *,
        slice_shape: str,
        min_slices: int | str,
        max_slices: int | str,
        gcs_bucket: str,
        wait_for_ready: bool = True,
        cluster_env_path: str = DEFAULT_CLUSTER_ENV_PATH,
        proxy_key: str | Sequence[str] | None = None,
        check_slices: bool = True,
        worker_array_key: str = DEFAULT_WORKER_ARRAY_KEY,
        service_job_key: str = DEFAULT_SERVICE_JOB_KEY,
        poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(poll_interval=poll_interval, **kwargs)
        self.slice_shape = slice_shape
        self.min_slices = min_slices
        self.max_slices = max_slices
        self.gcs_bucket = gcs_bucket
        self.wait_for_ready = wait_for_ready
        self.cluster_env_path = cluster_env_path
        self.proxy_keys = [proxy_key] if isinstance(proxy_key, str) else list(proxy_key or DEFAULT_PROXY_KEYS)
        self.check_slices = check_slices
        self.worker_array_key = worker_array_key
        self.service_job_key = service_job_key
        self._readiness: dict[str, Any] | None = None

    def input_problems(self) -> list[str]:
        problems = super().input_problems()
        if not isinstance(self.slice_shape, str) or not SLICE_SHAPE.match(self.slice_shape):
            problems.append(f"slice_shape: {self.slice_shape!r} is not a topology like 2x4 or 2x2x2")
        slices: list[int] = []
        for field in ("min_slices", "max_slices"):
            value = getattr(self, field)
            try:
                number = int(value)
            except (TypeError, ValueError):
                problems.append(f"{field}: {value!r} is not an integer")
                continue
            if number < 1:
                problems.append(f"{field}: {number} must be >= 1")
            slices.append(number)
        if len(slices) == 2 and slices[0] > slices[1]:
            problems.append(
                f"min_slices: {slices[0]} is more than max_slices ({slices[1]}); lower min_slices"
            )
        bucket = str(self.gcs_bucket or "")
        if bucket.startswith("gs://"):
            problems.append(f"gcs_bucket: {bucket!r} must be a bucket name without gs://")
        elif error := bucket_name_error(bucket):
            problems.append(f"gcs_bucket: {bucket!r} {error}")
        for key in ("SLICE_SHAPE", "MIN_SLICES", "MAX_SLICES", "GCS_BUCKET"):
            if key in self.environment:
                problems.append(f"environment[{key!r}]: set it with the {key.lower()} argument instead")
        return problems

    def is_job_succeeded(self, status: str) -> bool:
        return False  # a service job that ended cannot serve a workload: submit a new one

    def submission_environment(self) -> dict[str, str]:
        return {
            **self.environment,
            "SLICE_SHAPE": str(self.slice_shape),
            "MIN_SLICES": str(int(self.min_slices)),
            "MAX_SLICES": str(int(self.max_slices)),
            "GCS_BUCKET": str(self.gcs_bucket),
        }

    def _trigger_kwargs(self) -> dict[str, Any]:
        return {
            "slurm_conn_id": self.slurm_conn_id,
            "cluster_env_path": self.cluster_env_path,
            "proxy_keys": self.proxy_keys,
            "min_slices": int(self.min_slices) if self.check_slices else None,
            "worker_array_key": self.worker_array_key,
            "service_job_key": self.service_job_key,
        }

    def poll_until_complete(self, external_id: JsonValue, context: Context) -> None:
        self._job_id = int(external_id)  # type: ignore[arg-type]
        context["ti"].xcom_push(key="job_id", value=self._job_id)
        if not self.wait_for_ready:
            return
        if self.deferrable:
            from airflow_provider_pathways.triggers.slurm import PathwaysClusterEnvTrigger

            self.defer(
                trigger=PathwaysClusterEnvTrigger(
                    service_job_id=self._job_id,
                    poll_interval=self.poll_interval,
                    deadline=self._deadline(),
                    **self._trigger_kwargs(),
                ),
                method_name="execute_complete",
            )
        self._readiness = self._wait_ready(self._job_id)

    def _wait_ready(self, job_id: int) -> dict[str, Any]:
        from airflow_provider_pathways.triggers.slurm import check_pathways_service

        kwargs = self._trigger_kwargs()
        kwargs.pop("slurm_conn_id")
        deadline = self._deadline()

        async def look() -> Any:
            try:
                return await check_pathways_service(self.hook, job_id, **kwargs)
            finally:
                await self.hook.a_close()

        last = ""
        while True:
            check = asyncio.run(look())
            if check.service_ended:
                self._fail_service_ended(check.job.to_dict() if check.job else None)
            if check.readiness.reason != last:
                self.log.info("Pathways service %s: %s", job_id, check.readiness.reason)
                last = check.readiness.reason
            if check.readiness.ready:
                return check.readiness.to_dict()
            if deadline is not None and time.time() > deadline:
                raise AirflowException(
                    f"the Pathways service {job_id} was not ready within {self.wait_timeout}s"
                )
            time.sleep(self.poll_interval)

    def _fail_service_ended(self, job: dict[str, Any] | None) -> None:
        from airflow_provider_pathways.slurm_job import SlurmJob, job_outcome

        if job is None:
            raise AirflowFailException(
                f"the Pathways service job {self._job_id} is gone (Slurm no longer knows it)"
            )
        ended = SlurmJob.from_dict(job)
        _outcome, failure, message = job_outcome(ended)
        raise PathwaysJobFailed.for_class(
            failure or FailureClass.UNKNOWN,
            f"the Pathways service job {ended.job_id} ended before it was ready: {ended.state}"
            f"{f' ({ended.reason})' if ended.reason else ''}; {message}",
            job=str(ended.job_id),
            exit_code=ended.exit_code,
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the readiness trigger fired."""
        self._job_id = int(context["ti"].xcom_pull(task_ids=self.task_id, key="job_id"))
        if event.get("status") == "service_ended":
            self._fail_service_ended(event.get("job"))
        if event.get("status") == "timeout":
            if self.cancel_on_kill:
                self._cancel("readiness timed out")
            raise AirflowException(
                f"the Pathways service {self._job_id} was not ready within {self.wait_timeout}s"
            )
        if event.get("status") != "ready":
            raise AirflowException(event.get("message") or f"unexpected trigger event {event!r}")
        self._readiness = event["readiness"]
        return self.get_job_result(self._job_id, context)

    def get_job_result(self, external_id: JsonValue, context: Context) -> dict[str, Any]:
        job_id = int(external_id)  # type: ignore[arg-type]
        readiness = self._readiness or {}
        if readiness:
            self.log.info("Pathways service %s is ready: proxy %s", job_id, readiness.get("proxy_address"))
            context["ti"].xcom_push(key="proxy_address", value=readiness.get("proxy_address"))
            context["ti"].xcom_push(key="worker_array_job_id", value=readiness.get("worker_array_job_id"))
        return {
            "job_id": job_id,
            "proxy_address": readiness.get("proxy_address"),
            "worker_array_job_id": readiness.get("worker_array_job_id"),
            "cluster_env": readiness.get("values"),
            "running_slices": readiness.get("running_slices"),
        }


class SlurmJobOperator(_SlurmJobMixin):
    """
    Submit a batch script (e.g. the Pathways workload) and follow it to its end.

    ``COMPLETED`` succeeds; ``FAILED``/``NonZeroExitCode`` and ``OUT_OF_MEMORY`` fail without
    retry (exit code and output tail in the error); ``PREEMPTED``, ``NODE_FAIL`` and
    ``BOOT_FAIL`` raise :class:`~airflow_provider_pathways.failures.PathwaysPreempted`, which
    ``PathwaysRetryPolicy`` retries with backoff; ``TIMEOUT`` and ``CANCELLED`` fail with their
    reason. A requeued job is followed through its rerun (Slurm keeps its id).

    :param script_path: the script on the cluster; or ``script``: its text, uploaded.
    :param environment: extra environment variables (arrive byte-for-byte).
    :param output_path: ``--output`` path; default Slurm's ``slurm-%j.out`` in the working directory.
    :param log_tail_lines: lines of the job's output copied into the task log at the end.
    """

    template_fields: Sequence[str] = (
        "script",
        "script_path",
        "environment",
        "job_name",
        "partition",
        "account",
        "qos",
        "time_limit",
        "working_directory",
        "output_path",
        "slurm_conn_id",
    )
    ui_color = "#fff4e5"

    def __init__(self, *, log_tail_lines: int = 40, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.log_tail_lines = log_tail_lines
        self._final: SlurmJob | None = None

    def poll_until_complete(self, external_id: JsonValue, context: Context) -> None:
        self._job_id = int(external_id)  # type: ignore[arg-type]
        context["ti"].xcom_push(key="job_id", value=self._job_id)
        if self.deferrable:
            from airflow_provider_pathways.triggers.slurm import SlurmJobTrigger

            self.defer(
                trigger=SlurmJobTrigger(
                    job_id=self._job_id,
                    slurm_conn_id=self.slurm_conn_id,
                    poll_interval=self.poll_interval,
                    deadline=self._deadline(),
                    cancel_on_kill=self.cancel_on_kill,
                ),
                method_name="execute_complete",
            )
        deadline = self._deadline()
        last = ""
        while True:
            job = self.hook.get_job(self._job_id)
            if job is None or job.terminal:
                self._final = job
                return
            state = f"{job.state}{f' ({job.reason})' if job.reason else ''}, restarts {job.restarts}"
            if state != last:
                self.log.info("Slurm job %s: %s", job.job_id, state)
                last = state
            if deadline is not None and time.time() > deadline:
                self._timeout()
            time.sleep(self.poll_interval)

    def _timeout(self) -> None:
        if self.cancel_on_kill:
            self._cancel("wait timed out")
        raise AirflowException(f"Slurm job {self._job_id} did not end within {self.wait_timeout}s")

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the job trigger fired."""
        self._job_id = int(context["ti"].xcom_pull(task_ids=self.task_id, key="job_id"))
        if event.get("status") == "timeout":
            self._timeout()
        if event.get("status") != "done":
            raise AirflowException(event.get("message") or f"unexpected trigger event {event!r}")
        from airflow_provider_pathways.slurm_job import SlurmJob

        self._final = SlurmJob.from_dict(event["job"]) if event.get("job") else None
        return self.get_job_result(self._job_id, context)

    def _output_tail(self, job: SlurmJob) -> str:
        if not self.log_tail_lines or not job.std_out:
            return ""
        try:
            text = self.hook.read_file(job.std_out, tail_bytes=64 * 1024) or ""
        except Exception as err:
            self.log.warning("Could not read %s: %s", job.std_out, type(err).__name__)
            return ""
        return "\n".join(text.rstrip().splitlines()[-self.log_tail_lines :])

    def get_job_result(self, external_id: JsonValue, context: Context) -> dict[str, Any]:
        from airflow_provider_pathways.slurm_job import JobOutcome, job_outcome

        job_id = int(external_id)  # type: ignore[arg-type]
        job = self._final or self.hook.get_job(job_id)
        if job is None:
            raise AirflowException(f"Slurm job {job_id} is gone; its end state is unknown")
        outcome, failure, message = job_outcome(job)
        tail = self._output_tail(job)
        if tail:
            self.log.info("Last lines of the output of Slurm job %s (%s):", job_id, job.std_out)
            for line in tail.splitlines():
                self.log.info("  | %s", line)
        result = {"job_id": job_id, "state": job.state, "exit_code": job.exit_code, "reason": job.reason}
        context["ti"].xcom_push(key="job", value=job.to_dict())
        if outcome is JobOutcome.SUCCEEDED:
            return result
        detail = f"\n{tail}" if tail else ""
        raise PathwaysJobFailed.for_class(
            failure or FailureClass.UNKNOWN,
            f"Slurm job {job_id} {message}{detail}",
            job=str(job_id),
            exit_code=job.exit_code,
        )


class CancelSlurmJobOperator(BaseOperator):
    """
    Cancel Slurm jobs (the Pathways service and its worker array); fine if they already ended.

    Meant as a teardown task (``.as_teardown()``). The worker array is found from
    ``worker_array_job_id`` or, with ``cluster_env_path``, from ``cluster.env`` when that file
    belongs to the service job.

    :param job_ids: one id or several (templated; e.g. the service operator's XCom).
    :param worker_array_job_id: the service's worker array, if known.
    :param cluster_env_path: read the worker array id from this ``cluster.env`` (None: don't).
    """

    template_fields: Sequence[str] = ("job_ids", "worker_array_job_id", "cluster_env_path", "slurm_conn_id")
    ui_color = "#fce8e6"

    def __init__(
        self,
        *,
        job_ids: int | str | Sequence[int | str],
        slurm_conn_id: str = "pathways_slurm_default",
        worker_array_job_id: int | str | None = None,
        cluster_env_path: str | None = DEFAULT_CLUSTER_ENV_PATH,
        worker_array_key: str = DEFAULT_WORKER_ARRAY_KEY,
        service_job_key: str = DEFAULT_SERVICE_JOB_KEY,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_ids = job_ids
        self.slurm_conn_id = slurm_conn_id
        self.worker_array_job_id = worker_array_job_id
        self.cluster_env_path = cluster_env_path
        self.worker_array_key = worker_array_key
        self.service_job_key = service_job_key

    @cached_property
    def hook(self) -> SlurmHook:
        from airflow_provider_pathways.hooks.slurm import SlurmHook

        return SlurmHook(slurm_conn_id=self.slurm_conn_id)

    def _ids(self) -> list[int]:
        raw = self.job_ids if isinstance(self.job_ids, (list, tuple)) else [self.job_ids]
        ids = []
        for value in raw:
            text = str(value).strip()
            if text in ("", "None"):
                continue
            if not text.isdigit():
                raise AirflowFailException(f"job_ids: {value!r} is not a Slurm job id")
            ids.append(int(text))
        return ids

    def _worker_arrays(self, service_ids: list[int]) -> list[int]:
        if self.worker_array_job_id not in (None, "", "None"):
            return [int(str(self.worker_array_job_id))]
        if not self.cluster_env_path:
            return []
        text = self.hook.read_file(self.cluster_env_path)
        if not text:
            return []
        values = parse_cluster_env(text)
        if values.get(self.service_job_key, "").strip() not in {str(i) for i in service_ids}:
            return []
        array = worker_array_id(values, self.worker_array_key)
        return [array] if array else []

    def execute(self, context: Context) -> dict[str, list[int]]:
        service_ids = self._ids()
        cancelled: list[int] = []
        ended: list[int] = []
        for job_id in service_ids + [a for a in self._worker_arrays(service_ids) if a not in service_ids]:
            (cancelled if self.hook.cancel_job(job_id) else ended).append(job_id)
        self.log.info("Cancelled Slurm jobs %s; already ended: %s", cancelled or "none", ended or "none")
        return {"cancelled": cancelled, "already_ended": ended}
