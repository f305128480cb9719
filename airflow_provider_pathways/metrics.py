"""The provider's metrics, sent through Airflow's own ``Stats`` (StatsD, DogStatsD or OpenTelemetry,
as Airflow's ``[metrics]`` section says; nothing when metrics are off).

Every metric's name, type, unit and tags are here (:data:`METRICS`), and docs/metrics.rst's table
is checked against them. Sending a metric never fails a task: an error is logged at debug level.
Triggers send through :func:`a_emit`: the first metric of a process off the event loop (building
the StatsD client resolves its host), the next in line (a UDP datagram handed to the socket).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from functools import cache
from typing import Any

log = logging.getLogger(__name__)

#: The tags of a task's metrics (``tpu_type`` only where it is known).
TASK_TAGS = ("dag_id", "task_id", "backend", "tpu_type")
#: The tags of the compilation-cache cleanup's metrics.
CACHE_TAGS = ("dag_id", "task_id")


class MetricType(str, Enum):
    COUNTER = "counter"
    TIMER = "timer"
    GAUGE = "gauge"


@dataclass(frozen=True)
class Metric:
    """One metric: its name (Airflow's ``[metrics] statsd_prefix`` goes before it), type, unit, tags
    and what it measures."""

    name: str
    type: MetricType
    unit: str
    tags: tuple[str, ...]
    description: str


QUEUE_WAIT = Metric(
    "pathways.queue_wait",
    MetricType.TIMER,
    "ms",
    TASK_TAGS,
    "From the job's submission to its start: GKE, creation to when its JobSet began creating its "
    "Jobs (``StartupPolicyInProgress``: admitted) or, without that record, first seen running, once "
    "per job and observer; Slurm, the job's SubmitTime to StartTime",
)
TIME_TO_READY = Metric(
    "pathways.time_to_ready",
    MetricType.TIMER,
    "ms",
    TASK_TAGS,
    "From the job's submission to when ``min_slices`` slices (default: all) and the head were first "
    "seen ready, or for all slices the JobSet's ``StartupPolicyCompleted`` if earlier (Slurm: the "
    "service job's SubmitTime to the look that found it ready)",
)
TIME_TO_FINISH = Metric(
    "pathways.time_to_finish",
    MetricType.TIMER,
    "ms",
    TASK_TAGS,
    "From the job's submission to its end: GKE, to its JobSet's ``Completed``/``Failed`` condition, "
    "else first seen ended (suspended or gone); Slurm, SubmitTime to EndTime",
)
PREEMPTIONS = Metric(
    "pathways.preemptions",
    MetricType.COUNTER,
    "tries",
    TASK_TAGS,
    "+1 for each try whose job was preempted (a slice or the JobSet lost to preemption or eviction)",
)
RESTARTS = Metric(
    "pathways.restarts",
    MetricType.COUNTER,
    "restarts",
    TASK_TAGS,
    "The job's restarts seen when a try's wait ended (GKE: the JobSet's ``status.restarts`` plus its "
    "single Jobs' ``jobRestarts``; Slurm: its requeues); sent when not 0",
)
TRIES_REPLACED = Metric(
    "pathways.tries_replaced",
    MetricType.COUNTER,
    "tries",
    TASK_TAGS,
    "+1 each time a newer try took over the job an earlier try followed (reattached to it)",
)
TPU_HOURS = Metric(
    "pathways.tpu_hours",
    MetricType.GAUGE,
    "chip-hours",
    TASK_TAGS,
    "The TPU chip-hours of the try that just ended, when known (see *TPU-hours*)",
)
CACHE_BYTES_FREED = Metric(
    "pathways.cache.bytes_freed",
    MetricType.COUNTER,
    "bytes",
    CACHE_TAGS,
    "Bytes of compilation-cache objects the cleanup deleted",
)
CACHE_OBJECTS_FREED = Metric(
    "pathways.cache.objects_freed",
    MetricType.COUNTER,
    "objects",
    CACHE_TAGS,
    "Compilation-cache objects the cleanup deleted",
)
TRIGGER_RECONNECTS = Metric(
    "pathways.trigger.reconnects",
    MetricType.COUNTER,
    "reconnects",
    ("dag_id", "task_id", "backend"),
    "+1 each time a deferred wait reached its API again after an outage (the Kubernetes API server, "
    "slurmrestd or sshd); a watch cut by its peer and reopened at once is no outage",
)

METRICS: tuple[Metric, ...] = (
    QUEUE_WAIT,
    TIME_TO_READY,
    TIME_TO_FINISH,
    PREEMPTIONS,
    RESTARTS,
    TRIES_REPLACED,
    TPU_HOURS,
    CACHE_BYTES_FREED,
    CACHE_OBJECTS_FREED,
    TRIGGER_RECONNECTS,
)


@cache
def _stats() -> Any:
    """Airflow's ``Stats``: through common-compat where it offers it (Airflow 3.3: the task SDK's),
    else where this Airflow keeps it."""
    try:
        from airflow.providers.common.compat.sdk import Stats

        return Stats
    except (ImportError, AttributeError):
        pass
    try:
        from airflow.observability.stats import Stats  # type: ignore[no-redef,assignment]
    except ImportError:
        from airflow.stats import Stats  # type: ignore[no-redef]
    return Stats


def task_tags(ti: Any, **tags: str | None) -> dict[str, str]:
    """``dag_id`` and ``task_id`` of a task instance (a trigger's too), with ``tags``; unknown values
    left out."""
    known = {"dag_id": getattr(ti, "dag_id", None), "task_id": getattr(ti, "task_id", None), **tags}
    return {key: str(value) for key, value in known.items() if value is not None}


def emit(metric: Metric, value: float, tags: Mapping[str, str]) -> None:
    """Send ``value`` (seconds for a timer) with the metric's tags that ``tags`` gives; never raises."""
    try:
        sent = {key: tags[key] for key in metric.tags if tags.get(key) is not None}
        stats = _stats()
        if metric.type is MetricType.COUNTER:
            stats.incr(metric.name, int(value), tags=sent)
        elif metric.type is MetricType.TIMER:
            stats.timing(metric.name, timedelta(seconds=value), tags=sent)
        else:
            stats.gauge(metric.name, value, tags=sent)
    except Exception as err:
        log.debug("Could not send metric %s: %s", metric.name, err)


_client_built = False


async def a_emit(metric: Metric, value: float, tags: Mapping[str, str]) -> None:
    """:func:`emit` for a trigger: the process's first metric in a thread (building Airflow's client
    may resolve the StatsD host), the next ones in line (a StatsD or DogStatsD datagram is handed
    to the socket without waiting; OpenTelemetry records in memory and exports from its own
    thread)."""
    global _client_built
    if _client_built:
        emit(metric, value, tags)
        return
    try:
        await asyncio.to_thread(emit, metric, value, tags)
        _client_built = True
    except Exception as err:  # e.g. no thread left at interpreter shutdown
        log.debug("Could not send metric %s: %s", metric.name, err)


#: The metric a newly reached milestone of :class:`~airflow_provider_pathways.tpu_hours.Timeline` sends.
MILESTONE_METRICS = {"running": QUEUE_WAIT, "ready": TIME_TO_READY, "ended": TIME_TO_FINISH}
