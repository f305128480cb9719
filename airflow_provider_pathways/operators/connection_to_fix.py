"""A wait that meets an error no retry gets past
(:class:`~airflow_provider_pathways.transient.ConnectionToFix`: the connection's credentials
refused, a setting wrong) fails its try for good, and its job is handled as when the task's last
try gives up on it.

A Google identity whose credentials get no new access token in the middle of a wait (a disabled
service account, a deleted key, impersonation rights taken away) is the case: the GKE connection
raises :class:`~airflow_provider_pathways.hooks.kubernetes_google.GkeConnectionError`, in the worker
(polling) or in the triggerer (deferred, whose error event says so). Retried as a lost watch, every
later try would meet the same refusal, and the job would run unwatched until the last one gave up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_pathways.outcomes import KeptJob
from airflow_provider_pathways.transient import ConnectionToFix, describe_error

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

    from airflow_provider_pathways.operators.reattaching import ReattachingJobOperator

_NEVER_RETRIED: dict[type[ConnectionToFix], type[ConnectionToFix]] = {}


def never_retried(error_type: type[ConnectionToFix], message: str) -> ConnectionToFix:
    """An ``error_type`` with ``message`` that Airflow never retries, whatever the task's ``retries``
    and ``retry_policy`` (an ``AirflowFailException`` too, named as ``error_type`` in the task log)."""
    if error_type not in _NEVER_RETRIED:
        _NEVER_RETRIED[error_type] = type(
            error_type.__name__,
            (error_type, AirflowFailException),
            {"__module__": error_type.__module__, "__doc__": f"{error_type.__doc__}\n\nNot retried."},
        )
    return _NEVER_RETRIED[error_type](message)


def fail_if_connection_to_fix(task: ReattachingJobOperator, context: Context, error: BaseException) -> None:
    """:func:`fail_for_good` when ``error`` is a :class:`ConnectionToFix`; nothing otherwise."""
    if isinstance(error, ConnectionToFix):
        fail_for_good(task, context, error)


def fail_for_good(task: ReattachingJobOperator, context: Context, error: ConnectionToFix) -> NoReturn:
    """Fail the try with ``error``, never retried; first end the job the task instance keeps as the
    last try's give-up policy says (:meth:`~ReattachingJobOperator.discards_when_giving_up`), since
    no try will follow it. The failure's message says what became of the job: deleted or
    cancelled; left running, as the policy says; or not deleted either (the same connection is
    refused): then it may still be running and must be ended by hand."""
    store = context.get("task_state_store")
    stored = store.get(task.external_id_key) if store is not None else None
    external_id = KeptJob.from_stored(stored).job if stored is not None else None
    if external_id is None:
        note = ""
    elif not task.discards_when_giving_up():
        note = (
            f"; {task.describe_job(external_id)} is left running, as the task's cleanup policy says "
            "(no try will follow it: end it by hand, or clear the task once the connection works)"
        )
    else:
        try:
            discarded = task.discard_given_up(external_id, context)
        except Exception as err:
            why = "for the same reason" if isinstance(err, type(error)) else f"({describe_error(err)})"
            note = (
                f"; {task.describe_job(external_id)} could not be deleted or cancelled either {why} "
                "and may still be running: end it by hand"
            )
        else:
            note = (
                f"; no try will follow {task.describe_job(external_id)}, so it was deleted or cancelled"
                if discarded
                else f"; {task.describe_job(external_id)} is left to the newer try that follows it"
            )
    raise never_retried(type(error), f"{error}{note}") from error
