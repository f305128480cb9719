"""Operators that run and delete Pathways jobs (PathwaysJob or plain JobSet) on GKE."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowTaskTimeout,
    conf,
)

from airflow_provider_pathways.airflow_features import deferred_by, resumed_by_an_earlier_try
from airflow_provider_pathways.failures import (
    DEFAULT_PREEMPTION_RETRIES,
    FailureClass,
    PathwaysJobFailed,
    PathwaysSpecRejected,
    apply_preemption_budget,
)
from airflow_provider_pathways.gke.job_objects import StatusOptions
from airflow_provider_pathways.gke.naming import HEAD_REPLICATED_JOB, WORKER_REPLICATED_JOB
from airflow_provider_pathways.gke.ownership import JobRef, Release
from airflow_provider_pathways.gke.queueing import queue_time_left
from airflow_provider_pathways.gke.resources import JobKind, proxy_address
from airflow_provider_pathways.gke.spec import PathwaysJobSpec, PathwaysSpecError
from airflow_provider_pathways.gke.status import (
    PathwaysJobStatus,
    Phase,
    format_duration,
)
from airflow_provider_pathways.gke.task_spec import (
    TaskIdentity,
    load_spec,
    min_slices_problem,
    place_spec,
    required_slices,
)
from airflow_provider_pathways.gke.wait import (
    WaitUntil,
    ended_before_ready,
    validate_wait_arguments,
    wait_is_over,
    wait_succeeded,
)
from airflow_provider_pathways.links import CloudLoggingLink, GKEWorkloadLink, push_console_links
from airflow_provider_pathways.operators.delete_pathways_job import DeletePathwaysJobOperator
from airflow_provider_pathways.operators.pathways_job_ownership import FollowedJob
from airflow_provider_pathways.operators.reattaching import Deadline, ReattachingJobOperator, task_deadline
from airflow_provider_pathways.operators.template_values import rendered_mapping
from airflow_provider_pathways.outcomes import Verdict
from airflow_provider_pathways.transient import (
    DEFAULT_OUTAGE_TOLERANCE,
    validate_outage_tolerance,
)

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context
    from pydantic import JsonValue

    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook


__all__ = ["DeletePathwaysJobOperator", "PathwaysJobOperator"]

DELETE_EVENTS = frozenset({"success", "failure", "kill"})


def _seconds(value: timedelta | float | None) -> float | None:
    return value.total_seconds() if isinstance(value, timedelta) else value


class PathwaysJobOperator(FollowedJob, ReattachingJobOperator):
    """
    Create a PathwaysJob (or the equivalent plain JobSet) and follow it.

    :param job: the job: a :class:`~airflow_provider_pathways.gke.spec.PathwaysJobSpec`, a dict (a
        manifest or its ``spec``), or YAML text / a ``.yaml`` file path (templated).
    :param name: job name; default: derived from dag, task, run and map index (same on retries).
    :param namespace: namespace; default: the spec's, then the connection's, then ``default``.
    :param kind: ``PathwaysJob`` (needs the controller) or ``JobSet`` (the plain form xpk renders).
    :param wait_until: ``created``, ``ready`` (head and ``min_slices`` ready; a job that ends
        first, even successfully, fails the task without retry) or ``finished``.
    :param min_slices: slices needed for ``ready``; default: ``numSlices - elasticSlices``.
    :param labels: extra labels for the job.
    :param annotations: extra annotations for the job.
    :param delete_on: when to delete the job: any of ``success`` (only with ``finished``),
        ``failure`` (a terminal failure, a timeout, or giving up on the last try) and ``kill``. A
        failed delete is logged and never changes the task's outcome.
    :param kubernetes_conn_id: cncf-kubernetes connection.
    :param deferrable: wait in the triggerer instead of holding a worker slot.
    :param poll_interval: seconds between status reads when not deferrable.
    :param wait_timeout: give up waiting after this long (seconds or timedelta).
    :param fail_on_suspend: a suspended (preempted) JobSet fails the try so it is retried.
    :param log_tail_lines: lines of the user program's log to copy into the task log at the end.
    :param worker_replicated_job: name of the workers' replicated job in the JobSet.
    :param head_replicated_job: name of the head's replicated job in the JobSet.
    :param validate_spec: check the spec before sending it (``False`` leaves it to the cluster, e.g.
        for a machine type newer than this provider knows).
    :param gcp_project: project of the GKE cluster, for the console links (default: connection).
    :param gke_cluster: GKE cluster name, for the console links (default: connection).
    :param gke_location: GKE cluster location, for the console links (default: connection).
    :param preemption_retries: retries the task gets for preemption and infrastructure failures
        when the DAG sets no ``retries`` (an explicit ``retries`` wins).
    :param outage_tolerance: seconds an API server outage may last during the wait; a longer one
        raises ``PathwaysWatchLost``: retried, the job kept for the retry to reattach to (deleted
        per ``delete_on`` on the last try).
    :param queue_name: Kueue LocalQueue to submit to (label ``kueue.x-k8s.io/queue-name``; xpk's is
        ``multislice-queue``). Kueue keeps the job suspended until it admits it: phase ``queued``,
        which is waited for and never counts as preemption.
    :param priority_class: Kueue WorkloadPriorityClass (label ``kueue.x-k8s.io/priority-class``).
    :param queue_timeout: give up when the job has been queued this long (seconds or timedelta);
        the queued job is deleted so that it does not start later unwatched.
    """

    template_fields: Sequence[str] = (
        "job",
        "name",
        "namespace",
        "labels",
        "annotations",
        "kubernetes_conn_id",
        "min_slices",
        "gcp_project",
        "gke_cluster",
        "gke_location",
        "queue_name",
        "priority_class",
    )
    template_ext: Sequence[str] = (".yaml", ".yml")
    template_fields_renderers = {"job": "yaml"}
    operator_extra_links = (GKEWorkloadLink(), CloudLoggingLink())
    ui_color = "#e8f0fe"
    external_id_key = "pathways_job"
    left_behind = "it is left for a later try or a DeletePathwaysJobOperator"

    def __init__(
        self,
        *,
        job: PathwaysJobSpec | Mapping[str, Any] | str,
        name: str | None = None,
        namespace: str | None = None,
        kind: str = JobKind.PATHWAYS_JOB.value,
        wait_until: str = WaitUntil.FINISHED.value,
        min_slices: int | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        delete_on: Collection[str] = ("success", "failure", "kill"),
        kubernetes_conn_id: str | None = "kubernetes_default",
        cluster_context: str | None = None,
        config_file: str | None = None,
        in_cluster: bool | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 10.0,
        wait_timeout: timedelta | float | None = None,
        fail_on_suspend: bool = True,
        log_tail_lines: int = 50,
        worker_replicated_job: str = WORKER_REPLICATED_JOB,
        head_replicated_job: str = HEAD_REPLICATED_JOB,
        gcp_project: str | None = None,
        gke_cluster: str | None = None,
        gke_location: str | None = None,
        deletion_timeout: float = 300.0,
        validate_spec: bool = True,
        preemption_retries: int = DEFAULT_PREEMPTION_RETRIES,
        outage_tolerance: timedelta | float = DEFAULT_OUTAGE_TOLERANCE,
        queue_name: str | None = None,
        priority_class: str | None = None,
        queue_timeout: timedelta | float | None = None,
        **kwargs: Any,
    ) -> None:
        apply_preemption_budget(kwargs, preemption_retries)
        super().__init__(**kwargs)
        unknown = set(delete_on) - DELETE_EVENTS
        if unknown:
            raise ValueError(f"delete_on: {sorted(unknown)} not allowed; use any of {sorted(DELETE_EVENTS)}")
        validate_wait_arguments(name=name or "x", wait_until=wait_until, min_slices=None, kind=kind)
        if poll_interval <= 0:
            raise ValueError("poll_interval: must be > 0 seconds")
        self.job = job
        self.name = name
        self.namespace = namespace
        self.kind = kind
        self.wait_until = wait_until
        self.min_slices = min_slices
        self.labels: Any = labels  # mappings once rendered (build_spec())
        self.annotations: Any = annotations
        self.delete_on = frozenset(delete_on)
        self.kubernetes_conn_id = kubernetes_conn_id
        self.cluster_context = cluster_context
        self.config_file = config_file
        self.in_cluster = in_cluster
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.wait_timeout = _seconds(wait_timeout)
        self.fail_on_suspend = fail_on_suspend
        self.log_tail_lines = log_tail_lines
        self.worker_replicated_job = worker_replicated_job
        self.head_replicated_job = head_replicated_job
        self.gcp_project = gcp_project
        self.gke_cluster = gke_cluster
        self.gke_location = gke_location
        self.deletion_timeout = deletion_timeout
        self.validate_spec = validate_spec
        self.preemption_retries = preemption_retries
        self.outage_tolerance = validate_outage_tolerance(outage_tolerance)
        self.queue_name = queue_name
        self.priority_class = priority_class
        self.queue_timeout = _seconds(queue_timeout)
        if self.queue_timeout is not None and self.queue_timeout <= 0:
            raise ValueError("queue_timeout: must be > 0 seconds (or None to wait in the queue for ever)")
        self._spec: PathwaysJobSpec | None = None
        self._status: PathwaysJobStatus | None = None

    # ---- helpers ----------------------------------------------------------------------------

    @cached_property
    def hook(self) -> PathwaysJobHook:
        from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

        return PathwaysJobHook.for_task(self)

    @property
    def status_options(self) -> StatusOptions:
        return StatusOptions.for_task(
            self, main_container=self.spec.controller.main_container_name if self._spec else "main"
        )

    @property
    def spec(self) -> PathwaysJobSpec:
        if self._spec is None:
            raise AirflowException("the job spec is resolved in execute()")
        return self._spec

    def build_spec(self, context: Context) -> PathwaysJobSpec:
        """The validated spec with name, namespace and task labels filled in; nothing is sent yet."""
        ti = context["ti"]
        task = TaskIdentity(
            ti.dag_id, ti.task_id, ti.run_id, ti.map_index if ti.map_index is not None else -1
        )
        try:
            spec = load_spec(self.job)
            spec = place_spec(
                spec,
                task,
                name=self.name,
                namespace=self.namespace or spec.namespace or self.hook.resolve_namespace(None),
                labels=rendered_mapping(self.labels, "labels"),
                annotations=rendered_mapping(self.annotations, "annotations"),
                queue_name=self.queue_name,
                priority_class=self.priority_class,
            )
            if self.validate_spec:
                spec.validate(kind=self.kind)
        except TypeError as err:
            raise PathwaysSpecRejected(str(err)) from err
        except PathwaysSpecError as err:
            raise PathwaysSpecRejected(f"the job spec is invalid, nothing was submitted:\n{err}") from err
        if problem := min_slices_problem(spec, self.min_slices):
            raise PathwaysSpecRejected(problem)
        return spec

    def required_slices(self, spec: PathwaysJobSpec) -> int:
        return required_slices(spec, self.min_slices)

    _identity_pushed = False

    def _clean_up(self, reason: str, *, forget: Context | None = None) -> Release | None:
        """Delete the job after the outcome is known, as its owner and only while no newer try
        follows it (:meth:`release`; with ``forget``, the kept job is dropped too). What became of
        it; None when the delete failed, which is logged and never changes the outcome."""
        released: list[Release] = [Release.GONE]

        def remove() -> None:
            released[0] = self.release(reason, forget=forget) or Release.GONE

        job = str(self._job) if self._job is not None else self.describe_job(None)
        return released[0] if self.clean_up(f"delete {job} ({reason})", remove) else None

    def _push_identity(self, context: Context) -> None:
        self._identity_pushed = True
        ti, job = context["ti"], self.followed
        ti.xcom_push(key="name", value=job.name)
        ti.xcom_push(key="namespace", value=job.namespace)
        ti.xcom_push(key="kind", value=job.kind)
        ti.xcom_push(key="proxy_address", value=proxy_address(job.name, self.head_replicated_job))
        ti.xcom_push(key="pathways_dir", value=self.spec.pathways_dir)
        conn_project, conn_cluster, conn_location = self.hook.console_location()
        push_console_links(
            ti,
            project=self.gcp_project or conn_project,
            cluster=self.gke_cluster or conn_cluster,
            location=self.gke_location or conn_location,
            namespace=job.namespace,
            name=job.name,
            head_job=self.head_replicated_job,
        )

    # ---- execution --------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        self._spec = self.build_spec(context)
        self.start_try(context)
        return self.run_job(context)

    def recall_outcome(self, outcome: JsonValue) -> PathwaysJobStatus | None:
        return PathwaysJobStatus.from_dict(outcome) if isinstance(outcome, dict) else None

    def follow_job(self, external_id: JsonValue, context: Context) -> Any:
        self._job = JobRef.from_id(external_id, self.kind) if self._job is None else self._job
        self.follow_mark()
        self._push_identity(context)
        if self.wait_until == WaitUntil.CREATED.value:
            return self._result(self.job_status())
        deadline = task_deadline(self, context, self.wait_timeout)
        if self.deferrable:
            self._defer(context, deadline)
        return self.finish_job(context, external_id, self._poll(context, deadline))

    def _defer(self, context: Context, deadline: Deadline) -> None:
        from airflow_provider_pathways.triggers.pathways_job import PathwaysJobTrigger

        self.defer(
            trigger=PathwaysJobTrigger.for_task(
                self,
                name=self.followed.name,
                namespace=self.followed.namespace,
                kind=self.followed.kind,
                **self.trigger_ownership(),
                wait_until=self.wait_until,
                min_slices=self.required_slices(self.spec),
                main_container=self.spec.controller.main_container_name,
                fail_on_suspend=self.fail_on_suspend,
                delete_on_kill="kill" in self.delete_on,
                deadline=deadline.at,
                deadline_reason=deadline.reason,
                outage_tolerance=self.outage_tolerance,
                queue_timeout=self.queue_timeout,
            ),
            method_name="execute_complete",
            kwargs=deferred_by(context),
        )

    def _poll(self, context: Context, deadline: Deadline) -> PathwaysJobStatus:
        from airflow_provider_pathways.hooks.kubernetes_errors import is_transient

        need = self.required_slices(self.spec) if self.wait_until == WaitUntil.READY.value else None
        last: list[PathwaysJobStatus | None] = [None]

        def look() -> PathwaysJobStatus | None:
            status = self.job_status()
            self._status = status
            if status != last[0]:
                self.log.info("%s", status.progress(need))
                last[0] = status
            if wait_is_over(
                status,
                wait_until=self.wait_until,
                min_slices=self.required_slices(self.spec),
                fail_on_suspend=self.fail_on_suspend,
            ):
                return status
            if queue_time_left(status, self.queue_timeout) == 0:
                self._give_up_queued(context, status)
            return None

        return self.poll(
            context,
            deadline,
            look,
            service=f"the Kubernetes API ({self.kubernetes_conn_id})",
            is_transient=is_transient,
        )

    def give_up(self, context: Context, reason: str | None) -> NoReturn:
        """The wait ran out of time: delete the job per ``delete_on`` (always while queued) and fail."""
        if self.discards_when_giving_up():
            self._clean_up("the wait timed out", forget=context)
        what = f"{self.followed.namespace}/{self.followed.name} was not {self.wait_until}"
        if reason == "execution_timeout":
            raise AirflowTaskTimeout(f"{what} within the task's execution_timeout ({self.execution_timeout})")
        raise AirflowException(f"{what} within wait_timeout ({self.wait_timeout}s)")

    def discards_when_giving_up(self) -> bool:
        return "failure" in self.delete_on or self._is_queued()

    def discards_failed_jobs(self) -> bool:
        return "failure" in self.delete_on

    def discards_when_killed(self) -> bool:
        return "kill" in self.delete_on or self._is_queued()

    def _is_queued(self) -> bool:
        return self._status is not None and self._status.phase is Phase.QUEUED

    def _give_up_queued(self, context: Context, status: PathwaysJobStatus) -> NoReturn:
        """Queued longer than ``queue_timeout``: delete the job (else it would start later, unwatched)."""
        waited = format_duration(status.queued_for() or 0.0)
        released = self._clean_up(
            f"queued longer than queue_timeout ({self.queue_timeout:g}s)", forget=context
        )
        deleted = released in (Release.DELETE, Release.GONE)
        raise AirflowException(
            f"{status.namespace}/{status.name} stayed queued in LocalQueue {status.queue} for {waited}, "
            f"longer than queue_timeout ({self.queue_timeout:g}s); the job was "
            f"{'deleted' if deleted else 'not deleted (see above) and may still start'}: {status.message}"
        )

    def execute_complete(self, context: Context, event: dict[str, Any], **newer: Any) -> Any:
        """Resume after the trigger fired."""
        if resumed_by_an_earlier_try(context, newer, self.log):
            return self.execute(context)
        self._spec = self.build_spec(context)
        self.start_try(context, resumed=True)
        self._identity_pushed = True  # before the try deferred
        if self._job is None:  # kept before this try deferred; without a task_state_store, every
            # event of the trigger names the job it followed
            self._job = JobRef.from_id(event.get("followed"), self.kind)
        if event.get("status") == "queue_timeout":
            self._status = PathwaysJobStatus.from_dict(event["job"])
            self._give_up_queued(context, self._status)
        self.check_trigger_event(context, event)
        if event.get("status") != "done":
            raise AirflowException(event.get("message") or f"unexpected trigger event {event!r}")
        return self.finish_job(context, self.followed.to_id(), PathwaysJobStatus.from_dict(event["job"]))

    def _log_program_tail(self, status: PathwaysJobStatus) -> None:
        if not self.log_tail_lines or self.spec.controller.template is None:
            return
        try:
            tail = self.hook.read_main_container_log(
                status.name, status.namespace, options=self.status_options, tail_lines=self.log_tail_lines
            )
        except Exception as err:
            self.log.warning("Could not read the program's log: %s", type(err).__name__)
            return
        container = self.spec.controller.main_container_name
        self.log_tail(f"Last lines of {status.namespace}/{status.name}, container {container!r}:", tail)

    def _result(self, status: PathwaysJobStatus) -> dict[str, Any]:
        return {
            "name": status.name,
            "namespace": status.namespace,
            "kind": self.followed.kind,
            "proxy_address": proxy_address(status.name, self.head_replicated_job),
            "status": status.to_dict(),
        }

    def finish_job(
        self, context: Context, external_id: JsonValue, observed: PathwaysJobStatus | None = None
    ) -> dict[str, Any]:
        """The one judgement of the job's end: XComs, log tail, deletion, or the classified failure."""
        if self._job is None:
            self._job = JobRef.from_id(external_id, self.kind)
        status = observed or self._status or self.job_status()
        self._status = status
        if not self._identity_pushed:  # a success reported again, not followed by this try
            self._push_identity(context)
        self.log.info("%s", status.progress())
        if status.terminal:
            self._log_program_tail(status)
        context["ti"].xcom_push(key="status", value=status.to_dict())
        if wait_succeeded(status, self.wait_until):
            if status.phase is Phase.SUCCEEDED:
                self.remember_outcome(context, Verdict.SUCCEEDED, status.to_dict())
                if "success" in self.delete_on:
                    self._clean_up("succeeded")
            return self._result(status)
        early = ended_before_ready(status, self.wait_until)
        failure = status.failure or FailureClass.UNKNOWN
        reason = "ended before it was ready" if early else f"failed: {failure.value}"
        released = None
        if "failure" in self.delete_on:  # a retry submits a fresh job
            released = self._clean_up(reason, forget=context)
        if released is None:  # kept: a new try judges it again, and never stops at this reported failure
            self.remember_outcome(context, Verdict.FAILED)
        if early:
            raise AirflowFailException(early)
        raise PathwaysJobFailed.for_class(
            failure,
            f"{status.namespace}/{status.name}: {status.message or status.phase.value}",
            job=status.name,
            exit_code=status.exit_code,
        )

    def on_kill(self) -> None:
        """Delete the job when the running task is killed (always while queued); harmless if gone."""
        if self.discards_when_killed():
            self.release("task killed")
