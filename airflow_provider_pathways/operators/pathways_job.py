"""Operators that run and delete Pathways jobs (PathwaysJob or plain JobSet) on GKE, and the job one
try of a ``PathwaysJobOperator`` follows: found, adopted, judged, marked and deleted only as its task
instance's owner (:mod:`airflow_provider_pathways.gke.task_job`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowTaskTimeout,
    BaseOperator,
    conf,
)

from airflow_provider_pathways.airflow_features import deferred_by, resumed_by_an_earlier_try
from airflow_provider_pathways.failures import (
    DEFAULT_PREEMPTION_RETRIES,
    FailureClass,
    PathwaysJobFailed,
    PathwaysQueueTimeout,
    PathwaysSpecRejected,
    apply_preemption_budget,
)
from airflow_provider_pathways.gke.objects import (
    HEAD_REPLICATED_JOB,
    MAIN_CONTAINER,
    WORKER_REPLICATED_JOB,
    JobKind,
    StatusOptions,
    check_kind,
    proxy_address,
)
from airflow_provider_pathways.gke.spec import PathwaysJobSpec, PathwaysSpecError
from airflow_provider_pathways.gke.status import (
    PathwaysJobStatus,
    Phase,
    WaitUntil,
    ended_before_ready,
    format_duration,
    judge_status,
    queue_time_left,
    validate_wait_arguments,
    wait_is_over,
    wait_succeeded,
)
from airflow_provider_pathways.gke.task_job import (
    JobRef,
    Release,
    TaskIdentity,
    describe_release,
    fresh_job_name,
    is_this_job,
    load_spec,
    manifest_for,
    min_slices_problem,
    owner_labels,
    place_spec,
    required_slices,
)
from airflow_provider_pathways.links import CloudLoggingLink, GKEWorkloadLink, push_console_links
from airflow_provider_pathways.operators.reattaching import Deadline, ReattachingJobOperator, task_deadline
from airflow_provider_pathways.operators.submitted import (
    SUBMITTED_MANIFEST_KEY,
    as_yaml,
    masked_text,
    placeholder_context,
    show_submission,
)
from airflow_provider_pathways.operators.template_values import rendered_mapping
from airflow_provider_pathways.operators.usage import MeasuredPathwaysJob
from airflow_provider_pathways.reattach_rules import JobJudgement, KeptJob, Verdict
from airflow_provider_pathways.sweep import deployment_name, left_running_when
from airflow_provider_pathways.transient import (
    CONNECTION_TO_FIX,
    DEFAULT_OUTAGE_TOLERANCE,
    describe_error,
    validate_outage_tolerance,
)

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context
    from airflow.sdk.types import Logger
    from pydantic import JsonValue

    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

__all__ = ["DeletePathwaysJobOperator", "PathwaysJobOperator"]


class FollowedJob:
    """Which job this try follows (``_job``) and what it may do with it: adopt a job of its task
    instance found by owner labels, judge a kept one only while it is still the task instance's,
    mark it as followed by this try, and delete it only while no newer try follows it."""

    if TYPE_CHECKING:
        kind: str

        def forget_job(self, context: Context | None) -> None: ...

        def discards_failed_jobs(self) -> bool: ...

        @property
        def hook(self) -> PathwaysJobHook: ...

        @property
        def log(self) -> Logger: ...

        deletion_timeout: float
        external_id_key: str
        fail_on_suspend: bool
        _spec: PathwaysJobSpec | None
        _status: PathwaysJobStatus | None

        @property
        def spec(self) -> PathwaysJobSpec: ...
        @property
        def status_options(self) -> StatusOptions: ...

    _job: JobRef | None = None
    _try_number: int | None = None

    @property
    def followed(self) -> JobRef:
        if self._job is None:
            raise AirflowException("no job is followed yet")
        return self._job

    def _owner(self) -> dict[str, str]:
        return owner_labels(self.spec.labels)

    def options_for(self, ref: JobRef) -> StatusOptions:
        """How to read ``ref``'s status (its kind may differ from the operator's: an upgraded DAG)."""
        return dataclasses.replace(self.status_options, kind=JobKind(ref.kind), uid=ref.uid)

    def job_status(self) -> PathwaysJobStatus:
        ref = self.followed
        return self.hook.get_status(ref.name, ref.namespace, self.options_for(ref))

    def start_try(self, context: Context, *, resumed: bool = False) -> None:
        """Remember this try's number; ``resumed`` after a deferral, also the job it follows (kept
        in ``task_state_store`` before it deferred)."""
        self._try_number = getattr(context.get("ti"), "try_number", None)
        store = context.get("task_state_store") if resumed else None
        stored = store.get(self.external_id_key) if store is not None else None
        if stored is not None:
            self._job = JobRef.from_id(KeptJob.from_stored(stored).job, self.kind)

    def describe_job(self, external_id: JsonValue) -> str:
        ref = JobRef.from_id(external_id, self.kind)
        return str(ref) if ref else f"{self.kind} {self.spec.namespace}/{self.spec.name}"

    def judge_job(self, external_id: JsonValue, context: Context) -> JobJudgement | None:
        """The kept job's judgement where it was made (its name, namespace and kind may have changed
        in the DAG since); None when another object took its name."""
        ref = JobRef.from_id(external_id, self.kind)
        if ref is None:
            return None
        obj = self.hook.get_object(JobKind(ref.kind).resource, ref.name, ref.namespace)
        if obj is not None and not is_this_job(obj, ref, self._owner()):
            self.log.warning("%s is no longer the job this task instance submitted; not following it", ref)
            return None
        self._job = JobRef.of(obj, ref.kind) if obj is not None else ref
        status = self.job_status()
        self._status = status
        return judge_status(status)

    def own_job(self) -> JobRef:
        """The job this task instance follows when nothing the try was resumed with names it (the
        scheduler's trigger timeout drops the deferral's arguments): its job that has not ended,
        found by its owner labels, else the one of the spec's name (perhaps gone)."""
        namespace, owner = self.spec.namespace or "", self._owner()
        refs = self.hook.owned_jobs(namespace, owner)
        for ref in refs:
            status = self.hook.get_status(ref.name, ref.namespace, self.options_for(ref))
            if judge_status(status).verdict is Verdict.ACTIVE:
                return ref
        named = [ref for ref in refs if ref.name == self.spec.name]
        return named[0] if named else JobRef(self.spec.name or "", namespace, self.kind)

    def follow_mark(self) -> None:
        """Mark the job as followed by this try: an older try's kill or timeout leaves it alone."""
        if self._try_number is not None:
            self.hook.mark_followed(self.followed, self._try_number)

    def submit_job(self, context: Context) -> JsonValue:
        """Adopt a job of this task instance that has not ended (found by its owner labels, whatever
        its name and kind; judged as a kept job is, so a suspended one is followed, not run twice,
        unless ``fail_on_suspend`` would fail it at once: then it is deleted), or create one; an
        ended job of the task instance keeps its name, and the new one is named for this try."""
        from airflow_provider_pathways.hooks.kubernetes import JobNameTaken

        namespace, owner = self.spec.namespace or "", self._owner()
        ended: set[str] = set()
        for ref in self.hook.owned_jobs(namespace, owner):
            status = self.hook.get_status(ref.name, ref.namespace, self.options_for(ref))
            if judge_status(status).verdict is Verdict.ACTIVE:
                self._job = ref
                if not (status.phase is Phase.SUSPENDED and self.fail_on_suspend):
                    self.log.info("Reattaching to %s, created by an earlier try of this task instance", ref)
                    return ref.to_id()
                # following it would fail at once, as an earlier try did: a preemption, so a fresh job
                self.log.warning(
                    "%s, created by an earlier try of this task instance, is suspended; deleting it and "
                    "submitting a fresh job: %s",
                    ref,
                    status.message,
                )
                self.discard_job(ref.to_id(), "replaced after suspension", wait=True)
                self._job = None
                continue
            if status.phase is not Phase.SUCCEEDED and self._remove_unkept(ref, status):
                continue
            ended.add(ref.name)
        name = self.spec.name or ""
        if name in ended and self._try_number is not None:
            fresh = fresh_job_name(name, self._try_number)
            self.log.info("%s %s/%s of an earlier try is kept; naming this try's job %s", self.kind,
                          namespace, name, fresh)  # fmt: skip
            self._spec = dataclasses.replace(self.spec, name=fresh)
            name = fresh
        manifest = manifest_for(self.spec, self.kind)
        self.show_manifest(context, manifest, f"Submitting {self.kind} {namespace}/{name}", dry_run=False)
        try:
            created = self.hook.create_job(manifest, namespace)
        except JobNameTaken as err:
            existing = self.hook.get_object(JobKind(self.kind).resource, name, namespace)
            if existing is None or not is_this_job(existing, JobRef(name, namespace, self.kind), owner):
                raise AirflowFailException(
                    f"name: a {self.kind} named {namespace}/{name} already exists and was not created by "
                    "this task instance; pass another name or delete it"
                ) from err
            created = existing  # this try's create answered late (a retried request)
        self._job = JobRef.of(created, self.kind)
        self.log.info("Created %s (uid %s)", self._job, self._job.uid)
        return self._job.to_id()

    def is_transient_error(self, error: BaseException) -> bool:
        from airflow_provider_pathways.hooks.kubernetes import is_transient

        return is_transient(error)

    def end_unclaimed_jobs(self, context: Context) -> list[str]:
        """Delete the task instance's jobs that have not ended, found by its owner labels."""
        ended: list[str] = []
        for ref in self.hook.owned_jobs(self.spec.namespace or "", self._owner()):
            status = self.hook.get_status(ref.name, ref.namespace, self.options_for(ref))
            if judge_status(status).verdict is Verdict.ACTIVE:
                self._job = ref
                if self.release("its submission's answer was lost, and no retry follows") is Release.DELETE:
                    ended.append(str(ref))
        return ended

    def show_manifest(
        self, context: Context | None, manifest: Mapping[str, Any], title: str, *, dry_run: bool
    ) -> None:
        """Push the manifest to XCom (``submitted_manifest``) and log it as YAML, secrets masked."""
        show_submission(
            self.log, context, SUBMITTED_MANIFEST_KEY, title, masked_text(manifest), dry_run=dry_run
        )

    def _remove_unkept(self, ref: JobRef, status: PathwaysJobStatus) -> bool:
        """An ended, unsuccessful job of the task instance that ``delete_on`` would have deleted but
        nobody did (no try saw its end, e.g. after ``wait_until="created"``, or its delete failed):
        delete it, so that the fresh job takes its name. False when it stays (kept by ``delete_on``,
        followed by a newer try, or its delete failed: the fresh job is then named for the try)."""
        if not self.discards_failed_jobs():
            return False
        reason = f"ended ({status.phase.value}); replaced by this try's job"
        try:
            released = self.hook.release_job(ref, self._owner(), self._try_number)
            self.log.info("%s", describe_release(released, ref, reason))
            if released is Release.DELETE:
                self.hook.wait_until_deleted(
                    ref.name, ref.namespace, JobKind(ref.kind), self.deletion_timeout
                )
        except Exception as err:
            self.log.warning("Could not delete %s (%s): %s", ref, reason, describe_error(err))
            return False
        return released in (Release.DELETE, Release.GONE)

    def release(self, reason: str, *, forget: Context | None = None) -> Release | None:
        """Delete the followed job unless it is not this task instance's or a newer try follows it;
        with ``forget`` (the try's context), also drop the kept job, unless a newer try follows it
        (its retry reattaches through the kept job)."""
        if self._job is None:
            return None
        released = self.hook.release_job(self._job, self._owner(), self._try_number)
        self.log.info("%s", describe_release(released, self._job, reason))
        if forget is not None and released is not Release.SUPERSEDED:
            self.forget_job(forget)
        return released

    def discard_job(self, external_id: JsonValue, reason: str, *, wait: bool = False) -> None:
        if self.release(reason) is Release.DELETE and wait:
            ref = self.followed
            self.hook.wait_until_deleted(ref.name, ref.namespace, JobKind(ref.kind), self.deletion_timeout)

    def discard_given_up(self, external_id: JsonValue, context: Context) -> bool:
        """The last try gave up on its job: delete it unless a newer try follows it (then the kept
        job stays, for that try's retry to reattach through)."""
        if self._job is None:
            self._job = JobRef.from_id(external_id, self.kind)
        released = self.release("the task gave up on it", forget=context)
        if released is None:  # not a job id this version reads: nothing to delete
            self.forget_job(context)
        return released is not Release.SUPERSEDED

    def trigger_ownership(self) -> Mapping[str, Any]:
        """What the trigger needs to delete the job on kill under the same rules."""
        return {"uid": self.followed.uid, "owner_labels": self._owner(), "try_number": self._try_number}


