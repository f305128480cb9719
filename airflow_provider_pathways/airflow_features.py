"""What the provider uses that only some Airflow versions have, and what it does without it.

The provider installs on Airflow 2.11 and every 3.x. Each feature below arrived in the version
named; on older versions the provider degrades as ``without`` says (the docs' compatibility table
is generated from :data:`FEATURES`). Imports that only moved between versions go through
``apache-airflow-providers-common-compat`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_3_PLUS

#: ``retry_policy`` on operators (``airflow.sdk.definitions.retry_policy``).
RETRY_POLICIES: bool = AIRFLOW_V_3_3_PLUS
#: ``BaseTrigger.on_kill``, called when a user kills a deferred task.
TRIGGER_ON_KILL: bool = AIRFLOW_V_3_3_PLUS


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
)
