"""What the provider uses that only some Airflow versions have, and what it does without it.

The provider installs on Airflow 2.11 and every 3.x. Each feature below arrived in the version
named; on older versions the provider degrades as ``without`` says (the docs' compatibility table
is generated from :data:`FEATURES`). Imports that only moved between versions go through
``apache-airflow-providers-common-compat`` instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_3_PLUS

#: ``retry_policy`` on operators (``airflow.sdk.definitions.retry_policy``).
RETRY_POLICIES: bool = AIRFLOW_V_3_3_PLUS
#: ``BaseTrigger.on_kill``, called when a user kills a deferred task.
TRIGGER_ON_KILL: bool = AIRFLOW_V_3_3_PLUS


#: The keyword the operators and sensors defer with: the try that deferred. Airflow 3.0 (and early
#: 3.1 releases) keep ``next_method`` and ``next_kwargs`` across a retry (apache/airflow#56704), so
#: a retry resumes with the trigger event of the try before it instead of starting afresh.
DEFERRED_BY_TRY = "deferred_by_try"


def deferred_by(context: Mapping[str, Any]) -> dict[str, Any]:
    """The ``kwargs`` of a deferral: the try that defers."""
    return {DEFERRED_BY_TRY: getattr(context.get("ti"), "try_number", None)}


def inherited_default_args(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The ``default_args`` a task made with ``Operator.partial(**kwargs)`` inherits: its DAG's, its
    task group's, then its own (Airflow merges them only inside ``partial()``, after filling its own
    defaults)."""
    try:
        from airflow.sdk.definitions._internal.contextmanager import DagContext, TaskGroupContext
    except ImportError:  # Airflow 2
        from airflow.models.dag import DagContext  # type: ignore[no-redef]
        from airflow.utils.task_group import TaskGroupContext  # type: ignore[no-redef]
    # Airflow 2 names them get_current_dag and get_current_task_group
    current_dag = getattr(DagContext, "get_current", None) or DagContext.get_current_dag
    current_group = (
        getattr(TaskGroupContext, "get_current", None) or TaskGroupContext.get_current_task_group  # type: ignore[attr-defined]
    )
    dag = kwargs.get("dag") or current_dag()
    group = kwargs.get("task_group") or (current_group(dag) if dag else None)
    inherited: dict[str, Any] = dict(getattr(dag, "default_args", None) or {})
    inherited.update(getattr(group, "default_args", None) or {})
    inherited.update(kwargs.get("default_args") or {})
    return inherited


#: The ``next_method`` of a deferred task instance the scheduler resumes only to fail it, and the
#: ``next_kwargs["error"]`` that says its trigger timed out (Airflow 2's, Airflow 3's).
TRIGGER_FAIL = "__fail__"
TRIGGER_TIMEOUT_ERRORS = frozenset({"Trigger/execution timeout", "Trigger timeout"})


def resumed_at_execution_timeout(
    context: Mapping[str, Any], execution_timeout: timedelta | None
) -> dict[str, Any] | None:
    """On Airflow 2, when this try resumes from a deferral that its ``execution_timeout`` ended: the
    keyword arguments of the operator's resume method, the event a ``timeout`` one
    (``reason="execution_timeout"``) that keeps what the trigger's event said of the job; else None.

    Airflow 2 sets a deferral's trigger timeout to the try's start plus ``execution_timeout``, the
    moment the trigger's own deadline is, and resumes the try with ``__fail__`` when its scheduler sees
    it pass before the trigger's timeout event arrives (then the deferral's arguments are gone). Either
    way the try resumes past its ``execution_timeout``, and Airflow 2 fails it with
    ``AirflowTaskTimeout`` before the resume method runs, calling ``on_kill`` instead. A trigger's
    failure (``__fail__`` for another reason) is left to Airflow. Airflow 3 (3.0 to 3.3) sets a
    deferral's trigger timeout from the ``timeout`` of ``defer()`` only (which the operators never
    pass) and runs a resumed try's resume method: always None there.
    """
    if AIRFLOW_V_3_0_PLUS or not execution_timeout:
        return None
    ti = context.get("ti")
    next_method = getattr(ti, "next_method", None)
    if not next_method:
        return None
    kwargs: dict[str, Any] = dict(getattr(ti, "next_kwargs", None) or {})
    event: dict[str, Any] = {}
    if next_method == TRIGGER_FAIL:
        if kwargs.get("error") not in TRIGGER_TIMEOUT_ERRORS:
            return None
        kwargs = {}
    else:
        got = kwargs.pop("event", None)
        event = dict(got) if isinstance(got, Mapping) else {}
        timed_out = event.get("status") == "timeout" and event.get("reason") == "execution_timeout"
        start = getattr(ti, "start_date", None)
        past = isinstance(start, datetime) and datetime.now(timezone.utc) - start >= execution_timeout
        if not (timed_out or past):
            return None
    timeout = {"status": "timeout", "reason": "execution_timeout", "message": "the wait timed out"}
    return {**kwargs, "event": {**event, **timeout}}


