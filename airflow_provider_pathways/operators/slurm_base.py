"""What every Slurm job operator does: submit once, reattach, wait (polling or deferred), judge, cancel."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import suppress
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.providers.common.compat.sdk import AirflowException, AirflowTaskTimeout, conf

from airflow_provider_pathways import metrics
from airflow_provider_pathways.airflow_features import deferred_by
from airflow_provider_pathways.failures import (
    DEFAULT_PREEMPTION_RETRIES,
    FailureClass,
    PathwaysSpecRejected,
    apply_preemption_budget,
)
from airflow_provider_pathways.lineage import PathwaysRun, operator_lineage
from airflow_provider_pathways.operators.reattaching import Deadline, ReattachingJobOperator, task_deadline
from airflow_provider_pathways.operators.submitted import (
    SUBMITTED_REQUEST_KEY,
    as_yaml,
    masked_environment,
    masked_text,
    placeholder_context,
    show_submission,
)
from airflow_provider_pathways.operators.template_values import rendered_mapping
from airflow_provider_pathways.reattach_rules import JobJudgement, KeptJob, Verdict
from airflow_provider_pathways.slurm.end_states import JobOutcome, job_outcome
from airflow_provider_pathways.slurm.errors import SlurmJobLost, is_transient
from airflow_provider_pathways.slurm.job import (
    JOB_ROLE,
    SERVICE_ROLE,
    followed_by_try,
    following_comment,
    is_marked,
    marked_comment,
    owner_words,
    task_instance_marker,
)
from airflow_provider_pathways.slurm.slice_time import SliceTime, slice_time
from airflow_provider_pathways.slurm.submit import (
    SubmitRequest,
    environment_problems,
    environment_text,
    script_problems,
)
from airflow_provider_pathways.sweep import deployment_name, left_running_when
from airflow_provider_pathways.tpu_hours import TryUsage
from airflow_provider_pathways.transient import (
    DEFAULT_OUTAGE_TOLERANCE,
    describe_error,
    validate_outage_tolerance,
)

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context
    from airflow.triggers.base import BaseTrigger
    from pydantic import JsonValue

    from airflow_provider_pathways.hooks.slurm import SlurmHook
    from airflow_provider_pathways.slurm.job import SlurmJob


class SlurmJobBaseOperator(ReattachingJobOperator):
    """Submission, reattachment (``task_state_store``), the wait and cancellation of one Slurm job.

    Every try that submits a job logs the request it sends (script, sbatch options, environment) as
    YAML and pushes it to XCom under ``submitted_request``, secrets masked. ``dry_run=True`` checks
    and shows the request the same way and succeeds without reading the connection or submitting.
    """

    external_id_key = "slurm_job_id"
    metrics_backend = "slurm"
    _running_slices: int | None = None
    _preemptions: int | None = None
    left_behind = "it may still be running: cancel it with CancelSlurmJobOperator or scancel"
    #: The role the job's comment gives it after the task instance's marker (``role=job``; the
    #: Pathways service's is ``role=pathways-service``): a job of this provider that is not a
    #: Pathways service is never taken for another service's rival (docs/sensors/cluster_env.rst).
    job_role: str = JOB_ROLE
    #: The TPU topology of the slices this task's job uses (``SLICE_SHAPE``): chips per slice.
    slice_shape: Any = None
    #: The timeline draws the job ready from its start (a workload, run against a ready service).
    ready_from_start = False
    #: What every Slurm job operator templates (subclasses add their own).
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
        "sbatch_options",
        "slurm_conn_id",
    )
    ui_color = "#fff4e5"

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
        requeue: bool | None = None,
        cancel_on_kill: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 10.0,
        wait_timeout: float | None = None,
        preemption_retries: int = DEFAULT_PREEMPTION_RETRIES,
        outage_tolerance: timedelta | float = DEFAULT_OUTAGE_TOLERANCE,
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        apply_preemption_budget(kwargs, preemption_retries)
        super().__init__(**kwargs)
        if poll_interval <= 0:
            raise ValueError("poll_interval: must be > 0 seconds")
        if not isinstance(dry_run, bool):
            raise TypeError(f"dry_run: expected True or False, got {type(dry_run).__name__}")
        #: ``dry_run`` as given (``BaseOperator.dry_run`` is a method).
        self.is_dry_run = dry_run
        self.slurm_conn_id = slurm_conn_id
        self.script = script
        self.script_path = script_path
        self.environment: Any = environment  # a mapping once rendered (execute())
        self.job_name = job_name
        self.partition = partition
        self.account = account
        self.qos = qos
        self.time_limit = time_limit
        self.working_directory = working_directory
        self.output_path = output_path
        self.sbatch_options: Any = sbatch_options
        self.requeue = requeue
        self.cancel_on_kill = cancel_on_kill
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.wait_timeout = wait_timeout
        self.preemption_retries = preemption_retries
        self.outage_tolerance = validate_outage_tolerance(outage_tolerance)
        self._job_id: int | None = None
        self._marker: str | None = None
        self._try_number: int | None = None

    @cached_property
    def hook(self) -> SlurmHook:
        from airflow_provider_pathways.hooks.slurm import SlurmHook

        return SlurmHook(slurm_conn_id=self.slurm_conn_id)

    def rendered_environment(self) -> dict[str, Any]:
        """``environment`` once rendered (TypeError naming it when it is not a mapping)."""
        return rendered_mapping(self.environment, "environment")

    def rendered_sbatch_options(self) -> dict[str, Any]:
        """``sbatch_options`` once rendered. A DAG with ``render_template_as_native_obj=True``
        renders a flag's ``""`` as None: it stays a flag."""
        options = rendered_mapping(self.sbatch_options, "sbatch_options")
        return {name: "" if value is None else value for name, value in options.items()}

    def submission_environment(self) -> dict[str, str]:
        """Environment given to the job."""
        return environment_text(self.rendered_environment())

    def input_problems(self) -> list[str]:
        """Problems with the operator's arguments; checked before anything is submitted."""
        problems = script_problems(self.script, self.script_path)
        try:
            self.rendered_sbatch_options()
            return problems + environment_problems(self.rendered_environment())
        except TypeError as err:
            return [*problems, str(err)]

    def submitted_job_name(self, context: Context) -> str:
        """The job's name: ``job_name``, else ``<dag_id>.<task_id>``."""
        return self.job_name or f"{context['ti'].dag_id}.{context['ti'].task_id}"

    @staticmethod
    def marker(context: Context) -> str:
        """The ``--comment`` of every job this task instance of this deployment submits."""
        ti = context["ti"]
        map_index = getattr(ti, "map_index", None)
        return task_instance_marker(ti.dag_id, ti.task_id, ti.run_id, map_index, deployment_name())

    def sweep_marks(self, context: Context) -> str:
        """The owner words of every job this task instance submits: its task instance, the states in
        which the task leaves the job running (a sweep reads them: ``success`` for a service, handed
        on once ready; a kill's and a failure's states with ``cancel_on_kill=False``) and this
        deployment's name (``[pathways] deployment_name``)."""
        ti = context["ti"]
        left = left_running_when(
            hands_on=self.job_role == SERVICE_ROLE,
            ends_on_kill=self.cancel_on_kill,
            ends_on_failure=self.cancel_on_kill,
        )
        return owner_words(ti.dag_id, ti.task_id, getattr(ti, "map_index", None), left, deployment_name())

    def submission_request(self, context: Context) -> SubmitRequest:
        """The submission, every field checked (ValueError/TypeError naming the field)."""
        return SubmitRequest.build(
            script=self.script,
            script_path=self.script_path,
            job_name=self.submitted_job_name(context),
            comment=marked_comment(
                self.marker(context), self.job_role, submitting_try(context), self.sweep_marks(context)
            ),
            partition=self.partition,
            account=self.account,
            qos=self.qos,
            time_limit=self.time_limit,
            environment=self.submission_environment(),
            working_directory=self.working_directory,
            output=self.output_path,
            requeue=self.requeue,
            extra_options=self.rendered_sbatch_options(),
        )

    def execute(self, context: Context) -> Any:
        self.check_inputs()
        if self.is_dry_run:
            request = self.checked_request(context)
            self.show_request(
                context,
                request,
                f"Dry run: Slurm job {request.display_name} would be submitted (nothing was submitted)",
                dry_run=True,
            )
            return {"dry_run": True, "job_name": request.display_name}
        self.start_try(context)
        return self.run_job(context)

    def check_inputs(self) -> None:
        """Refuse the operator's arguments (:meth:`input_problems`) before anything is submitted."""
        problems = self.input_problems()
        if problems:
            raise PathwaysSpecRejected("nothing was submitted:\n" + "\n".join(f"  {p}" for p in problems))

    def checked_request(self, context: Context) -> SubmitRequest:
        """:meth:`submission_request`; a bad field raises ``PathwaysSpecRejected`` naming it."""
        try:
            return self.submission_request(context)
        except (ValueError, TypeError) as err:
            raise PathwaysSpecRejected(f"nothing was submitted: {err}") from err

    def show_request(
        self, context: Context | None, request: SubmitRequest, title: str, *, dry_run: bool
    ) -> None:
        """Push the request to XCom (``submitted_request``) and log it as YAML, secrets masked."""
        show_submission(
            self.log, context, SUBMITTED_REQUEST_KEY, title, shown_request(request), dry_run=dry_run
        )

    def dry_run(self) -> None:
        """Print the request as YAML (as ``KubernetesPodOperator.dry_run()`` prints its pod): outside
        a task run, its job name and comment are those of a run with id ``dry_run``."""
        self.check_inputs()
        print(as_yaml(shown_request(self.checked_request(placeholder_context(self)))))

    def start_try(self, context: Context) -> tuple[str, int]:
        """Remember which task instance and try this is (its marker and try number) before anything
        is submitted: a try killed at any point after its submission (a partitioned worker thawed
        after a newer try took its job over) can then still tell that a newer try follows the job."""
        self._marker = marker = self.marker(context)
        self._try_number = try_number = submitting_try(context)
        return marker, try_number

    def describe_job(self, external_id: JsonValue) -> str:
        return f"Slurm job {external_id}"

    def submit_job(self, context: Context) -> JsonValue:
        request = self.checked_request(context)
        self.show_request(context, request, f"Submitting Slurm job {request.display_name}", dry_run=False)
        try:
            job_id = self.hook.submit_job(request)
        except (FileNotFoundError, ValueError, TypeError) as err:
            raise PathwaysSpecRejected(f"nothing was submitted: {err}") from err
        self._job_id = job_id  # the hook logged "Submitted Slurm job N (name)"
        return job_id

    def adopt_unclaimed_job(self, context: Context) -> JsonValue | None:
        """An active job of this name whose comment names this task instance, when this is not the
        first try: its submission went out, but the try that sent it kept no id (slurmrestd's or
        sbatch's answer was lost, or the worker died first). The first try lists nothing: over
        slurmrestd a listing is every job of the cluster."""
        if submitting_try(context) <= 1:
            return None
        found = [job for job in self.marked_jobs(context) if job.active]
        return max(job.job_id for job in found) if found else None

    def is_transient_error(self, error: BaseException) -> bool:
        return is_transient(error)

    def end_unclaimed_jobs(self, context: Context) -> list[str]:
        """Cancel the task instance's active jobs, found by its marker, but those a newer try
        submitted or follows (their comments name it)."""
        ended: list[str] = []
        marker, own_try = self.marker(context), submitting_try(context)
        for job in self.marked_jobs(context):
            follower = followed_by_try(job.comment, marker)
            if job.active and (follower is None or follower <= own_try):
                self._job_id = job.job_id
                self._cancel("its submission's answer was lost, and no retry follows")
                ended.append(self.describe_job(job.job_id))
        return ended

    def marked_jobs(self, context: Context) -> list[SlurmJob]:
        """The jobs of this name whose comment names this task instance (no array tasks), that
        slurmctld still knows."""
        marker = self.marker(context)
        return [
            job
            for job in self.hook.get_jobs_named(self.submitted_job_name(context))
            if is_marked(job.comment, marker) and job.array_task_id is None
        ]

    def own_job(self, context: Context) -> int | None:
        """The job this task instance follows when nothing the try was resumed with names it (the
        scheduler's trigger timeout drops the deferral's arguments): the kept one, else the newest of
        its marked jobs, an active one first; None when none is found."""
        store = context.get("task_state_store")
        stored = store.get(self.external_id_key) if store is not None else None
        if stored is not None:
            return int(KeptJob.from_stored(stored).job)
        found = sorted(self.marked_jobs(context), key=lambda job: (job.active, job.job_id))
        return found[-1].job_id if found else None

    def judge_job(self, external_id: JsonValue, context: Context) -> JobJudgement | None:
        try:
            job = self.hook.get_job(int(external_id), required=True)  # type: ignore[arg-type]
        except SlurmJobLost as lost:
            return JobJudgement.failed(*self.lost_job(int(external_id), str(lost)))  # type: ignore[arg-type]
        assert job is not None
        self._job_id = job.job_id
        return self.judgement(job)

    def lost_job(self, job_id: int, lost: str = "") -> tuple[FailureClass, str]:
        """The failure class and message of a job the cluster forgot before its end was seen: an
        infrastructure failure by default (a fresh job is submitted)."""
        return FailureClass.INFRASTRUCTURE, lost or f"Slurm job {job_id} is no longer known to the cluster"

    def get_job_or_loss(self, job_id: int) -> tuple[SlurmJob | None, str]:
        """The job, or None and why its end is unknown (slurmctld forgot it, no accounting)."""
        try:
            return self.hook.get_job(job_id, required=True), ""
        except SlurmJobLost as lost:
            return None, str(lost)

    def judgement(self, job: SlurmJob) -> JobJudgement:
        """The job's verdict (:func:`~airflow_provider_pathways.slurm.end_states.job_outcome`)."""
        outcome, failure, message = job_outcome(job)
        if outcome is JobOutcome.FAILED:
            return JobJudgement.failed(failure or FailureClass.UNKNOWN, message)
        return JobJudgement(Verdict(outcome.value), None, message)

    def report_job(
        self,
        context: Context,
        job: SlurmJob,
        *,
        ready_at: float | None = None,
        preempted: bool = False,
        worker_array: int | None = None,
    ) -> None:
        """Keep whether this try's job was preempted (the lineage facet reads it) and send what
        Slurm's own times say of ``job`` (:mod:`~airflow_provider_pathways.metrics`): its queue wait
        (submit to start), time to ready (submit to ``ready_at``, the look that saw the service
        ready), time to finish (submit to end, once it ended), requeues, and a preemption; then the
        try's TPU-hours from ``worker_array``'s slices (:meth:`report_usage`). Never raises."""
        self._preemptions = int(preempted)
        self.report_usage(context, job, ready_at=ready_at, preempted=preempted, worker_array=worker_array)
        try:
            tags = self.metric_tags(context)
            submitted = job.submit_time
            if submitted is not None:
                since = {
                    metrics.QUEUE_WAIT: job.start_time,
                    metrics.TIME_TO_READY: (
                        datetime.fromtimestamp(ready_at, tz=timezone.utc) if ready_at is not None else None
                    ),
                    metrics.TIME_TO_FINISH: job.end_time if job.terminal else None,
                }
                for metric, moment in since.items():
                    if moment is not None:
                        metrics.emit(metric, max(0.0, (moment - submitted).total_seconds()), tags)
            if job.restarts:
                metrics.emit(metrics.RESTARTS, job.restarts, tags)
            if preempted:
                metrics.emit(metrics.PREEMPTIONS, 1, tags)
        except Exception as err:  # measuring never fails the task
            self.log.debug("Could not send the metrics of Slurm job %s: %s", job.job_id, err)

    def usage_window(self, job: SlurmJob) -> tuple[float | None, float | None] | None:
        """When this try's job used its slices (epoch seconds; None: from the worker array's first
        run, to its last end); None: it used none (it never started)."""
        return None, None

    def report_usage(
        self,
        context: Context,
        job: SlurmJob,
        *,
        ready_at: float | None,
        preempted: bool,
        worker_array: int | None,
    ) -> None:
        """The try's TPU-hours (:func:`~airflow_provider_pathways.operators.usage.record_try_usage`):
        chips per slice (from ``slice_shape``) * the worker array's slice-hours within
        :meth:`usage_window` (:func:`~airflow_provider_pathways.slurm.slice_time.slice_time`), with
        the job's own milestones for the timeline. Never raises."""
        try:
            from airflow_provider_pathways.gke.tpu import topology_chips
            from airflow_provider_pathways.operators.usage import record_try_usage

            chips: int | None = None
            if self.slice_shape:
                with suppress(ValueError):
                    chips = topology_chips(str(self.slice_shape))
            window = self.usage_window(job)
            if window is None:
                time = SliceTime(0.0)
            elif worker_array is None:
                time = SliceTime(None, unknown="slice time (the service's worker array is not known)")
            else:
                time = slice_time(self.hook.get_array_tasks(worker_array), since=window[0], until=window[1])

            def epoch(moment: datetime | None) -> float | None:
                return None if moment is None else moment.timestamp()

            this = TryUsage(
                try_number=int(getattr(context["ti"], "try_number", 0) or 0),
                job=str(job.job_id),
                tpu_type=None,
                chips_per_slice=chips,
                started=epoch(job.start_time),
                ended=epoch(job.end_time),  # only an ended job has one (build_job)
                preempted=preempted,
                submitted=epoch(job.submit_time),
                ready=epoch(job.start_time) if self.ready_from_start else ready_at,
                slices_ready=time.running,
                slice_hours=time.slice_hours,
                slice_hours_unknown=time.unknown,
            )
            record_try_usage(context, this, self.metric_tags(context), self.log)
        except Exception as err:  # measuring never fails the task
            self.log.debug("Could not report the TPU-hours of Slurm job %s: %s", job.job_id, err)

    def lineage_run(self) -> PathwaysRun:
        """The ``pathways`` run facet of this try (:mod:`~airflow_provider_pathways.lineage`)."""
        return PathwaysRun(backend="slurm", queue=self.partition, preemptions=self._preemptions)

    def lineage_outputs(self) -> list[str | None]:
        """The ``gs://`` locations the job writes (OpenLineage output datasets)."""
        return []

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the ``pathways`` run facet and :meth:`lineage_outputs` as datasets."""
        return operator_lineage(self.lineage_run(), self.lineage_outputs())

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """As :meth:`get_openlineage_facets_on_complete`: a failed try's job wrote there too."""
        return self.get_openlineage_facets_on_complete(task_instance)

    def discard_job(self, external_id: JsonValue, reason: str, *, wait: bool = False) -> None:
        self._job_id = int(external_id)  # type: ignore[arg-type]
        self._cancel(reason)

    def follow_job(self, external_id: JsonValue, context: Context) -> Any:
        self._job_id = int(external_id)  # type: ignore[arg-type]
        context["ti"].xcom_push(key="job_id", value=self._job_id)
        self.mark_followed(context)
        deadline = task_deadline(self, context, self.wait_timeout)
        if self.deferrable:
            over = self._wait_already_over()
            if over is not None:  # nothing to wait for: the trigger would fire at once
                return self.finish_job(context, self._job_id, over)
            self.stop_if_ended_meanwhile(context)
            self.defer(
                trigger=self.trigger(deadline),
                method_name="execute_complete",
                kwargs={"job_id": self._job_id, **deferred_by(context)},
            )
        observed = self.poll(
            context,
            deadline,
            self.look,
            service=f"Slurm (connection {self.slurm_conn_id!r})",
            is_transient=is_transient,
        )
        return self.finish_job(context, self._job_id, observed)

    def _wait_already_over(self) -> Any:
        """What :meth:`look` sees when the wait is already over (a reattach to a job that ended or
        a service that is ready), else None (also when it cannot be read now: the trigger rides that
        out). Deferring then would make the trigger fire at once, and Airflow 3.3's scheduler fails
        a task whose trigger fires before it has processed the deferral's exit
        (apache/airflow#72716)."""
        try:
            return self.look()
        except Exception:
            return None

    def mark_followed(self, context: Context) -> None:
        """A try after the first writes its number into the job's comment: an older try of the task
        instance that is killed later (superseded, its worker partitioned) then leaves the job to
        this one. Best effort: a job left unmarked is only less protected."""
        marker, try_number = self.start_try(context)
        if try_number <= 1 or self._job_id is None:
            return
        try:
            self.hook.set_job_comment(
                self._job_id, following_comment(marker, try_number, self.job_role, self.sweep_marks(context))
            )
        except Exception as err:
            self.log.warning(
                "Could not mark Slurm job %s as followed by try %s: %s",
                self._job_id,
                try_number,
                describe_error(err),
            )

    def newer_try_follows(self) -> bool:
        """Whether a newer try of this task instance marked the job as its own (then this try, killed
        or giving up, leaves it alone). False when it cannot tell."""
        if self._job_id is None or self._marker is None or self._try_number is None:
            return False
        try:
            job = self.hook.get_job(self._job_id)
        except Exception as err:
            self.log.warning("Could not read Slurm job %s: %s", self._job_id, describe_error(err))
            return False
        follower = followed_by_try(job.comment if job else None, self._marker)
        if follower is None or follower <= self._try_number:
            return False
        self.log.info(
            "Left Slurm job %s alone: try %s of this task instance follows it (this is try %s)",
            self._job_id,
            follower,
            self._try_number,
        )
        return True

    def trigger(self, deadline: Deadline) -> BaseTrigger:
        """The trigger that waits for this job in the triggerer."""
        raise NotImplementedError

    def trigger_arguments(self, deadline: Deadline) -> dict[str, Any]:
        """What every Slurm trigger of these operators gets: connection, pace, deadline, kill and
        outage policy."""
        return {
            "slurm_conn_id": self.slurm_conn_id,
            "poll_interval": self.poll_interval,
            "deadline": deadline.at,
            "deadline_reason": deadline.reason,
            "cancel_on_kill": self.cancel_on_kill,
            "outage_tolerance": self.outage_tolerance,
        }

    def look(self) -> Any:
        """One look at the job for the polling wait: an observation when the wait is over, else None."""
        raise NotImplementedError

    def give_up(self, context: Context, reason: str | None) -> NoReturn:
        """The wait ran out of time: cancel the job (with ``cancel_on_kill``, unless a newer try of
        the task instance follows it) and fail the try."""
        if self.cancel_on_kill and not self.newer_try_follows() and self._clean_up("the wait timed out"):
            self.forget_job(context)
        what = f"Slurm job {self._job_id} was not {self.waiting_for}"
        if reason == "execution_timeout":
            raise AirflowTaskTimeout(f"{what} within the task's execution_timeout ({self.execution_timeout})")
        raise AirflowException(f"{what} within wait_timeout ({self.wait_timeout}s)")

    waiting_for = "done"

    def discards_when_giving_up(self) -> bool:
        return self.discards_when_killed()

    def discards_when_killed(self) -> bool:
        return self.cancel_on_kill

    def resume(self, context: Context, event: dict[str, Any], job_id: int | None) -> None:
        """Common checks when the trigger fired: the job id back (from the operator's ``kwargs``, else
        the event; both this task instance's own, also when it is mapped), timeouts and trigger
        errors."""
        self.start_try(context)
        if job_id is None:
            job_id = event.get("job_id")
        if job_id is None and event.get("status") == "timeout":  # nothing of the deferral came back
            job_id = self.own_job(context)
            if job_id is None:
                self.log.warning("Found no Slurm job of this task instance to give up on")
        self._job_id = int(job_id) if job_id is not None else None
        self.check_trigger_event(context, event)

    def _clean_up(self, reason: str) -> bool:
        """Cancel the job after the outcome is known; a failure never changes the outcome."""
        return self.clean_up(f"cancel Slurm job {self._job_id} ({reason})", lambda: self._cancel(reason))

    def _cancel(self, reason: str) -> None:
        if self._job_id is None:
            return
        cancelled = self.hook.cancel_job(self._job_id)
        self.log.info(
            "Slurm job %s %s (%s)", self._job_id, "cancelled" if cancelled else "had already ended", reason
        )

    def job_in_hand(self) -> JsonValue | None:
        return self._job_id if self._job_id is not None else super().job_in_hand()

    def end_killed_job(self) -> None:
        """Cancel the job of a killed try, unless a newer try of the task instance follows it."""
        if not self.newer_try_follows():
            self._cancel("task killed")


def submitting_try(context: Context) -> int:
    """The try number of the context's task instance (1 when it has none: a dry run)."""
    return int(getattr(context["ti"], "try_number", 1) or 1)


def shown_request(request: SubmitRequest) -> dict[str, Any]:
    """:meth:`SubmitRequest.shown`, secrets masked: the environment's values by name and by value,
    every other string by value."""
    shown = request.shown()
    environment = shown.pop("environment")
    return {**masked_text(shown), "environment": masked_environment(environment)}
