"""The one reading of a Pathways job's status as an operator's judgement of the job."""

from __future__ import annotations

from airflow_provider_pathways.failure_class import FailureClass
from airflow_provider_pathways.gke.status import PathwaysJobStatus, Phase
from airflow_provider_pathways.reattach import JobJudgement


def judge_status(status: PathwaysJobStatus) -> JobJudgement:
    """Succeeded, failed with its class (a terminating or deleted job is an infrastructure
    failure), or active (also suspended: it runs again once resumed, so a new try follows it
    rather than start a second one)."""
    if status.phase is Phase.SUCCEEDED:
        return JobJudgement.succeeded(status.message)
    if status.terminal:
        return JobJudgement.failed(status.failure or FailureClass.UNKNOWN, status.message)
    return JobJudgement.active(status.progress())
