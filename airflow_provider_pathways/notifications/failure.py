"""A notifier for ``on_failure_callback`` and ``on_retry_callback`` that says why a Pathways task
failed (preemption, queue timeout, infrastructure, the user's program, ...), what the next try will
do, and the TPU-hours spent and lost to preemption so far.

It writes one line to the task log and hands the same notice to the notifiers it wraps, in their
context as ``pathways_failure`` (so a ``SlackNotifier(text="{{ pathways_failure.text }}")`` sends
it), and to ``send`` if given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.notifier import BaseNotifier
from airflow.providers.common.compat.sdk import AirflowTaskTimeout

from airflow_provider_pathways.failures import (
    PathwaysInfrastructureFailure,
    PathwaysJobFailed,
    PathwaysMaxRestartsReached,
    PathwaysOutcomeUnknown,
    PathwaysPreempted,
    PathwaysQueueTimeout,
    PathwaysSpecRejected,
    PathwaysUserProgramFailed,
    PathwaysWatchLost,
)
from airflow_provider_pathways.tpu_hours import TPU_HOURS_KEY
from airflow_provider_pathways.transient import ConnectionToFix

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

#: The notice's ``kind`` of each failure, most specific first, and what a retry does about it.
KINDS: tuple[tuple[type[BaseException], str, str], ...] = (
    (PathwaysPreempted, "preemption", "submits a fresh job (the preempted one is deleted)"),
    (PathwaysQueueTimeout, "queue timeout", "submits a fresh job (the queued one was deleted)"),
    (PathwaysWatchLost, "lost sight of the job", "reattaches to the job, which was kept running"),
    (PathwaysInfrastructureFailure, "infrastructure", "submits a fresh job"),
    (PathwaysMaxRestartsReached, "restarts used up", "submits a fresh job"),
    (PathwaysUserProgramFailed, "user program", "runs the program again"),
    (PathwaysSpecRejected, "spec rejected", "submits the spec again"),
    (PathwaysOutcomeUnknown, "outcome unknown", "submits a fresh job"),
    (ConnectionToFix, "connection to fix", "signs in again"),
    (AirflowTaskTimeout, "execution timeout", "submits a fresh job"),
)
OTHER = "other"


@dataclass(frozen=True)
class FailureNotice:
    """What a failure notice says: the task instance, the kind of failure, what the next try does,
    and the task's TPU-hours so far (None: not known)."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int
    kind: str
    error: str
    next_try: str
    tpu_hours: float | None = None
    tpu_hours_lost: float | None = None

    @property
    def text(self) -> str:
        index = f"[{self.map_index}]" if self.map_index >= 0 else ""
        usage = ""
        if self.tpu_hours is not None:
            usage = f" TPU-hours so far: {self.tpu_hours:.4f}"
            if self.tpu_hours_lost:
                usage += f", {self.tpu_hours_lost:.4f} lost to preemption"
            usage += "."
        return (
            f"{self.dag_id}.{self.task_id}{index} (run {self.run_id}) try {self.try_number} failed: "
            f"{self.kind}: {self.error}. {self.next_try}.{usage}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.text}


def failure_kind(error: BaseException | None) -> tuple[str, str]:
    """The notice's kind of ``error`` and what a retry does about it."""
    for exception_type, kind, retry in KINDS:
        if isinstance(error, exception_type):
            return kind, retry
    if isinstance(error, PathwaysJobFailed):
        return error.failure_class.value.replace("_", " "), "submits a fresh job"
    return OTHER, "runs the task again"


def failure_notice(context: Mapping[str, Any]) -> FailureNotice:
    """The notice of the failed try in ``context`` (an ``on_failure_callback``'s or an
    ``on_retry_callback``'s)."""
    ti = context["ti"]
    error = context.get("exception")
    kind, retry = failure_kind(error if isinstance(error, BaseException) else None)
    try_number = int(getattr(ti, "try_number", 0) or 0)
    if str(getattr(ti, "state", "") or "").lower().endswith("up_for_retry"):
        next_try = f"Try {try_number + 1} {retry}"
    elif isinstance(error, PathwaysJobFailed) and error.failure_class.final:
        next_try = f"No further try: a failure of this kind ({kind}) is not retried"
    else:
        next_try = "No further try: its retries are used up"
    map_index = getattr(ti, "map_index", None)
    map_index = -1 if map_index is None else int(map_index)
    usage = _tpu_hours(ti, map_index)
    first_line = str(error).strip().splitlines()[0] if error is not None and str(error).strip() else ""
    return FailureNotice(
        dag_id=ti.dag_id,
        task_id=ti.task_id,
        run_id=ti.run_id,
        map_index=map_index,
        try_number=try_number,
        kind=kind,
        error=first_line or type(error).__name__,
        next_try=next_try,
        tpu_hours=_number(usage.get("total")),
        tpu_hours_lost=_number(usage.get("lost_to_preemption")),
    )


def _tpu_hours(ti: Any, map_index: int) -> dict[str, Any]:
    """The TPU-hours the task pushed, or nothing."""
    try:
        pulled = ti.xcom_pull(task_ids=ti.task_id, key=TPU_HOURS_KEY, map_indexes=map_index)
    except Exception:
        return {}
    return pulled if isinstance(pulled, dict) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class PathwaysFailureNotifier(BaseNotifier):
    """
    Tell what kind of failure a Pathways task met and what its next try will do.

    Use as ``on_failure_callback`` and ``on_retry_callback`` (of a task, or in ``default_args``).
    Each call writes the notice to the task log (a warning), then calls each of ``notifiers`` with
    the notice in its context as ``pathways_failure`` (a dict with ``kind``, ``next_try``,
    ``tpu_hours``, ``tpu_hours_lost``, ``text``, ...), then ``send(notice)`` if given. A notifier
    that fails is logged; the others still run.

    :param notifiers: further notifiers (e.g. Slack, SMTP) whose templates may use
        ``{{ pathways_failure.text }}``.
    :param send: a callable taking the :class:`FailureNotice`.
    """

    def __init__(
        self,
        notifiers: Sequence[BaseNotifier] = (),
        send: Callable[[FailureNotice], None] | None = None,
    ) -> None:
        super().__init__()
        self.notifiers = list(notifiers)
        self.send = send

    def notify(self, context: Context) -> None:
        notice = failure_notice(context)
        self.log.warning("%s", notice.text)
        context["pathways_failure"] = notice.to_dict()  # type: ignore[typeddict-unknown-key]
        for notifier in self.notifiers:
            try:
                notifier(context)
            except Exception as err:
                self.log.warning("Notifier %s failed: %s", type(notifier).__name__, err)
        if self.send is not None:
            try:
                self.send(notice)
            except Exception as err:
                self.log.warning("Sending the failure notice failed: %s", err)