def resumed_by_an_earlier_try(context: Mapping[str, Any], kwargs: Mapping[str, Any], log: Any) -> bool:
    """Whether this resumption carries an earlier try's trigger event (logged): the try must start
    afresh."""
    deferred = kwargs.get(DEFERRED_BY_TRY)
    current = getattr(context.get("ti"), "try_number", None)
    if deferred is None or current is None or deferred == current:
        return False
    log.warning(
        "Try %s was resumed with the trigger event of try %s (Airflow keeps it across retries before "
        "3.1): starting this try afresh",
        current,
        deferred,
    )
    return True


@dataclass(frozen=True)
class Feature:
    """One Airflow feature the provider uses: since which version, and the provider without it."""

    name: str
    since: str
    with_it: str
    without: str


FEATURES: tuple[Feature, ...] = (
    Feature(
        "Preemption budget",
        "3.3",
        "``PathwaysRetryPolicy``: preemption and infrastructure failures are retried with "
        "exponential backoff; with no ``retries`` set, other failures are not retried",
        "program failures, refused specs and unknown outcomes raise ``AirflowFailException`` "
        "(never retried); the rest uses the task's ``retries`` and ``retry_delay``; with no "
        "``retries`` set the task gets ``preemption_retries``; ``PathwaysRetryPolicy`` is refused",
    ),
    Feature(
        "Reattach after a crash",
        "3.3",
        "the job's id is kept in ``task_state_store``: a retry follows it, reports a success "
        "again, and never stops at a failure an earlier try reported",
        "a retry finds a still-running job of its task instance by its owner labels (GKE) or "
        "the task instance's marker in the job's comment (Slurm) and follows it; an ended job is "
        "not judged again and a fresh job is submitted",
    ),
    Feature(
        "Deferred kill",
        "3.3",
        "``BaseTrigger.on_kill``: marking a deferred task failed or success, or clearing it, "
        "deletes or cancels its job (``delete_on``/``cancel_on_kill``)",
        "the trigger asks for its task instance's state when it is cancelled (as cncf-kubernetes "
        "and the google provider do) and deletes or cancels the job unless the task is still "
        "deferred (a triggerer that stops or hands the trigger over)",
    ),
    Feature(
        "Retry after a deferred try",
        "3.1",
        "a retry starts from ``execute``",
        "Airflow 3.0 resumes a retry with the trigger event of the try before it "
        "(apache/airflow#56704); the operators and sensors defer with the try's number and start "
        "such a retry afresh",
    ),
)


def store_for_good(store: Any, key: str, value: Any) -> None:
    """``store.set(key, value)`` on a ``task_state_store`` (Airflow 3.3), the key kept until the
    task instance goes: the default ``[state_store] default_retention_days`` (30) would drop the job
    id of a job that runs longer, or of a task cleared later, and its next try would take the job
    for lost. ``retention`` and ``NEVER_EXPIRE`` arrived with the store itself."""
    from airflow.sdk.execution_time.context import NEVER_EXPIRE

    store.set(key, value, retention=NEVER_EXPIRE)
