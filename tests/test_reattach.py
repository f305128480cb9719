"""The reattach rules (``airflow_provider_pathways.reattach``): what a retry does with the job an
earlier try submitted, the same for every backend."""

from __future__ import annotations

import pytest

from airflow_provider_pathways.failure_class import FailureClass
from airflow_provider_pathways.reattach import JobJudgement, ReattachAction, reattach_action


@pytest.mark.parametrize(
    ("judgement", "action"),
    [
        (JobJudgement.active("RUNNING"), ReattachAction.FOLLOW),
        (JobJudgement.succeeded(), ReattachAction.REPORT_SUCCESS),
        (JobJudgement.failed(FailureClass.PREEMPTED), ReattachAction.REPLACE),
        (JobJudgement.failed(FailureClass.INFRASTRUCTURE), ReattachAction.REPLACE),
        (JobJudgement.failed(FailureClass.MAX_RESTARTS_REACHED), ReattachAction.REPLACE),
        (JobJudgement.failed(FailureClass.UNKNOWN), ReattachAction.REPLACE),
        (JobJudgement.failed(FailureClass.USER_PROGRAM_FAILED), ReattachAction.FAIL),
        (JobJudgement.failed(FailureClass.SPEC_REJECTED), ReattachAction.FAIL),
        # the cluster forgot the job (Slurm's MinJobAge without accounting): its program may have
        # run, so it is not run again without the user's say
        (JobJudgement.failed(FailureClass.OUTCOME_UNKNOWN), ReattachAction.FAIL),
    ],
)
def test_reattach_action(judgement: JobJudgement, action: ReattachAction) -> None:
    assert reattach_action(judgement) is action


def test_only_a_failure_carries_a_class() -> None:
    with pytest.raises(ValueError, match="FAILED verdict"):
        JobJudgement(JobJudgement.active().verdict, FailureClass.PREEMPTED)


def test_failure_classes_that_a_retry_must_not_paper_over() -> None:
    assert {f for f in FailureClass if f.final} == {
        FailureClass.USER_PROGRAM_FAILED,
        FailureClass.SPEC_REJECTED,
        FailureClass.OUTCOME_UNKNOWN,
    }
    assert {f for f in FailureClass if f.retryable} == {FailureClass.PREEMPTED, FailureClass.INFRASTRUCTURE}
