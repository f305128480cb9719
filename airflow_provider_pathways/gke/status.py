"""The status of a Pathways job as the provider reports it: its phase, slices, failure class and
the times it moved between them (plain values, also what the triggers send; read from the cluster
by :mod:`.summary`), and the one judgement of the job an operator makes from it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

from airflow_provider_pathways.outcomes import FailureClass, JobJudgement, known_fields

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"


class Phase(str, Enum):
    """Where a Pathways job stands."""

    PENDING = "pending"
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    SUSPENDED = "suspended"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    #: Being deleted (``metadata.deletionTimestamp`` set): it will not run to its end.
    TERMINATING = "terminating"
    DELETED = "deleted"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.TERMINATING, Phase.DELETED)


@dataclass(frozen=True)
class PathwaysJobStatus:
    """What a user needs to know about a Pathways job at one moment."""

    name: str
    namespace: str
    phase: Phase
    slices_ready: int = 0
    slices_total: int = 0
    head_ready: bool = False
    restarts: int = 0
    failure: FailureClass | None = None
    message: str = ""
    exit_code: int | None = None
    conditions: tuple[str, ...] = field(default=())
    #: The Kueue LocalQueue (``kueue.x-k8s.io/queue-name``) when the job is queued through Kueue.
    queue: str | None = None
    #: When the job entered (or re-entered) the queue, RFC 3339; set while it is queued.
    queued_since: str | None = None

    @property
    def terminal(self) -> bool:
        return self.phase.terminal

    def ready_for(self, min_slices: int) -> bool:
        """True when the head is ready and at least ``min_slices`` worker slices are ready."""
        return (
            not self.terminal
            and self.phase not in (Phase.SUSPENDED, Phase.QUEUED)
            and self.head_ready
            and self.slices_ready >= min_slices
        )

    def queued_for(self, now: float | None = None) -> float | None:
        """Seconds the job has been queued, or None when it is not queued."""
        if self.phase is not Phase.QUEUED or not self.queued_since:
            return None
        since = parse_time(self.queued_since)
        return None if since is None else max(0.0, (time.time() if now is None else now) - since)

    def progress(self, min_slices: int | None = None, now: float | None = None) -> str:
        """One log line, e.g. ``slices ready 2/4, need 3; head ready; restarts 0; phase starting``,
        or ``queued in LocalQueue multislice-queue for 12 min; ...`` while Kueue holds the job."""
        need = f", need {min_slices}" if min_slices is not None else ""
        head = "head ready" if self.head_ready else "head not ready"
        queued = ""
        if self.phase is Phase.QUEUED:
            waited = self.queued_for(now)
            queued = f"queued in LocalQueue {self.queue or '?'}"
            queued += f" for {format_duration(waited)}; " if waited is not None else "; "
        line = (
            f"{self.namespace}/{self.name}: {queued}slices ready {self.slices_ready}/{self.slices_total}"
            f"{need}; {head}; restarts {self.restarts}; phase {self.phase.value}"
        )
        return f"{line}: {self.message}" if self.message else line

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form for XCom and trigger events."""
        data = asdict(self)
        data["phase"] = self.phase.value
        data["failure"] = self.failure.value if self.failure else None
        data["conditions"] = list(self.conditions)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PathwaysJobStatus:
        """Inverse of :meth:`to_dict`; keys a newer version added are ignored, and a failure class
        it added reads as ``unknown``."""
        values = known_fields(cls, data)
        values["phase"] = Phase(values["phase"])
        failure = values.get("failure")
        values["failure"] = _failure_class(failure) if failure else None
        values["conditions"] = tuple(values.get("conditions") or ())
        return cls(**values)


def _failure_class(value: str) -> FailureClass:
    try:
        return FailureClass(value)
    except ValueError:
        return FailureClass.UNKNOWN


def parse_time(stamp: object) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp as the API server writes them; None if unreadable."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``2 h 5 min``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def judge_status(status: PathwaysJobStatus) -> JobJudgement:
    """Succeeded, failed with its class (a terminating or deleted job is an infrastructure
    failure), or active (also suspended: it runs again once resumed, so a new try follows it
    rather than start a second one)."""
    if status.phase is Phase.SUCCEEDED:
        return JobJudgement.succeeded(status.message)
    if status.terminal:
        return JobJudgement.failed(status.failure or FailureClass.UNKNOWN, status.message)
    return JobJudgement.active(status.progress())
