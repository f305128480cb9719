"""The reattach rules both backends share: what a new try does with the job an earlier try kept."""

from __future__ import annotations

import pytest

from airflow_provider_pathways.failure_class import FailureClass
from airflow_provider_pathways.reattach import JobJudgement, KeptJob, ReattachAction, Verdict, reattach_action

PROGRAM_FAILED = JobJudgement.failed(FailureClass.USER_PROGRAM_FAILED, "exit code 3")
PREEMPTED = JobJudgement.failed(FailureClass.PREEMPTED, "slice lost")


@pytest.mark.parametrize(
    ("judgement", "reported", "action"),
    [
        # after a crash nobody reported anything: the program never runs twice
        (PROGRAM_FAILED, None, ReattachAction.FAIL),
        (PREEMPTED, None, ReattachAction.REPLACE),
        # a failure an earlier try reported never blocks a new try (a cleared task)
        (PROGRAM_FAILED, Verdict.FAILED, ReattachAction.SUBMIT),
        (PREEMPTED, Verdict.FAILED, ReattachAction.SUBMIT),
        # a job that runs again (a suspended job resumed) is followed, reported or not
        (JobJudgement.active(), Verdict.FAILED, ReattachAction.FOLLOW),
        (JobJudgement.active(), None, ReattachAction.FOLLOW),
        (JobJudgement.succeeded(), None, ReattachAction.REPORT_SUCCESS),
    ],
)
def test_a_new_try_acts_on_the_kept_job_by_its_state_and_what_was_reported(
    judgement: JobJudgement, reported: Verdict | None, action: ReattachAction
) -> None:
    assert reattach_action(judgement, reported) is action


def test_the_kept_job_keeps_the_reported_outcome_and_reads_ids_kept_before_outcomes_were() -> None:
    kept = KeptJob({"name": "train-1", "namespace": "ml"}).reporting(
        Verdict.SUCCEEDED, {"phase": "succeeded"}
    )
    assert KeptJob.from_stored(kept.to_stored()) == kept
    assert KeptJob.from_stored(42) == KeptJob(42)  # a Slurm job id as kept before
    legacy = {"name": "train-1", "namespace": "ml", "kind": "PathwaysJob"}
    assert KeptJob.from_stored(legacy) == KeptJob(legacy)
    assert KeptJob.from_stored({"job": 7, "reported": "bogus"}).reported is None