class DeletePathwaysJobOperator(BaseOperator):
    """
    Delete a PathwaysJob or JobSet and what it owns; succeeds when it is already gone.

    Meant as a teardown task (``.as_teardown()``).

    :param job_name: the job's name (templated, e.g. from the creating task's XCom).
    :param namespace: its namespace; default: the connection's, then ``default``.
    :param kind: ``PathwaysJob`` or ``JobSet``.
    :param wait_for_deletion: wait until the object is gone.
    :param deletion_timeout: seconds to wait.
    """

    template_fields: Sequence[str] = ("job_name", "namespace", "kubernetes_conn_id")
    ui_color = "#fce8e6"

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str | None = None,
        kind: str = JobKind.PATHWAYS_JOB.value,
        kubernetes_conn_id: str | None = "kubernetes_default",
        cluster_context: str | None = None,
        config_file: str | None = None,
        in_cluster: bool | None = None,
        wait_for_deletion: bool = True,
        deletion_timeout: float = 300.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_kind(kind)
        self.job_name = job_name
        self.namespace = namespace
        self.kind = kind
        self.kubernetes_conn_id = kubernetes_conn_id
        self.cluster_context = cluster_context
        self.config_file = config_file
        self.in_cluster = in_cluster
        self.wait_for_deletion = wait_for_deletion
        self.deletion_timeout = deletion_timeout

    @cached_property
    def hook(self) -> PathwaysJobHook:
        from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

        return PathwaysJobHook.for_task(self)

    def execute(self, context: Context) -> bool:
        if not self.job_name:
            raise AirflowFailException("job_name: empty; pass the name of the job to delete")
        namespace = self.hook.resolve_namespace(self.namespace)
        kind = JobKind(self.kind)
        deleted = self.hook.delete_job(self.job_name, namespace, kind)
        if not deleted:
            self.log.info("%s %s/%s is already gone", self.kind, namespace, self.job_name)
            return False
        self.log.info("Deleting %s %s/%s", self.kind, namespace, self.job_name)
        if self.wait_for_deletion:
            self.hook.wait_until_deleted(self.job_name, namespace, kind, self.deletion_timeout)
            self.log.info("%s %s/%s is gone", self.kind, namespace, self.job_name)
        return True


