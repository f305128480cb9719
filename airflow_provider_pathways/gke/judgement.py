"""The one reading of a Pathways job's status as an operator's judgement of the job."""

from __future__ import annotations

from airflow_provider_pathways.failure_class import FailureClass
from airflow_provider_pathways.gke.status import PathwaysJobStatus, Phase
from airflow_provider_pathways.reattach import JobJudgement

#: Phases of a job an operator's new try reattaches to instead of replacing it (a suspended job
#: is replaced: it would only run again if someone resumed it).
REATTACHABLE_PHASES = frozenset({Phase.PENDING, Phase.QUEUED, Phase.STARTING, Phase.RUNNING})


def judge_status(status: PathwaysJobStatus) -> JobJudgement:
    """Succeeded, failed with its class (a terminating or deleted job is an infrastructure
    failure), or active."""
    if status.phase is Phase.SUCCEEDED:
        return JobJudgement.succeeded(status.message)
    if status.terminal:
        return JobJudgement.failed(status.failure or FailureClass.UNKNOWN, status.message)
    return JobJudgement.active(status.progress())
