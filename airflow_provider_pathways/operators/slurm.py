"""Operators for Pathways on Slurm: the service job, workload jobs, and teardown."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException, BaseOperator

from airflow_provider_pathways.airflow_features import resumed_by_an_earlier_try
from airflow_provider_pathways.failures import FailureClass, PathwaysJobFailed, PathwaysSpecRejected
from airflow_provider_pathways.lineage import PathwaysRun
from airflow_provider_pathways.operators.reattaching import Deadline
from airflow_provider_pathways.operators.submitted import placeholder_context
from airflow_provider_pathways.reattach_rules import JobJudgement, Verdict
from airflow_provider_pathways.slurm.end_states import (
    DEFAULT_HOLD_TIMEOUT,
    DEFAULT_MAX_REQUEUES,
    StuckJobWatch,
    slice_lost_during,
)
from airflow_provider_pathways.slurm.job import SERVICE_ROLE, SlurmJob
from airflow_provider_pathways.slurm.service import (
    DEFAULT_CLUSTER_ENV_PATH,
    DEFAULT_PROXY_KEYS,
    DEFAULT_SERVICE_JOB_KEY,
    DEFAULT_WORKER_ARRAY_KEY,
    DEFAULT_WORKER_JOB_NAME,
    Readiness,
    ServiceCheck,
    ServiceProbe,
    cancel_services,
    check_pathways_service,
    per_run_cluster_env_path,
)
from airflow_provider_pathways.slurm.submit import (
    array_size_problem,
    service_environment,
    service_problems,
    slice_shape_problem,
)
from airflow_provider_pathways.transient import describe_error

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context
    from airflow.triggers.base import BaseTrigger
    from pydantic import JsonValue

    from airflow_provider_pathways.hooks.slurm import SlurmHook
from airflow_provider_pathways.operators.slurm_base import SlurmJobBaseOperator

#: What a wait on a workload job saw at its end: the job (None once the cluster forgot it), why
#: its end is unknown, and why the wait ended before the job did (failure class and message).
Observation = tuple[SlurmJob | None, str, tuple[FailureClass, str] | None]


def cancel_service_with_workers(
    hook: SlurmHook, service: int, probe: ServiceProbe, log: Any, reason: str
) -> bool:
    """Cancel a Pathways service job and its worker array (:func:`cancel_services`: the service at
    once, the array right after), logging each; raises the first error. Whether the service job was
    active and is now cancelled."""
    log.info("Cancelling Slurm job %s and its worker array (%s)", service, reason)

    def lookup_failed(err: BaseException) -> None:
        log.warning("Could not find the worker array of Slurm job %s: %s", service, describe_error(err))

    results = hook.run_on_private_loop(lambda: cancel_services(hook, [service], probe, lookup_failed))
    for result in results:
        (log.warning if isinstance(result.ended, BaseException) else log.info)(
            "%s (%s)", result.describe(), reason
        )
    failures = [result.ended for result in results if isinstance(result.ended, BaseException)]
    if failures:
        raise failures[0]
    return bool(results[0].ended)


class PathwaysSlurmServiceOperator(SlurmJobBaseOperator):
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
    :param cluster_env_path: where the service writes ``cluster.env`` (default
        ``~/pathways/cluster.env``; with ``cluster_env_variable``, a file of this task instance's own).
    :param cluster_env_variable: the environment variable through which the script takes the path
        of ``cluster.env`` (None: it writes where it always does). The path, ``~`` expanded, is
        passed in it, so concurrent service jobs never share the file.
    :param proxy_key: the key holding the proxy address (default: the first of
        ``PATHWAYS_PROXY_ADDRESS``, ``JAX_BACKEND_TARGET``, ``PATHWAYS_PROXY``).
    :param check_slices: also count RUNNING worker array tasks.
    :param worker_array_key: the ``cluster.env`` key holding the worker array job id.
    :param worker_job_name: the worker array's job name, to find it when ``cluster.env`` does not
        name it (default ``run_worker_slice.sh``: sbatch names a job after its script file).
    :param cancel_on_kill: cancel the service job and its worker array when the task is killed
        or its wait times out (never an array another service job of the user may have submitted).
    :param requeue: whether Slurm may requeue the service job (``--requeue``/``--no-requeue``);
        default: the cluster's ``JobRequeue``.
    :param preemption_retries: retries for preemption and infrastructure failures when the DAG
        sets no ``retries``.
    :param outage_tolerance: seconds an outage of slurmrestd or sshd may last during the wait; a
        longer one raises :class:`~airflow_provider_pathways.failures.PathwaysWatchLost`, retried
        with the job kept, or on the last try with the job cancelled (``cancel_on_kill``).
    :param dry_run: check the arguments, log the request and push it to XCom
        (``submitted_request``, secrets masked), and succeed without reading the connection,
        submitting or waiting (``cluster_env_path`` keeps its ``~``; ``max_slices`` is not checked
        against the cluster's ``MaxArraySize``).
    """

    template_fields: Sequence[str] = (
        "slice_shape",
        "min_slices",
        "max_slices",
        "gcs_bucket",
        "cluster_env_path",
        *SlurmJobBaseOperator.template_fields,
    )
    waiting_for = "ready"
    job_role = SERVICE_ROLE

    def __init__(
        self,
        *,
        slice_shape: str,
        min_slices: int | str,
        max_slices: int | str,
        gcs_bucket: str,
        wait_for_ready: bool = True,
        cluster_env_path: str | None = None,
        cluster_env_variable: str | None = None,
        proxy_key: str | Sequence[str] | None = None,
        check_slices: bool = True,
        worker_array_key: str = DEFAULT_WORKER_ARRAY_KEY,
        service_job_key: str = DEFAULT_SERVICE_JOB_KEY,
        worker_job_name: str = DEFAULT_WORKER_JOB_NAME,
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
        self.cluster_env_variable = cluster_env_variable
        self.proxy_keys = [proxy_key] if isinstance(proxy_key, str) else list(proxy_key or DEFAULT_PROXY_KEYS)
        self.check_slices = check_slices
        self.worker_array_key = worker_array_key
        self.service_job_key = service_job_key
        self.worker_job_name = worker_job_name

    def _resolve_cluster_env_path(self, context: Context) -> None:
        if not self.cluster_env_path:  # per task instance when the script takes the path
            per_run = self.cluster_env_variable
            path = per_run_cluster_env_path(context["ti"]) if per_run else DEFAULT_CLUSTER_ENV_PATH
            self.cluster_env_path = path

    def execute(self, context: Context) -> Any:
        self._resolve_cluster_env_path(context)
        return super().execute(context)

    def input_problems(self) -> list[str]:
        problems = super().input_problems()
        try:
            environment = self.rendered_environment()
        except TypeError:  # named by the base's problems
            environment = {}
        return problems + service_problems(
            slice_shape=self.slice_shape,
            min_slices=self.min_slices,
            max_slices=self.max_slices,
            gcs_bucket=self.gcs_bucket,
            environment=environment,
        )

    def submit_job(self, context: Context) -> JsonValue:
        if problem := array_size_problem(self.max_slices, self.hook.max_array_size()):
            raise PathwaysSpecRejected(f"nothing was submitted: {problem}")
        return super().submit_job(context)

    def judgement(self, job: SlurmJob) -> JobJudgement:
        judgement = super().judgement(job)
        if judgement.verdict is Verdict.SUCCEEDED:  # a service that ended cannot serve a workload
            return JobJudgement.failed(FailureClass.INFRASTRUCTURE, f"{judgement.message}: the service ended")
        return judgement

    def submission_environment(self) -> dict[str, str]:
        environment = service_environment(
            self.rendered_environment(),
            slice_shape=self.slice_shape,
            min_slices=self.min_slices,
            max_slices=self.max_slices,
            gcs_bucket=self.gcs_bucket,
        )
        if self.cluster_env_variable:
            path = str(self.cluster_env_path)  # a dry run leaves "~" to the cluster: no connection
            environment[self.cluster_env_variable] = path if self.is_dry_run else self.hook.expand_path(path)
        return environment

    def dry_run(self) -> None:
        """Print the request as YAML (see the base class), ``cluster.env`` placed for a run with id
        ``dry_run``."""
        given, dry = self.cluster_env_path, self.is_dry_run
        try:
            self.is_dry_run = True
            self._resolve_cluster_env_path(placeholder_context(self))
            super().dry_run()
        finally:
            self.cluster_env_path, self.is_dry_run = given, dry

    def _cancel(self, reason: str) -> None:
        """Cancel the service job and its worker array (:func:`cancel_services`: the service at
        once, the array right after), on kill, timeout and replacement alike, so that a replacement
        never runs beside a second array; over the connection the wait used."""
        if self._job_id is None:
            return
        cancel_service_with_workers(self.hook, self._job_id, self.probe(), self.log, reason)

    def probe(self) -> ServiceProbe:
        """Where the service reports and what ready asks for."""
        return ServiceProbe.of(
            self,
            min_slices=self.min_slices if self.check_slices else None,
            cluster_env_per_job=bool(self.cluster_env_variable),
        )

    def follow_job(self, external_id: JsonValue, context: Context) -> Any:
        context["ti"].xcom_push(key="cluster_env_path", value=self.cluster_env_path)
        if not self.wait_for_ready:
            self._job_id = int(external_id)  # type: ignore[arg-type]
            context["ti"].xcom_push(key="job_id", value=self._job_id)
            return self.finish_job(
                context, self._job_id, ServiceCheck(None, Readiness(False, "not waited for"))
            )
        return super().follow_job(external_id, context)

    def trigger(self, deadline: Deadline) -> BaseTrigger:
        from airflow_provider_pathways.triggers.slurm import PathwaysClusterEnvTrigger

        assert self._job_id is not None
        return PathwaysClusterEnvTrigger(
            service_job_id=self._job_id,
            **self.trigger_arguments(deadline),
            **self.probe().to_dict(),
        )

    def look(self) -> ServiceCheck | None:
        assert self._job_id is not None
        job_id, probe = self._job_id, self.probe()
        check = self.hook.run_on_private_loop(lambda: check_pathways_service(self.hook, job_id, probe))
        if check.readiness.reason != getattr(self, "_last_reason", None):
            self.log.info("Pathways service %s: %s", job_id, check.readiness.reason)
            self._last_reason = check.readiness.reason
        return check if check.service_ended or check.readiness.ready else None

    def execute_complete(
        self, context: Context, event: dict[str, Any], job_id: int | None = None, **newer: Any
    ) -> dict[str, Any]:
        """Resume after the readiness trigger fired."""
        if resumed_by_an_earlier_try(context, newer, self.log):
            return self.execute(context)  # type: ignore[no-any-return]
        self._resolve_cluster_env_path(context)
        self.resume(context, event, job_id)
        if event.get("status") == "service_ended":
            job = SlurmJob.from_dict(event["job"]) if event.get("job") else None
            return self.finish_job(
                context, self._job_id, ServiceCheck(job, Readiness(False, "service ended"))
            )
        if event.get("status") != "ready":
            raise AirflowException(f"unexpected trigger event {event!r}")
        readiness = Readiness.from_dict(event["readiness"])
        job = SlurmJob.from_dict(event["job"]) if event.get("job") else None
        seen_at = float(event.get("seen_at") or time.time())
        return self.finish_job(context, self._job_id, ServiceCheck(job, readiness, seen_at))

    def finish_job(self, context: Context, external_id: JsonValue, observed: Any = None) -> dict[str, Any]:
        """The one judgement of the service job: ready (XComs), or ended before it was ready."""
        job_id = int(external_id)  # type: ignore[arg-type]
        self._job_id = job_id
        check: ServiceCheck | None = observed
        if check is None:  # reattached to a service job that ended
            self._fail_service_ended(context, self.get_job_or_loss(job_id)[0])
        readiness = check.readiness
        if self.wait_for_ready and not readiness.ready:  # the wait ended because the service did
            self._fail_service_ended(context, check.job)
        if readiness.ready:
            self._running_slices = readiness.running_slices
            if check.job is not None:
                self.report_job(
                    context, check.job, ready_at=check.seen_at, worker_array=readiness.worker_array_job_id
                )
            self.log.info("Pathways service %s is ready: proxy %s", job_id, readiness.proxy_address)
            context["ti"].xcom_push(key="proxy_address", value=readiness.proxy_address)
            context["ti"].xcom_push(key="worker_array_job_id", value=readiness.worker_array_job_id)
        self.leave_running(context)  # it serves on after the task: a clear then follows it, not restarts it
        return {
            "job_id": job_id,
            "proxy_address": readiness.proxy_address,
            "worker_array_job_id": readiness.worker_array_job_id,
            "cluster_env": dict(readiness.values) or None,
            "cluster_env_path": self.cluster_env_path,
            "running_slices": readiness.running_slices,
        }

    def lineage_run(self) -> PathwaysRun:
        return PathwaysRun(
            backend="slurm",
            topology=self.slice_shape,
            slices=self._running_slices,
            queue=self.partition,
            preemptions=self._preemptions,
        )

    def lineage_outputs(self) -> list[str | None]:
        return [f"gs://{self.gcs_bucket}" if self.gcs_bucket else None]

    def _fail_service_ended(self, context: Context, job: SlurmJob | None) -> NoReturn:
        self.forget_job(context)
        if job is None:
            raise PathwaysJobFailed.for_class(
                FailureClass.INFRASTRUCTURE,
                f"the Pathways service job {self._job_id} is no longer known to the cluster",
                job=str(self._job_id),
            )
        judgement = self.judgement(job)
        self.report_job(context, job, preempted=judgement.failure is FailureClass.PREEMPTED)
        raise PathwaysJobFailed.for_class(
            judgement.failure or FailureClass.UNKNOWN,
            f"the Pathways service job {job.job_id} ended before it was ready: {job.state}"
            f"{f' ({job.reason})' if job.reason else ''}; {judgement.message}",
            job=str(job.job_id),
            exit_code=job.exit_code,
        )


class SlurmJobOperator(SlurmJobBaseOperator):
    """
    Submit a batch script (e.g. the Pathways workload) and follow it to its end.

    How each end state ends the task is the table in ``docs/operators/slurm_job.rst`` (a test
    holds it to :func:`~airflow_provider_pathways.slurm.end_states.job_outcome`): ``COMPLETED``
    succeeds, a failing program fails without retry, ``PREEMPTED`` is retried as preemption,
    ``NODE_FAIL``/``BOOT_FAIL`` as an infrastructure failure. A requeued job is followed through
    its rerun (Slurm keeps its id). A job the cluster
    forgot before its end was seen (purged after ``MinJobAge`` on a cluster without accounting)
    has an unknown outcome: :class:`~airflow_provider_pathways.failures.PathwaysOutcomeUnknown`,
    never retried, so that the program does not run twice unless you say so.

    :param script_path: the script on the cluster; or ``script``: its text, uploaded.
    :param environment: extra environment variables (arrive byte-for-byte).
    :param output_path: ``--output`` path; default Slurm's ``slurm-%j.out`` in the working directory.
    :param requeue: ``False`` ends the job ``NODE_FAIL`` when its node fails instead of requeueing it
        (``--no-requeue``), ``True`` lets Slurm requeue it; default: the cluster's ``JobRequeue``.
    :param log_tail_lines: lines of the job's output copied into the task log at the end.
    :param preemption_retries: retries for preemption and infrastructure failures when the DAG
        sets no ``retries``.
    :param outage_tolerance: seconds an outage of slurmrestd or sshd may last during the wait; a
        longer one raises :class:`~airflow_provider_pathways.failures.PathwaysWatchLost`, retried
        with the job kept, or on the last try with the job cancelled (``cancel_on_kill``).
    :param resubmit_if_outcome_unknown: when the job's outcome is unknown, treat it as an
        infrastructure failure instead: the try is retried and a retry submits a fresh job, so the
        program may run twice. Only for programs that may safely run again.
    :param worker_array_job_id: the worker array of the Pathways service the workload talks to
        (its slices; templated, e.g. the service task's XCom ``worker_array_job_id``). A failure of
        the workload while one of its slices was lost (a worker array task preempted, failed with
        its node or requeued while the workload ran) is then a preemption, retried, as on GKE
        (:func:`~airflow_provider_pathways.slurm.end_states.slice_lost_during`). With
        ``slice_shape``, the try's TPU-hours are those of the slices while the workload ran.
    :param slice_shape: the service's ``SLICE_SHAPE`` (e.g. ``2x4``; templated): chips per slice,
        for the try's TPU-hours (XCom ``tpu_hours``, the ``tpu_hours`` metric, the timeline);
        without it (or without ``worker_array_job_id``) they are unknown.
    :param hold_timeout: seconds a job may stay held (``JobHeldUser``, ``JobHeldAdmin``,
        ``scontrol requeuehold``) before the wait ends (default one hour; ``None``: no bound). A job
        Slurm requeued held after its launch failed again and again (``launch_failed_requeued_held``)
        ends the wait at once. The job is then cancelled (``cancel_on_kill``) and the try fails as an
        infrastructure failure: its program never ran.
    :param max_requeues: requeues (preemption, node failures) after which the wait ends (default
        10; ``None``: no bound); the job is cancelled (``cancel_on_kill``) and the try fails as a
        preemption.
    :param dry_run: check the arguments, log the request and push it to XCom
        (``submitted_request``, secrets masked), and succeed without reading the connection,
        submitting or waiting (whether ``script_path`` exists is not checked).
    :param checkpoint_dir: the ``gs://`` location the program writes its checkpoints to (templated);
        only reported, as an OpenLineage output dataset.
    """

    template_fields: Sequence[str] = (
        *SlurmJobBaseOperator.template_fields,
        "worker_array_job_id",
        "slice_shape",
        "checkpoint_dir",
    )

    ready_from_start = True

    def __init__(
        self,
        *,
        log_tail_lines: int = 40,
        resubmit_if_outcome_unknown: bool = False,
        worker_array_job_id: int | str | None = None,
        slice_shape: str | None = None,
        hold_timeout: float | None = DEFAULT_HOLD_TIMEOUT,
        max_requeues: int | None = DEFAULT_MAX_REQUEUES,
        checkpoint_dir: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.checkpoint_dir = checkpoint_dir
        self.log_tail_lines = log_tail_lines
        self.resubmit_if_outcome_unknown = resubmit_if_outcome_unknown
        self.worker_array_job_id = worker_array_job_id
        self.slice_shape = slice_shape
        self.hold_timeout = hold_timeout
        self.max_requeues = max_requeues
        self._stuck = StuckJobWatch(hold_timeout=hold_timeout, max_requeues=max_requeues)
        self._last_state = ""

    def input_problems(self) -> list[str]:
        problems = super().input_problems()
        try:
            self.worker_array()
        except ValueError as err:
            problems.append(str(err))
        if self.slice_shape is not None and (problem := slice_shape_problem(self.slice_shape)):
            problems.append(problem)
        return problems

    def worker_array(self) -> int | None:
        """``worker_array_job_id`` once rendered: a job id, or None when not given (also when a
        template rendered an empty XCom as ``"None"``)."""
        value = self.worker_array_job_id
        text = str(value).strip()
        if value is None or text in ("", "None"):
            return None
        if isinstance(value, bool) or not text.isdigit() or int(text) <= 0:
            raise ValueError(
                f"worker_array_job_id: {value!r} is not a Slurm job id; pass the worker array of the "
                "Pathways service (the service task's XCom 'worker_array_job_id'), or leave it unset"
            )
        return int(text)

    def judge_failure(self, job: SlurmJob, judgement: JobJudgement, tail: str) -> JobJudgement:
        """A program failure while one of the service's slices was lost is a preemption."""
        array = self.worker_array()
        if array is None or judgement.failure is not FailureClass.USER_PROGRAM_FAILED:
            return judgement
        try:
            slices = self.hook.get_array_tasks(array)
        except Exception as err:  # the workload's own verdict stands
            self.log.warning(
                "Could not read the slices of worker array %s (%s); judging the workload alone",
                array,
                describe_error(err),
            )
            return judgement
        lost = slice_lost_during(job, slices, tail)
        if lost is None:
            return judgement
        self.log.warning("Slurm job %s failed while a slice was lost: %s", job.job_id, lost)
        return JobJudgement.failed(
            FailureClass.PREEMPTED, f"{judgement.message}; {lost}: a lost slice, retried as a preemption"
        )

    def usage_window(self, job: SlurmJob) -> tuple[float | None, float | None] | None:
        """The workload used its service's slices while it ran (a job that never started, none)."""
        if job.start_time is None:
            return None
        return job.start_time.timestamp(), job.end_time.timestamp() if job.end_time else None

    def lost_job(self, job_id: int, lost: str = "") -> tuple[FailureClass, str]:
        """Unknown outcome: not resubmitted unless ``resubmit_if_outcome_unknown``."""
        what = lost or f"Slurm job {job_id} is no longer known to the cluster; its end is unknown"
        if self.resubmit_if_outcome_unknown:
            return FailureClass.INFRASTRUCTURE, f"{what}; resubmitting (resubmit_if_outcome_unknown=True)"
        return FailureClass.OUTCOME_UNKNOWN, (
            f"{what}: whether its program ran, and how it ended, is unknown. It is not submitted again "
            "so that the program does not run twice; check its output and clear this task to run it "
            "again, or set resubmit_if_outcome_unknown=True to resubmit in such a case"
        )

    def trigger(self, deadline: Deadline) -> BaseTrigger:
        from airflow_provider_pathways.triggers.slurm import SlurmJobTrigger

        assert self._job_id is not None
        return SlurmJobTrigger(
            job_id=self._job_id,
            hold_timeout=self.hold_timeout,
            max_requeues=self.max_requeues,
            **self.trigger_arguments(deadline),
        )

    def look(self) -> Observation | None:
        assert self._job_id is not None
        job, lost = self.get_job_or_loss(self._job_id)
        if job is None or job.terminal:
            return (job, lost, None)
        state = f"{job.state}{f' ({job.reason})' if job.reason else ''}, restarts {job.restarts}"
        if state != self._last_state:
            self.log.info("Slurm job %s: %s", job.job_id, state)
            self._last_state = state
        stuck = self._stuck.stuck(job, time.time())
        return (job, "", stuck) if stuck is not None else None

    def execute_complete(
        self, context: Context, event: dict[str, Any], job_id: int | None = None, **newer: Any
    ) -> dict[str, Any]:
        """Resume after the job trigger fired."""
        if resumed_by_an_earlier_try(context, newer, self.log):
            return self.execute(context)  # type: ignore[no-any-return]
        self.resume(context, event, job_id)
        status = event.get("status")
        if status not in ("done", "stuck"):
            raise AirflowException(f"unexpected trigger event {event!r}")
        job = SlurmJob.from_dict(event["job"]) if event.get("job") else None
        if status == "stuck":
            stuck = (FailureClass(event["failure"]), str(event["message"]))
            return self.finish_job(context, self._job_id, (job, "", stuck))
        return self.finish_job(context, self._job_id, (job, event.get("message") or "", None))

    def recall_outcome(self, outcome: JsonValue) -> Observation | None:
        """The job as the try that reported its success saw it (kept by :meth:`finish_job`): a
        cleared task reports it again, with the same XComs, even once slurmctld forgot the job."""
        return (SlurmJob.from_dict(outcome), "", None) if isinstance(outcome, dict) else None

    def _output_tail(self, job: SlurmJob) -> str:
        if not self.log_tail_lines or not job.std_out:
            return ""
        try:
            text = self.hook.read_file(job.std_out, tail_bytes=64 * 1024) or ""
        except Exception as err:
            self.log.warning("Could not read %s: %s", job.std_out, type(err).__name__)
            return ""
        return "\n".join(text.rstrip().splitlines()[-self.log_tail_lines :])

    def finish_job(self, context: Context, external_id: JsonValue, observed: Any = None) -> dict[str, Any]:
        """The one judgement of the job's end: output tail, ``job`` XCom, result or the classified failure."""
        job_id = int(external_id)  # type: ignore[arg-type]
        self._job_id = job_id
        job, lost, stuck = observed if observed is not None else (*self.get_job_or_loss(job_id), None)
        if stuck is not None:
            self._end_stuck(context, *stuck)
        if job is None:
            self.forget_job(context)
            raise PathwaysJobFailed.for_class(*self.lost_job(job_id, lost), job=str(job_id))
        tail = self._output_tail(job)
        judgement = self.judge_failure(job, self.judgement(job), tail)
        if judgement.verdict is not Verdict.ACTIVE:
            preempted = judgement.failure is FailureClass.PREEMPTED
            self.report_job(context, job, preempted=preempted, worker_array=self.worker_array())
        self.log_tail(f"Last lines of the output of Slurm job {job_id} ({job.std_out}):", tail)
        context["ti"].xcom_push(key="job_id", value=job_id)  # also when no wait of this try pushed it
        context["ti"].xcom_push(key="job", value=job.to_dict())
        if judgement.verdict is Verdict.SUCCEEDED:
            # a cleared task reports it again from this, also once the cluster forgot the job
            self.remember_outcome(context, Verdict.SUCCEEDED, job.to_dict())
            return {"job_id": job_id, "state": job.state, "exit_code": job.exit_code, "reason": job.reason}
        if judgement.verdict is Verdict.ACTIVE:
            raise AirflowException(f"Slurm job {job_id} has not ended: {judgement.message}")
        self.forget_job(context)
        detail = f"\n{tail}" if tail else ""
        raise PathwaysJobFailed.for_class(
            judgement.failure or FailureClass.UNKNOWN,
            f"{judgement.message}{detail}",
            job=str(job_id),
            exit_code=job.exit_code,
        )

    def lineage_outputs(self) -> list[str | None]:
        return [self.checkpoint_dir]

    def _end_stuck(self, context: Context, failure: FailureClass, message: str) -> NoReturn:
        """The job will not end by itself: cancel it (``cancel_on_kill``) and fail the try."""
        if self.cancel_on_kill and self._clean_up("it will not end by itself"):
            self.forget_job(context)
            message += "; it was cancelled"
        elif not self.cancel_on_kill:
            message += f"; it is left as it is (cancel_on_kill=False): {self.left_behind}"
        raise PathwaysJobFailed.for_class(failure, message, job=str(self._job_id))


class CancelSlurmJobOperator(BaseOperator):
    """
    Cancel Slurm jobs (the Pathways service and its worker array); fine if they already ended.

    Meant as a teardown task (``.as_teardown()``). The worker array is found from
    ``worker_array_job_id``, or, with ``cluster_env_path``, from ``cluster.env`` when that file
    belongs to the service job, or else as the array jobs named ``worker_job_name`` that only the
    service jobs cancelled can have submitted: no other job of the Slurm user that may be a service
    job, whatever its name, ran then (the rule of :class:`PathwaysSlurmServiceOperator`).

    :param job_ids: one id or several (templated; e.g. the service operator's XCom).
    :param worker_array_job_id: the service's worker array, if known.
    :param cluster_env_path: read the worker array id from this ``cluster.env`` (None: don't).
    :param worker_job_name: the worker array's job name (default ``run_worker_slice.sh``).
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
        worker_job_name: str = DEFAULT_WORKER_JOB_NAME,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_ids = job_ids
        self.slurm_conn_id = slurm_conn_id
        self.worker_array_job_id = worker_array_job_id
        self.cluster_env_path = cluster_env_path
        self.worker_array_key = worker_array_key
        self.service_job_key = service_job_key
        self.worker_job_name = worker_job_name

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

    def execute(self, context: Context) -> dict[str, list[int]]:
        try:
            probe = ServiceProbe.of(self)
        except ValueError as err:
            raise AirflowFailException(str(err)) from None
        service_ids, hook = self._ids(), self.hook
        lookup: list[BaseException] = []
        results = hook.run_on_private_loop(lambda: cancel_services(hook, service_ids, probe, lookup.append))
        problems = [result.describe() for result in results if isinstance(result.ended, BaseException)]
        if lookup:  # the service jobs were cancelled; their arrays may still run: fail, to be retried
            problems.append(f"the worker arrays could not be looked up: {describe_error(lookup[0])}")
        if problems:
            raise AirflowException("; ".join(problems))
        cancelled = [result.job_id for result in results if result.ended is True]
        ended = [result.job_id for result in results if result.ended is False]
        self.log.info("Cancelled Slurm jobs %s; already ended: %s", cancelled or "none", ended or "none")
        return {"cancelled": cancelled, "already_ended": ended}