DELETE_EVENTS = frozenset({"success", "failure", "kill"})


def _seconds(value: timedelta | float | None) -> float | None:
    return value.total_seconds() if isinstance(value, timedelta) else value


class PathwaysJobOperator(FollowedJob, MeasuredPathwaysJob, ReattachingJobOperator):
    """
    Create a PathwaysJob (or the equivalent plain JobSet) and follow it.

    Every try that creates a job logs the manifest it sends (as YAML) and pushes it to XCom under
    ``submitted_manifest``, secrets masked (a try that reattaches to an earlier try's job sends none).

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
        the queued job is deleted so that it does not start later unwatched. A job Kueue evicted
        before it ever started (``PodsReadyTimeout``) has waited since it was first queued, its
        time admitted without ready pods included; checked while it is queued.
    :param dry_run: render and check the manifest, log it and push it to XCom
        (``submitted_manifest``), and succeed without creating anything or waiting. The namespace
        given nowhere else is read from the connection (no API call).
    :param checkpoint_dir: the ``gs://`` location the program writes its checkpoints to (templated);
        only reported, as an OpenLineage output dataset beside the spec's ``pathwaysDir``.
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
        "checkpoint_dir",
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
        dry_run: bool = False,
        checkpoint_dir: str | None = None,
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
        if not isinstance(dry_run, bool):
            raise TypeError(f"dry_run: expected True or False, got {type(dry_run).__name__}")
        #: ``dry_run`` as given (``BaseOperator.dry_run`` is a method).
        self.is_dry_run = dry_run
        self.checkpoint_dir = checkpoint_dir
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
            self, main_container=self.spec.controller.main_container_name if self._spec else MAIN_CONTAINER
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
                left_running=self.left_running_when(),
                deployment=deployment_name(),
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

    def left_running_when(self) -> frozenset[str]:
        """The task instance states in which this task leaves its job running (a sweep reads them
        from the job): ``success`` when it hands the job on (``wait_until`` created or ready), and
        what ``delete_on`` keeps."""
        return left_running_when(
            hands_on=self.wait_until != WaitUntil.FINISHED.value,
            ends_on_kill="kill" in self.delete_on,
            ends_on_failure="failure" in self.delete_on,
        )

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
        if self.is_dry_run:
            return self._dry_run(context)
        self.start_try(context)
        return self.run_job(context)

    def _dry_run(self, context: Context) -> dict[str, Any]:
        """Show the manifest a real run would create; nothing is sent."""
        spec = self.spec
        self.show_manifest(
            context,
            manifest_for(spec, self.kind),
            f"Dry run: {self.kind} {spec.namespace}/{spec.name} would be created (nothing was created)",
            dry_run=True,
        )
        return {"dry_run": True, "name": spec.name, "namespace": spec.namespace, "kind": self.kind}

    def dry_run(self) -> None:
        """Print the manifest as YAML, as ``KubernetesPodOperator.dry_run()`` prints its pod: outside
        a task run, its name and task labels are those of a run with id ``dry_run``."""
        spec = self.build_spec(placeholder_context(self))
        print(as_yaml(masked_text(manifest_for(spec, self.kind))))

    def recall_outcome(self, outcome: JsonValue) -> PathwaysJobStatus | None:
        return PathwaysJobStatus.from_dict(outcome) if isinstance(outcome, dict) else None

    def follow_job(self, external_id: JsonValue, context: Context) -> Any:
        self._job = JobRef.from_id(external_id, self.kind) if self._job is None else self._job
        self.follow_mark()
        self._push_identity(context)
        if self.wait_until == WaitUntil.CREATED.value:
            self.leave_running(context)
            return self._result(self.job_status())
        deadline = task_deadline(self, context, self.wait_timeout)
        if self.deferrable:
            over = self._wait_already_over()
            if over is not None:  # nothing to wait for: the trigger would fire at once
                return self.finish_job(context, external_id, over)
            self._defer(context, deadline)
        return self.finish_job(context, external_id, self._poll(context, deadline))

    def _wait_already_over(self) -> PathwaysJobStatus | None:
        """The job's status when the wait is already over (a reattach to a ready or ended job), else
        None (also when it cannot be read now: the trigger rides that out). Deferring then would
        make the trigger fire within a second, and Airflow 3.3's scheduler fails a task whose
        trigger fires before it has processed the deferral's exit (apache/airflow#72716)."""
        try:
            status = self.job_status()
        except Exception:
            return None
        over = wait_is_over(
            status,
            wait_until=self.wait_until,
            min_slices=self.required_slices(self.spec),
            fail_on_suspend=self.fail_on_suspend,
        )
        return status if over else None

    def _defer(self, context: Context, deadline: Deadline) -> None:
        from airflow_provider_pathways.triggers.pathways_job import PathwaysJobTrigger

        self.stop_if_ended_meanwhile(context)
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
                metric_tags=self.metric_tags(context),
            ),
            method_name="execute_complete",
            kwargs=deferred_by(context),
        )

    def _poll(self, context: Context, deadline: Deadline) -> PathwaysJobStatus:
        from airflow_provider_pathways.hooks.kubernetes import is_transient

        need = self.required_slices(self.spec) if self.wait_until == WaitUntil.READY.value else None
        last: list[PathwaysJobStatus | None] = [None]

        def look() -> PathwaysJobStatus | None:
            status = self.job_status()
            self._status = status
            self.observe_usage(context, status)
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
        """``failure`` in ``delete_on``, or the job is queued now (read again: the wait may have
        ended without a status, as a trigger's timeout from an older version does)."""
        if "failure" in self.delete_on:
            return True
        with contextlib.suppress(Exception):  # unreadable: judged by the last status seen
            self._status = self.job_status()
        return self._is_queued()

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
        raise PathwaysQueueTimeout(
            f"{status.namespace}/{status.name} waited in LocalQueue {status.queue} for {waited}, "
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
        self.resume_usage(event)
        if self._job is None:  # kept before this try deferred; without a task_state_store, every
            # event of the trigger names the job it followed
            self._job = JobRef.from_id(event.get("followed"), self.kind)
        if self._job is None and event.get("status") == "timeout":  # nothing of the deferral came back
            self._job = self.own_job()
        seen = PathwaysJobStatus.from_dict(event["job"]) if isinstance(event.get("job"), dict) else None
        self._status = seen or self._status  # the last status the trigger saw
        if event.get("status") == "queue_timeout" and seen is not None:
            self._give_up_queued(context, seen)
        if event.get("status") == "error" and event.get(CONNECTION_TO_FIX):
            # e.g. the credentials got no new token in the triggerer: the try fails for good, as polling
            from airflow_provider_pathways.hooks.kubernetes_google import GkeConnectionError

            self.fail_for_good(context, GkeConnectionError(event.get("message") or f"{event!r}"))
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
        self.report_usage(context, status, self.followed.uid or str(self.followed))
        if wait_succeeded(status, self.wait_until):
            if status.phase is Phase.SUCCEEDED:
                self.remember_outcome(context, Verdict.SUCCEEDED, status.to_dict())
                if "success" in self.delete_on:
                    self._clean_up("succeeded")
            else:  # ready, or created: it goes on serving after the task
                self.leave_running(context)
            return self._result(status)
        early = ended_before_ready(status, self.wait_until)
        failure = status.failure or FailureClass.UNKNOWN
        reason = "ended before it was ready" if early else f"failed: {failure.value}"
        error = AirflowFailException(early) if early else PathwaysJobFailed.for_class(
            failure,
            f"{status.namespace}/{status.name}: {status.message or status.phase.value}",
            job=status.name,
            exit_code=status.exit_code,
        )  # fmt: skip
        released = None
        if "failure" in self.delete_on:  # a retry submits a fresh job
            released = self._clean_up(reason, forget=context)
        elif status.phase is Phase.SUSPENDED and not self._will_retry(context, error):
            # the last try: once resumed it would run with nobody watching
            released = self._clean_up("suspended, and no retry follows", forget=context)
        if released is None:  # kept: a new try judges it again, and never stops at this reported failure
            # (a suspended job runs again once resumed: a new try reports its own end)
            self.remember_outcome(context, Verdict.FAILED, left_running=status.phase is Phase.SUSPENDED)
        raise error

    def job_in_hand(self) -> JsonValue | None:
        return self._job.to_id() if self._job is not None else super().job_in_hand()

    def end_killed_job(self) -> None:
        """Delete the job of a killed try (always while queued), as its owner."""
        self.release("task killed")
