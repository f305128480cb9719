"""The reattach rules (``airflow_provider_pathways.reattach_rules``): what a new try (a retry, or a
cleared task) does with the job an earlier try kept, the same for every backend."""

from __future__ import annotations

import pytest

from airflow_provider_pathways.reattach_rules import (
    FailureClass,
    JobJudgement,
    KeptJob,
    ReattachAction,
    Verdict,
    reattach_action,
)

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
        # a job whose outcome nobody knows, once that failure was reported: clearing the task runs
        # it again, as the failure's message says
        (JobJudgement.failed(FailureClass.OUTCOME_UNKNOWN), None, ReattachAction.FAIL),
        (JobJudgement.failed(FailureClass.OUTCOME_UNKNOWN), Verdict.FAILED, ReattachAction.SUBMIT),
        # a job that succeeded before it was ready fails a wait_until="ready" task; a clear runs it
        # again rather than failing once more
        (JobJudgement.succeeded(), Verdict.FAILED, ReattachAction.SUBMIT),
    ],
)
def test_a_new_try_acts_on_the_kept_job_by_its_state_and_what_was_reported(
    judgement: JobJudgement, reported: Verdict | None, action: ReattachAction
) -> None:
    assert reattach_action(judgement, reported) is action


@pytest.mark.parametrize(
    ("judgement", "action"),
    [
        # resumed and done before the retry looked: its success is reported, the program not run again
        (JobJudgement.succeeded(), ReattachAction.REPORT_SUCCESS),
        (PROGRAM_FAILED, ReattachAction.FAIL),
        (PREEMPTED, ReattachAction.REPLACE),
        (JobJudgement.active(), ReattachAction.FOLLOW),
        (JobJudgement.active(suspended=True), ReattachAction.REPLACE),  # still suspended
    ],
)
def test_a_failure_reported_while_the_job_lived_on_leaves_its_own_end_to_be_judged(
    judgement: JobJudgement, action: ReattachAction
) -> None:
    """A try that failed on its job's suspension (``fail_on_suspend``) and kept it for the retry:
    Kueue may resume the job, and it may end before the retry looks."""
    assert reattach_action(judgement, Verdict.FAILED, left_running=True) is action


def test_the_kept_job_keeps_the_reported_outcome_and_reads_ids_kept_before_outcomes_were() -> None:
    kept = KeptJob({"name": "train-1", "namespace": "ml"}).reporting(
        Verdict.SUCCEEDED, {"phase": "succeeded"}
    )
    assert KeptJob.from_stored(kept.to_stored()) == kept
    assert KeptJob.from_stored(42) == KeptJob(42)  # a Slurm job id as kept before
    legacy = {"name": "train-1", "namespace": "ml", "kind": "PathwaysJob"}
    assert KeptJob.from_stored(legacy) == KeptJob(legacy)
    assert KeptJob.from_stored({"job": 7, "reported": "bogus"}).reported is None


@pytest.mark.parametrize(
    ("cleared", "kill_ends_job", "action"),
    [
        # Airflow 3.3 sets a cleared deferred task to None at once (clear_task_instances), so its new
        # try can read the kept job before the triggerer killed the old trigger: the new try ends
        # the job as that kill would have, and runs a fresh one
        (True, True, ReattachAction.RESTART),
        (True, False, ReattachAction.FOLLOW),  # the kill keeps the job: so does the cleared try
        (False, True, ReattachAction.FOLLOW),  # a retry after a crash reattaches
    ],
)
def test_a_job_still_running_when_its_task_was_cleared_is_ended_as_the_kill_would(
    cleared: bool, kill_ends_job: bool, action: ReattachAction
) -> None:
    judgement = JobJudgement.active("RUNNING")
    assert reattach_action(judgement, None, cleared=cleared, kill_ends_job=kill_ends_job) is action


def test_a_clear_is_told_from_a_retry_by_max_tries() -> None:
    """Airflow raises ``max_tries`` only when it clears a task (``clear_task_instances``, and the
    scheduler for a cleared running task it terminated); a retry keeps it."""
    kept = KeptJob(42, max_tries=2)
    assert KeptJob.from_stored(kept.to_stored()) == kept
    assert kept.reporting(Verdict.SUCCEEDED).max_tries == 2
    assert kept.cleared_since(3) and not kept.cleared_since(2)
    assert not KeptJob(42).cleared_since(3)  # kept before max_tries was: a retry, as before
    assert not kept.cleared_since(None)
    assert KeptJob.from_stored({"job": 7, "max_tries": "2"}).max_tries is None


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
