"""What the operators measure of their jobs: the milestones a PathwaysJobOperator sees as metrics,
and each try's TPU-hours on any backend (in the task log, XCom ``tpu_hours`` and, from Airflow 3.3,
kept across tries in the task's ``task_state_store``)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from airflow_provider_pathways import metrics
from airflow_provider_pathways.airflow_features import store_for_good
from airflow_provider_pathways.gke.objects import QUEUE_NAME_LABEL
from airflow_provider_pathways.gke.status import observe_status
from airflow_provider_pathways.lineage import PathwaysRun, operator_lineage
from airflow_provider_pathways.reattach_rules import FailureClass
from airflow_provider_pathways.tpu_hours import TPU_HOURS_KEY, Timeline, TpuHours, TryUsage, tpu_hours

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context
    from airflow.sdk.types import Logger

    from airflow_provider_pathways.gke.spec import PathwaysJobSpec
    from airflow_provider_pathways.gke.status import PathwaysJobStatus


def spec_tpu(spec: PathwaysJobSpec) -> tuple[str | None, int | None]:
    """The spec's TPU type (device type, else machine type) and chips per slice (None if unknown)."""
    try:
        shape = spec.slice_shape
        chips: int | None = shape.vms_per_slice * shape.chips_per_vm
    except Exception:  # a machine type nobody knows: the spec's validation says so, not this
        chips = None
    return spec.device_type or spec.workers.type or None, chips


def record_try_usage(context: Context, this: TryUsage, tags: dict[str, str], log: Logger) -> TpuHours:
    """A try's end, on any backend: send its TPU-hours (when known), add it to the earlier tries'
    kept in the task's ``task_state_store`` (Airflow 3.3+), push the tries' TPU-hours as XCom
    ``tpu_hours`` and log one summary line; the tries' TPU-hours."""
    if this.tpu_hours is not None:
        metrics.emit(metrics.TPU_HOURS, this.tpu_hours, tags)
    store = context.get("task_state_store")
    earlier: list[TryUsage] = []
    if store is not None:
        with contextlib.suppress(Exception):
            kept: Any = store.get(TPU_HOURS_KEY) or {}
            earlier = [TryUsage.from_dict(t) for t in kept.get("tries") or []]
    # before Airflow 3.3 (no task_state_store) nothing of the earlier tries is kept: the total is
    # this try's, marked a lower bound
    unrecorded = 0 if store is not None else max(0, this.try_number - 1)
    usage = tpu_hours([*(t for t in earlier if t.try_number != this.try_number), this], unrecorded)
    if store is not None:
        with contextlib.suppress(Exception):
            store_for_good(store, TPU_HOURS_KEY, {"tries": [t.to_dict() for t in usage.tries]})
    context["ti"].xcom_push(key=TPU_HOURS_KEY, value=usage.to_dict())
    log.info("%s", usage.summary(this.try_number))
    return usage


def emit_milestones(reached: tuple[str, ...], timeline: Timeline, tags: dict[str, str]) -> None:
    """Send the timer of each milestone newly reached (when the submission time is known)."""
    for milestone in reached:
        seconds = timeline.since_submitted(milestone)
        if seconds is not None:
            metrics.emit(metrics.MILESTONE_METRICS[milestone], seconds, tags)


class MeasuredPathwaysJob:
    """Mixin of :class:`~airflow_provider_pathways.operators.pathways_job.PathwaysJobOperator`."""

    if TYPE_CHECKING:

        @property
        def log(self) -> Logger: ...
        @property
        def spec(self) -> PathwaysJobSpec: ...
        def required_slices(self, spec: PathwaysJobSpec) -> int: ...

        wait_until: str

    metrics_backend: str | None = "gke"
    checkpoint_dir: str | None = None
    queue_name: str | None = None
    _timeline: Timeline | None = None
    _preemptions: int | None = None

    @property
    def timeline(self) -> Timeline:
        if self._timeline is None:
            self._timeline = Timeline()
        return self._timeline

    def metric_tags(self, context: Context | None) -> dict[str, str]:
        ti = context.get("ti") if context is not None else None
        tpu_type = None
        with contextlib.suppress(Exception):  # the spec is resolved in execute()
            tpu_type = spec_tpu(self.spec)[0]
        return metrics.task_tags(ti, backend=self.metrics_backend, tpu_type=tpu_type)

    def observe_usage(self, context: Context, status: PathwaysJobStatus) -> None:
        """Record what ``status`` shows; send the milestones it newly reached."""
        try:
            reached = observe_status(self.timeline, status, self.required_slices(self.spec))
            emit_milestones(reached, self.timeline, self.metric_tags(context))
        except Exception as err:  # measuring never fails the task
            self.log.debug("Could not measure the job: %s", err)

    def resume_usage(self, event: dict[str, Any]) -> None:
        """Take the timeline the trigger kept (it sent the milestones it saw)."""
        self._timeline = Timeline.from_dict(event.get("timeline"))

    def report_usage(self, context: Context, status: PathwaysJobStatus, job: str) -> None:
        """The try's end: its restarts, preemption and TPU-hours as metrics, the tries' TPU-hours in
        XCom ``tpu_hours`` and one summary line in the task log. Never raises."""
        try:
            self._report_usage(context, status, job)
        except Exception as err:
            self.log.debug("Could not report the job's TPU-hours: %s", err)

    def _report_usage(self, context: Context, status: PathwaysJobStatus, job: str) -> None:
        self.observe_usage(context, status)
        tags = self.metric_tags(context)
        ti = context["ti"]
        preempted = status.failure is FailureClass.PREEMPTED
        if status.restarts:
            metrics.emit(metrics.RESTARTS, status.restarts, tags)
        if preempted:
            metrics.emit(metrics.PREEMPTIONS, 1, tags)
        tpu_type, chips = spec_tpu(self.spec)
        timeline = self.timeline
        this = TryUsage(
            try_number=int(getattr(ti, "try_number", 0) or 0),
            job=job,
            tpu_type=tpu_type,
            chips_per_slice=chips,
            slices=self.spec.workers.num_slices,
            started=timeline.started,
            ended=timeline.ended,
            preempted=preempted,
            submitted=timeline.submitted,
            ready=timeline.ready,
            slices_ready=timeline.slices_ready,
            admitted_later=timeline.admitted_later,
        )
        usage = record_try_usage(context, this, tags, self.log)
        self._preemptions = sum(t.preempted for t in usage.tries)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (:mod:`~airflow_provider_pathways.lineage`): the ``pathways`` run facet and the
        spec's ``pathwaysDir`` and ``checkpoint_dir`` as output datasets."""
        spec: PathwaysJobSpec | None = getattr(self, "_spec", None)  # once execute() resolved it
        tpu_type = topology = slices = queue = None
        if spec is not None:
            tpu_type = spec_tpu(spec)[0]
            topology, slices = spec.workers.topology, spec.workers.num_slices
            queue = (spec.labels or {}).get(QUEUE_NAME_LABEL)
        run = PathwaysRun(
            backend="gke",
            tpu_type=tpu_type,
            topology=topology,
            slices=slices,
            queue=queue or self.queue_name,
            preemptions=self._preemptions,
        )
        return operator_lineage(run, (spec.pathways_dir if spec else None, self.checkpoint_dir))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """As :meth:`get_openlineage_facets_on_complete`: a failed try's job wrote there too."""
        return self.get_openlineage_facets_on_complete(task_instance)
