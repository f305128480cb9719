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


def test_a_forgotten_slurm_job_is_not_run_again_unless_the_user_asks() -> None:
    """slurmctld forgets a job MinJobAge after its end; without accounting nobody knows whether the
    program ran. The workload fails saying so; resubmit_if_outcome_unknown opts in to a fresh job.
    A Pathways service that is gone is simply started again."""
    from airflow_provider_pathways.operators.slurm import PathwaysSlurmServiceOperator, SlurmJobOperator

    lost = "job 42 is no longer known to slurmctld and the cluster keeps no accounting; its end is unknown"
    failure, message = SlurmJobOperator(task_id="train", script="#!/bin/bash\n").lost_job(42, lost)
    assert failure is FailureClass.OUTCOME_UNKNOWN
    assert reattach_action(JobJudgement.failed(failure, message)) is ReattachAction.FAIL
    assert message.startswith(lost) and "whether its program ran, and how it ended, is unknown" in message
    assert "clear this task to run it again" in message and "resubmit_if_outcome_unknown=True" in message
    opted_in = SlurmJobOperator(task_id="train", script="#!/bin/bash\n", resubmit_if_outcome_unknown=True)
    failure, message = opted_in.lost_job(42, lost)
    assert failure is FailureClass.INFRASTRUCTURE and "resubmitting" in message
    assert reattach_action(JobJudgement.failed(failure, message)) is ReattachAction.REPLACE
    service = PathwaysSlurmServiceOperator(
        task_id="service",
        script="#!/bin/bash\n",
        slice_shape="2x4",
        min_slices=1,
        max_slices=1,
        gcs_bucket="b",
    )
    assert service.lost_job(42, lost)[0] is FailureClass.INFRASTRUCTURE
