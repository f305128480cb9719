"""The transport-independent Slurm job model: parsing (REST v0.0.38 to v0.0.45, scontrol text and
accounting recorded from the sandbox's real Slurm 22.05, 24.11 and 26.05; v0.0.39, which no Debian
release ships, hand-written from Slurm 23.02's parser), outcomes, submission input."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_provider_pathways.failures import FailureClass
from airflow_provider_pathways.slurm.accounting import jobs_from_sacct, jobs_from_slurmdb, latest_attempts
from airflow_provider_pathways.slurm.end_states import JobOutcome, StuckJobWatch, job_outcome
from airflow_provider_pathways.slurm.job import (
    SlurmJob,
    decode_wait_status,
    expand_task_ids,
    jobs_from_scontrol,
    normalize_state,
    parse_scontrol_record,
)
from airflow_provider_pathways.slurm.rest import (
    ESLURM_INVALID_JOB_ID,
    jobs_from_rest,
    rest_error_numbers,
    rest_errors_text,
    rest_submit_body,
)
from airflow_provider_pathways.slurm.submit import (
    Signal,
    SubmitRequest,
    expand_output_pattern,
    parse_begin,
    parse_sbatch_directives,
    parse_signal,
    parse_time_limit,
    path_wrapper_script,
    rest_option_fields,
)

DATA = Path(__file__).parent / "data"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _by_id(jobs: list[SlurmJob]) -> dict[tuple[int, int | None], SlurmJob]:
    return {(j.job_id, j.array_task_id): j for j in jobs}


# ---- REST v0.0.38 (recorded from the sandbox's slurmrestd 22.05) -------------------------------


def test_rest_v0038_array_with_pending_range() -> None:
    jobs = jobs_from_rest(_load("rest_v0038_array.json"))
    array_id = jobs[0].array_job_id
    assert [j.array_task_id for j in jobs] == [1, 2, 3, 0]
    pending = [j for j in jobs if j.state == "PENDING"]
    assert [j.job_id for j in pending] == [array_id] * 3
    assert all(j.reason == "JobArrayTaskLimit" and j.start_time is None for j in pending)
    running = next(j for j in jobs if j.state == "RUNNING")
    assert running.job_id != array_id and running.array_task_id == 0
    assert running.node_list == "vm" and running.start_time is not None
    assert running.end_time is None and running.exit_code is None  # expected end of a running job dropped
    assert running.comment == "pathways-service=12" and running.reason is None


def test_rest_v0038_requeued_job() -> None:
    (job,) = jobs_from_rest(_load("rest_v0038_requeued.json"))
    assert job.state == "PENDING" and job.reason == "BeginTime" and job.restarts == 1
    assert job.flags == frozenset({"REQUEUED"}) and job.requeued
    assert job.std_out == f"/shared/home/pathways/rec-{job.job_id}.out"
    assert job_outcome(job)[:2] == (JobOutcome.ACTIVE, FailureClass.PREEMPTED)


def test_rest_v0038_unknown_job_error() -> None:
    status, payload = _load("rest_v0038_unknown_job.json")
    assert status == 500
    assert ESLURM_INVALID_JOB_ID in rest_error_numbers(payload["errors"])
    assert "Unable to find JobId" in rest_errors_text(payload["errors"])
    assert jobs_from_rest(payload) == []


def test_rest_v0038_raw_exit_status() -> None:
    assert decode_wait_status(3 << 8) == (3, 0)
    assert decode_wait_status(15) == (0, 15)
    assert decode_wait_status(143 << 8) == (143, 0)
    assert decode_wait_status(None) == (None, None)
    record = {
        "job_id": 9,
        "name": "x",
        "job_state": "FAILED",
        "state_reason": "NonZeroExitCode",
        "exit_code": 768,
    }
    (job,) = jobs_from_rest({"jobs": [record]})
    assert (job.exit_code, job.exit_signal) == (3, 0)


# ---- REST v0.0.39 (hand-written: no Debian release ships Slurm 23.02 or 23.11) ---------------------


def test_rest_v0039_hand_written_from_the_23_02_parser() -> None:
    jobs = {(j.name, j.array_task_id): j for j in jobs_from_rest(_load("rest_v0039_jobs.json"))}
    requeued = jobs[("requeued", None)]
    assert (requeued.state, requeued.restarts, requeued.start_time) == ("PENDING", 1, None)
    assert requeued.requeued and job_outcome(requeued)[:2] == (JobOutcome.ACTIVE, FailureClass.PREEMPTED)
    failed = jobs[("failed", None)]
    assert (failed.exit_code, failed.exit_signal) == (3, 0)
    assert job_outcome(failed)[:2] == (JobOutcome.FAILED, FailureClass.USER_PROGRAM_FAILED)
    launch = jobs[("launch", None)]
    assert (launch.exit_code, launch.exit_signal) == (0, 53)  # 4021 & 0x7f
    # ESLURMD_IO_ERROR: recorded with --output in a directory that does not exist, the submission's
    # own mistake, which a retry repeats (record_fixtures.py)
    assert job_outcome(launch)[:2] == (JobOutcome.FAILED, FailureClass.SPEC_REJECTED)
    assert [jobs[("array", t)].state for t in (0, 2, 3)] == ["RUNNING", "PENDING", "PENDING"]
    assert jobs[("array", 2)].std_out == "/shared/home/pathways/slice-3904_2.out"
    assert jobs[("array", 2)].job_id == 3904 and jobs[("array", 0)].job_id == 3905


# ---- scontrol -o show job (recorded from the sandbox) ------------------------------------------


def test_scontrol_failed_job_with_spaces_in_name_and_comment() -> None:
    (job,) = jobs_from_scontrol((DATA / "scontrol_failed.txt").read_text())
    assert job.name == "my job name"
    assert job.comment == "pathways-service=7 note: a b Partition=y JobName=z"
    assert (job.state, job.reason, job.exit_code, job.exit_signal) == ("FAILED", "NonZeroExitCode", 3, 0)
    assert job.partition == "batch" and job.node_list == "vm"
    assert job.std_out is not None and job.std_out.endswith(f"/sc-my job name-{job.job_id}.out")
    assert job.start_time is not None and job.start_time.tzinfo is timezone.utc


def test_scontrol_array_expands_pending_ranges() -> None:
    jobs = jobs_from_scontrol((DATA / "scontrol_array.txt").read_text())
    array_id = jobs[0].job_id
    assert sorted(j.array_task_id for j in jobs) == [0, 1, 2, 3, 4]
    assert {j.array_job_id for j in jobs} == {array_id}
    assert {j.job_id for j in jobs if j.state == "PENDING"} == {array_id}
    assert sum(j.state == "RUNNING" for j in jobs) == 2


def test_scontrol_parser_keeps_unknown_keys_and_free_text() -> None:
    fields = parse_scontrol_record(
        "JobId=5 JobName=a b=c UserId=u(1) JobState=RUNNING Reason=None NewKey=7 Restarts=2 "
        "WorkDir=/a dir/x=y Comment=see StdOut=/o StdOut=/p"
    )
    assert fields["JobName"] == "a b=c" and fields["NewKey"] == "7" and fields["Restarts"] == "2"
    assert (
        fields["WorkDir"] == "/a dir/x=y"
        and fields["Comment"] == "see"
        and fields["StdOut"] == "/o StdOut=/p"
    )


def test_scontrol_time_without_time_format_is_read_as_utc() -> None:
    (job,) = jobs_from_scontrol(
        "JobId=8 JobName=x JobState=COMPLETED Reason=None Restarts=0 ExitCode=0:0 "
        "SubmitTime=2026-01-01T00:00:00 StartTime=2026-01-01T00:00:05 EndTime=Unknown"
    )
    assert job.submit_time == T0 and job.end_time is None


# ---- states and outcomes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "restarts", "state", "flags"),
    [
        ("RUNNING", 0, "RUNNING", set()),
        (["PENDING", "REQUEUED"], 1, "PENDING", {"REQUEUED"}),
        ("REQUEUED", 0, "PENDING", {"REQUEUED"}),
        ("PENDING", 2, "PENDING", {"REQUEUED"}),
        (["RUNNING", "CONFIGURING"], 0, "CONFIGURING", set()),
        (["COMPLETED", "COMPLETING"], 0, "COMPLETING", set()),
        # 24.11 and 26.05, for about a second after a preemption or requeue: on the way back to PENDING.
        (["PENDING", "COMPLETING"], 1, "COMPLETING", {"REQUEUED"}),
        (["FAILED", "REQUEUE_HOLD"], 0, "FAILED", {"REQUEUE_HOLD"}),
        ("COMPLETING", 0, "COMPLETING", set()),
        (["PENDING", "RESV_DEL_HOLD"], 0, "PENDING", {"RESV_DEL_HOLD"}),
        (None, 0, "UNKNOWN", set()),
    ],
)
def test_normalize_state(raw: object, restarts: int, state: str, flags: set[str]) -> None:
    assert normalize_state(raw, restarts=restarts) == (state, frozenset(flags))


def _job(state: str, **kw: object) -> SlurmJob:
    return SlurmJob(job_id=7, name="n", state=state, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("job", "outcome", "failure", "text"),
    [
        (_job("COMPLETED", exit_code=0), JobOutcome.SUCCEEDED, None, "completed"),
        (
            _job("FAILED", reason="NonZeroExitCode", exit_code=3),
            JobOutcome.FAILED,
            FailureClass.USER_PROGRAM_FAILED,
            "exit code 3",
        ),
        (_job("OUT_OF_MEMORY", exit_code=0), JobOutcome.FAILED, FailureClass.USER_PROGRAM_FAILED, "memory"),
        # Launch failures (recorded: 22.05 reason JobLaunchFailure, 24.11/26.05 RaisedSignal:53, both
        # ExitCode=0:53 = ESLURMD_IO_ERROR 4021 & 0x7f when the output file cannot be opened: the
        # submission's mistake, not the node's).
        (
            _job("FAILED", reason="JobLaunchFailure", exit_code=0, exit_signal=53),
            JobOutcome.FAILED,
            FailureClass.SPEC_REJECTED,
            "ESLURMD_IO_ERROR",
        ),
        (
            _job("FAILED", reason="RaisedSignal:53(Real-time_signal_19)", exit_code=0, exit_signal=53),
            JobOutcome.FAILED,
            FailureClass.SPEC_REJECTED,
            "never started",
        ),
        (  # another slurmd launch error (ESLURMD_PROLOG_FAILED 4022 & 0x7f): the node's
            _job("FAILED", reason="RaisedSignal:54", exit_code=0, exit_signal=54),
            JobOutcome.FAILED,
            FailureClass.INFRASTRUCTURE,
            "ESLURMD_PROLOG_FAILED",
        ),
        (
            _job("FAILED", reason="JobLaunchFailure"),
            JobOutcome.FAILED,
            FailureClass.INFRASTRUCTURE,
            "JobLaunchFailure",
        ),
        (  # 22.05: a batch script that killed itself (kill -9 $$) reads JobLaunchFailure, 0:9
            _job("FAILED", reason="JobLaunchFailure", exit_code=0, exit_signal=9),
            JobOutcome.FAILED,
            FailureClass.USER_PROGRAM_FAILED,
            "signal 9",
        ),
        (
            _job("FAILED", reason="RaisedSignal:9(Killed)", exit_code=0, exit_signal=9),
            JobOutcome.FAILED,
            FailureClass.USER_PROGRAM_FAILED,
            "signal 9",
        ),
        (_job("PREEMPTED"), JobOutcome.FAILED, FailureClass.PREEMPTED, "preempted"),
        (_job("NODE_FAIL", reason="NodeDown"), JobOutcome.FAILED, FailureClass.INFRASTRUCTURE, "NODE_FAIL"),
        (_job("BOOT_FAIL"), JobOutcome.FAILED, FailureClass.INFRASTRUCTURE, "BOOT_FAIL"),
        (_job("TIMEOUT", reason="TimeLimit"), JobOutcome.FAILED, FailureClass.UNKNOWN, "time limit"),
        (_job("CANCELLED", reason="None"), JobOutcome.FAILED, FailureClass.UNKNOWN, "cancelled"),
        (_job("DEADLINE"), JobOutcome.FAILED, FailureClass.UNKNOWN, "DEADLINE"),
        (
            _job("PENDING", restarts=1, reason="BeginTime"),
            JobOutcome.ACTIVE,
            FailureClass.PREEMPTED,
            "requeued",
        ),
        (
            _job("PENDING", flags=frozenset({"REQUEUED"})),
            JobOutcome.ACTIVE,
            FailureClass.PREEMPTED,
            "requeued",
        ),
        (_job("RUNNING", restarts=2), JobOutcome.ACTIVE, None, "restarted 2"),
        (_job("PENDING", reason="Resources"), JobOutcome.ACTIVE, None, "Resources"),
        (_job("SUSPENDED"), JobOutcome.ACTIVE, None, "SUSPENDED"),
        (_job("CONFIGURING"), JobOutcome.ACTIVE, None, "CONFIGURING"),
        (_job("COMPLETING"), JobOutcome.ACTIVE, None, "COMPLETING"),
        (
            _job("COMPLETING", restarts=1, flags=frozenset({"REQUEUED"})),
            JobOutcome.ACTIVE,
            FailureClass.PREEMPTED,
            "requeued",
        ),
        (_job("SOMETHING_NEW"), JobOutcome.ACTIVE, None, "unknown Slurm state"),
    ],
)
def test_job_outcome(job: SlurmJob, outcome: JobOutcome, failure: FailureClass | None, text: str) -> None:
    got_outcome, got_failure, message = job_outcome(job)
    assert (got_outcome, got_failure) == (outcome, failure)
    assert text in message and "7" in message


def test_a_held_job_ends_the_wait_after_hold_timeout() -> None:
    """JobHeldAdmin/JobHeldUser wait for scontrol release (squeue(1) JOB REASON CODES); a release resets
    the clock."""
    watch = StuckJobWatch(hold_timeout=60)
    held = _job("PENDING", reason="JobHeldAdmin")
    assert watch.stuck(held, 1000.0) is None and watch.stuck(held, 1059.0) is None
    failure, message = watch.stuck(held, 1060.0) or (None, "")
    assert failure is FailureClass.INFRASTRUCTURE
    assert "administrator holds it (JobHeldAdmin)" in message and "hold_timeout (60s)" in message
    again = StuckJobWatch(hold_timeout=60)
    again.stuck(held, 0.0)
    assert again.stuck(_job("PENDING", reason="Priority"), 30.0) is None  # released
    assert again.stuck(held, 80.0) is None  # held anew: the bound counts from here
    requeue_held = _job("PENDING", reason="JobHeldUser", flags=frozenset({"REQUEUE_HOLD"}), restarts=1)
    assert StuckJobWatch(hold_timeout=0).stuck(requeue_held, 0.0) is not None
    assert StuckJobWatch(hold_timeout=None).stuck(held, 1e9) is None


def test_a_job_held_after_failed_launches_ends_the_wait_at_once() -> None:
    """slurmctld requeues a batch job whose launch failed and holds it after MaxBatchRequeue
    attempts (reason launch_failed_requeued_held): Slurm already retried."""
    held = _job("PENDING", reason="launch_failed_requeued_held", restarts=5)
    failure, message = StuckJobWatch().stuck(held, 0.0) or (None, "")
    assert failure is FailureClass.INFRASTRUCTURE and "launch_failed_requeued_held" in message


def test_a_job_requeued_over_and_over_ends_the_wait() -> None:
    watch = StuckJobWatch(max_requeues=3)
    assert watch.stuck(_job("RUNNING", restarts=3), 0.0) is None
    failure, message = watch.stuck(_job("PENDING", restarts=4, reason="BeginTime"), 0.0) or (None, "")
    assert (
        failure is FailureClass.PREEMPTED and "requeued 4 times" in message and "max_requeues (3)" in message
    )
    assert watch.stuck(_job("COMPLETED", restarts=9, exit_code=0), 0.0) is None  # an end is judged as such
    assert StuckJobWatch(max_requeues=None).stuck(_job("PENDING", restarts=99), 0.0) is None
    with pytest.raises(ValueError, match="max_requeues"):
        StuckJobWatch(max_requeues=-1)


def test_job_dict_round_trip_is_json_safe() -> None:
    job = SlurmJob(
        job_id=12,
        name="w",
        state="PENDING",
        flags=frozenset({"REQUEUED", "X"}),
        reason="BeginTime",
        restarts=1,
        array_job_id=10,
        array_task_id=2,
        submit_time=T0,
        start_time=None,
        comment="c",
    )
    data = json.loads(json.dumps(job.to_dict()))
    assert data["flags"] == ["REQUEUED", "X"] and data["submit_time"] == "2026-01-01T00:00:00+00:00"
    assert SlurmJob.from_dict(data) == job
    assert job.display_id == "10_2" and job.requeued and job.active and not job.terminal


# ---- helpers -----------------------------------------------------------------------------------


def test_expand_task_ids() -> None:
    assert expand_task_ids("0-3") == [0, 1, 2, 3]
    assert expand_task_ids("2-3%2") == [2, 3]
    assert expand_task_ids("1,3,5-9:2") == [1, 3, 5, 7, 9]
    assert expand_task_ids("7") == [7]


def test_expand_output_pattern() -> None:
    kw = {"job_id": 12, "array_job_id": 10, "array_task_id": 3, "name": "w", "user": "u", "node": "n1"}
    assert expand_output_pattern("%x-%A_%a-%j-%u-%N-%%-%5j.out", **kw) == "w-10_3-12-u-n1-%-00012.out"


@pytest.mark.parametrize(
    ("value", "minutes"),
    [
        (90, 90),
        ("90", 90),
        ("1:30", 2),
        ("1:30:00", 90),
        ("2-12", 3600),
        ("1-0:30", 1470),
        ("UNLIMITED", None),
    ],
)
def test_parse_time_limit(value: str | int, minutes: int | None) -> None:
    assert parse_time_limit(value) == minutes


@pytest.mark.parametrize("value", ["soon", "1:2:3:4", 0, -5, "0", True])
def test_parse_time_limit_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="time_limit"):
        parse_time_limit(value)  # type: ignore[arg-type]


def test_sbatch_directives() -> None:
    head = (
        "#!/bin/bash\n#SBATCH -J svc --time=1:00:00\n#SBATCH --partition cpu # trailing comment\n"
        "#SBATCH --requeue\n#SBATCH --exclusive\n\n# plain comment\n#SBATCH -c4\n"
        "echo hi\n#SBATCH --qos=late\n"
    )
    assert parse_sbatch_directives(head) == {
        "job-name": "svc",
        "time": "1:00:00",
        "partition": "cpu",
        "requeue": "",
        "exclusive": "",
        "cpus-per-task": "4",
    }


# ---- submission input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "exactly one of script"),
        ({"script": "#!/bin/sh\n", "script_path": "/x"}, "exactly one of script"),
        ({"script": "echo hi\n"}, "must start with a '#!'"),
        ({"script_path": "/x", "environment": {"A B": "x"}}, "environment variable name"),
        ({"script_path": "/x", "environment": {"A": 1}}, r"environment\['A'\] must be a string"),
        ({"script_path": "/x", "environment": {"A": "a\0b"}}, "NUL"),
        ({"script_path": "/x", "partition": "a b"}, "partition"),
        ({"script_path": "/x", "array": "0-3;x"}, "array"),
        ({"script_path": "/x", "time_limit": "later"}, "time_limit"),
        ({"script_path": "/x", "job_name": "a\nb"}, "job_name must be a single line"),
        ({"script_path": "/x", "extra_options": {"Bad_Key": "1"}}, "extra_options key"),
        ({"script_path": "/x", "extra_options": {"export": "ALL"}}, "not allowed"),
        ({"script_path": "/x", "output": 5}, "output must be a string"),
    ],
)
def test_submit_request_rejects_bad_input(kwargs: dict, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        SubmitRequest.build(**kwargs)


def test_sbatch_options_respect_directives() -> None:
    request = SubmitRequest.build(script="#!/bin/bash\n", time_limit=30, requeue=False, comment="a b")
    assert request.sbatch_options() == [
        "--parsable",
        "--job-name=airflow-slurm-job",
        "--time=30",
        "--comment=a b",
        "--no-requeue",
        "--open-mode=append",
    ]
    assert request.sbatch_options({"job-name": "x", "open-mode": "truncate"}) == [
        "--parsable",
        "--time=30",
        "--comment=a b",
        "--no-requeue",
    ]
    by_path = SubmitRequest.build(
        script_path="/opt/run.sh", extra_options={"exclusive": "", "cpus-per-task": "4"}
    )
    assert by_path.display_name == "run.sh"
    assert by_path.sbatch_options() == [
        "--parsable",
        "--open-mode=append",
        "--exclusive",
        "--cpus-per-task=4",
    ]


def test_directives_fill_what_rest_can_express() -> None:
    request = SubmitRequest.build(script_path="/opt/svc.sh", partition="explicit")
    merged, ignored = request.with_directives(
        {
            "partition": "cpu",
            "job-name": "svc",
            "time": "1:00:00",
            "requeue": "",
            "cpus-per-task": "2",
            "mem": "4G",
        }
    )
    assert merged.partition == "explicit" and merged.job_name == "svc"
    assert merged.time_limit_minutes == 60 and merged.requeue is True
    assert merged.extra_options == {"cpus-per-task": "2", "mem": "4G"} and ignored == []
    _merged, ignored = request.with_directives({"mail-type": "END", "mem": "4G"})
    assert ignored == ["--mail-type"]
    with pytest.raises(ValueError, match="#SBATCH line"):
        request.with_directives({"time": "whenever"})


def test_rest_submit_body_v0038() -> None:
    request = SubmitRequest.build(
        script="#!/bin/bash\ntrue\n",
        job_name="j",
        partition="p",
        time_limit="1:00:00",
        array="0-3",
        requeue=True,
        extra_options={"cpus-per-task": "4", "hold": ""},
    )
    body = rest_submit_body(
        request,
        api_version="v0.0.38",
        script=request.script or "",
        environment={"A": "1"},
        working_directory="/w",
    )
    assert body == {
        "script": "#!/bin/bash\ntrue\n",
        "job": {
            "name": "j",
            "current_working_directory": "/w",
            "environment": {"A": "1"},
            "partition": "p",
            "array": "0-3",
            "time_limit": 60,
            "requeue": True,
            "open_mode": "append",
            "cpus_per_task": 4,
            "hold": True,
        },
    }


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44"])
def test_rest_submit_body_v0040_and_later(version: str) -> None:
    request = SubmitRequest.build(
        script_path="/opt/it's here.sh",
        time_limit="UNLIMITED",
        open_mode_append=False,
        extra_options={"ntasks": "2"},
    )
    script = path_wrapper_script(request.script_path or "")
    assert script == "#!/bin/bash\nexec '/opt/it'\"'\"'s here.sh' \"$@\"\n"
    body = rest_submit_body(
        request,
        api_version=version,
        script=script,
        environment={"A": "x=y", "B": "a b"},
        working_directory="/w",
    )
    assert set(body) == {"job"}
    job = body["job"]
    assert job["script"] == script and job["name"] == "it's here.sh"
    assert job["environment"] == ["A=x=y", "B=a b"]
    assert job["time_limit"] == {"set": True, "infinite": True, "number": 0}
    assert job["open_mode"] == ["TRUNCATE"]
    assert job["tasks"] == 2  # an integer in the served OpenAPI documents of v0.0.40 to v0.0.45


# ---- sbatch options per transport and API version ------------------------------------------------
# Field names and types: the OpenAPI documents the sandbox's slurmrestd serve (22.05: v0.0.38, which
# takes sbatch's option strings through slurm_opt.c; 24.11: v0.0.40-42; 26.05: v0.0.42-45).
# tests/slurm/test_slurm_hook.py::test_sbatch_options_reach_slurmctld checks them on the daemons.

NOW = 1_800_000_000.0


def test_begin_values() -> None:
    assert parse_begin("now", NOW) == NOW
    assert parse_begin("now+90", NOW) == NOW + 90
    assert parse_begin("now+2hours", NOW) == NOW + 7200
    assert parse_begin("now+1week", NOW) == NOW + 604800
    assert (
        parse_begin("2027-01-15T08:00:00+00:00", NOW)
        == datetime(2027, 1, 15, 8, tzinfo=timezone.utc).timestamp()
    )
    # "\uff11": a full-width digit one.
    for bad in ("2027-01-15T08:00:00", "tomorrow", "now+", "now+1fortnight", "now+1\n", " now", "now+\uff11"):
        with pytest.raises(ValueError, match="begin"):
            parse_begin(bad, NOW)


def test_signal_values() -> None:
    assert parse_signal("USR1") == Signal(10, "USR1", 60)
    assert parse_signal("B:SIGUSR2@300") == Signal(12, "USR2", 300, batch_only=True)
    assert parse_signal("rb:15@0") == Signal(15, "TERM", 0, batch_only=True, reservation=True)
    assert parse_signal("B:USR1@300").sbatch == "B:USR1@300"
    for bad in ("USR3", "B:USR1@", "X:USR1", "0", "65", "USR1@70000", "USR1\n"):
        with pytest.raises(ValueError, match="signal"):
            parse_signal(bad)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("nodes", "0"),
        ("nodes", "2-"),
        ("ntasks", "1 "),
        ("ntasks", "1\n"),
        ("ntasks", "٣"),
        ("cpus-per-task", "-1"),
        ("mem", "4GiB"),
        ("mem", "4G\n"),
        ("exclusive", "node"),
        ("dependency", "afterok"),
        ("dependency", "afterok:1,afterany:2?afterok:3"),
        ("dependency", "afterok:1;rm"),
        ("gres", "gpu:1 "),
        ("constraint", "a b"),
        ("reservation", "a b"),
        ("hold", "yes"),
        ("begin", "soon"),
        ("signal", "USR9"),
    ],
)
def test_mapped_option_values_are_checked_whole(option: str, value: str) -> None:
    with pytest.raises(ValueError, match=option):
        SubmitRequest.build(script_path="/x", extra_options={option: value})


def test_array_and_time_limit_are_checked_whole() -> None:
    for array in ("0-3\n", "\u0660-3", " 0-3", "0-3%"):  # U+0660: an Arabic-Indic zero
        with pytest.raises(ValueError, match="array"):
            SubmitRequest.build(script_path="/x", array=array)
    for limit in ("30\n", " 30", "1:00:00 "):
        with pytest.raises(ValueError, match="time_limit"):
            SubmitRequest.build(script_path="/x", time_limit=limit)


OPTIONS = {
    "begin": "now+3600",
    "dependency": "afterany:12:13_2,afterok:14",
    "exclusive": "user",
    "nodes": "1-2",
    "ntasks": "2",
    "cpus-per-task": "3",
    "mem": "1536K",
    "gres": "gpu:1,nic:2",
    "constraint": "a&b",
    "reservation": "maint",
    "signal": "B:USR1@300",
    "hold": "",
}


def test_options_over_ssh() -> None:
    request = SubmitRequest.build(script_path="/x", requeue=False, extra_options=OPTIONS)
    args = request.sbatch_options()
    assert "--no-requeue" in args and "--begin=now+3600" in args and "--signal=B:USR1@300" in args
    assert "--exclusive=user" in args and "--hold" in args and "--mem=1536K" in args
    absolute = SubmitRequest.build(script_path="/x", extra_options={"begin": "2027-01-15T08:00:00+00:00"})
    (begin,) = [a for a in absolute.sbatch_options() if a.startswith("--begin=")]
    assert re.fullmatch(r"--begin=now\+[0-9]+", begin)


def test_options_over_rest_v0038() -> None:
    fields = rest_option_fields({**OPTIONS, "signal": "USR1@300"}, "v0.0.38", now=NOW)
    assert fields == {
        "begin_time": "now+3600",
        "dependency": "afterany:12:13_2,afterok:14",
        "exclusive": "user",
        "nodes": "1-2",
        "ntasks": 2,
        "cpus_per_task": 3,
        "memory_per_node": "1536K",
        "gres": "gpu:1,nic:2",
        "constraints": "a&b",
        "reservation": "maint",
        "signal": "USR1@300",
        "hold": True,
    }
    assert rest_option_fields({"exclusive": ""}, "v0.0.38") == {"exclusive": "exclusive"}
    with pytest.raises(ValueError, match=r"signal.*batch shell"):
        rest_option_fields({"signal": "B:USR1@300"}, "v0.0.38")
    with pytest.raises(ValueError, match=r"topo.*v0\.0\.41"):
        rest_option_fields({"exclusive": "topo"}, "v0.0.38")


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"])
def test_options_over_rest_v0040_and_later(version: str) -> None:
    fields = rest_option_fields(OPTIONS, version, now=NOW)

    def number(n: int) -> dict:
        return {"set": True, "infinite": False, "number": n}

    assert fields == {
        "begin_time": number(int(NOW) + 3600),
        "dependency": "afterany:12:13_2,afterok:14",
        "shared": ["user"],
        "nodes": "1-2",
        "tasks": 2,
        "cpus_per_task": 3,
        "memory_per_node": number(2),  # 1536K rounded up to whole MB, as str_to_mbytes does
        "tres_per_node": "gres/gpu:1,gres/nic:2",
        "constraints": "a&b",
        "reservation": "maint",
        "kill_warning_signal": "USR1",
        "kill_warning_delay": number(300),
        "kill_warning_flags": ["BATCH_JOB"],
        "hold": True,
    }
    assert rest_option_fields({"exclusive": ""}, version) == {"shared": ["none"]}
    topo = {"shared": ["topo"]} if version != "v0.0.40" else None
    if topo:
        assert rest_option_fields({"exclusive": "topo"}, version) == topo
    else:
        with pytest.raises(ValueError, match="topo"):
            rest_option_fields({"exclusive": "topo"}, version)


def test_unmapped_options_are_refused_over_rest_before_submission() -> None:
    request = SubmitRequest.build(script_path="/x", extra_options={"mail-type": "END"})
    assert request.sbatch_options()[-1] == "--mail-type=END"  # sbatch over SSH knows it
    with pytest.raises(ValueError, match=r"extra_options\['mail-type'\].*v0\.0\.42"):
        rest_submit_body(
            request, api_version="v0.0.42", script="#!/bin/sh\n", environment={}, working_directory="/"
        )


@pytest.mark.parametrize(
    ("version", "expected"), [("v0.0.38", {"no_requeue": True}), ("v0.0.42", {"requeue": False})]
)
def test_no_requeue_per_api_version(version: str, expected: dict) -> None:
    # Slurm 22.05's v0.0.38 maps "requeue" to sbatch --requeue whatever its value (slurm_opt.c
    # arg_set_data_requeue; seen: Requeue=1 after "requeue": false); "no_requeue" is --no-requeue.
    request = SubmitRequest.build(script_path="/x", requeue=False)
    body = rest_submit_body(
        request, api_version=version, script="#!/bin/sh\n", environment={}, working_directory="/"
    )
    job = body["job"]
    assert {k: job[k] for k in ("requeue", "no_requeue") if k in job} == expected


def test_scontrol_submit_line_is_free_text() -> None:
    (job,) = jobs_from_scontrol(
        "JobId=9 JobName=x JobState=RUNNING Reason=None Restarts=0 ExitCode=0:0 Partition=batch "
        "Command=/opt/run.sh SubmitLine=sbatch --comment=a A=1 Partition=evil /opt/run.sh "
        "WorkDir=/home/u Comment=c StdOut=/home/u/o"
    )
    assert job.partition == "batch" and job.work_dir == "/home/u" and job.std_out == "/home/u/o"


# ---- recorded from the sandbox's real Slurm 24.11 and 26.05 (tests/slurm/record_fixtures.py) ----------
# One job per state, each saved once per API version its slurmrestd serves (24.11: v0.0.40-42,
# 26.05: v0.0.42-45), plus scontrol -o show job, sacct -D and slurmdb answers of the same jobs.

RECORDED_REST = sorted(DATA.glob("rest_v00[4-9][0-9]_*_jobs.json"))
RECORDED_SCONTROL = sorted(DATA.glob("scontrol_[0-9]*_jobs.txt"))


def _check_recorded_jobs(jobs: list[SlurmJob], where: str) -> None:
    by_name: dict[str, list[SlurmJob]] = {}
    for job in jobs:
        by_name.setdefault(job.name, []).append(job)
    assert set(by_name) == {
        "completed", "failed", "killed", "launch", "cancelled", "timeout", "array", "requeued", "nodefail"
    }, where  # fmt: skip
    (completed,) = by_name["completed"]
    assert job_outcome(completed)[0] is JobOutcome.SUCCEEDED and completed.comment == "note Partition=x"
    assert completed.std_out is not None and completed.std_out.endswith(f"/completed-{completed.job_id}.out")
    assert completed.std_out.startswith("/shared/home/pathways/"), where
    (failed,) = by_name["failed"]
    assert (failed.state, failed.exit_code, failed.exit_signal, failed.reason) == (
        "FAILED", 3, 0, "NonZeroExitCode"
    ), where  # fmt: skip
    assert job_outcome(failed)[:2] == (JobOutcome.FAILED, FailureClass.USER_PROGRAM_FAILED)
    (killed,) = by_name["killed"]
    assert (killed.state, killed.exit_signal) == ("FAILED", 9), where
    assert job_outcome(killed)[:2] == (JobOutcome.FAILED, FailureClass.USER_PROGRAM_FAILED)
    (launch,) = by_name["launch"]
    assert (launch.state, launch.exit_code, launch.exit_signal) == ("FAILED", 0, 53), where
    # scontrol: "RaisedSignal:53(Real-time_signal_19)", slurmrestd: "RaisedSignal": not the program.
    assert (launch.reason or "").startswith("RaisedSignal"), where
    outcome, failure, message = job_outcome(launch)
    assert (outcome, failure) == (
        JobOutcome.FAILED,
        FailureClass.SPEC_REJECTED,
    ) and "ESLURMD_IO_ERROR" in message
    (cancelled,) = by_name["cancelled"]
    assert job_outcome(cancelled)[:2] == (JobOutcome.FAILED, FailureClass.UNKNOWN)
    (timeout,) = by_name["timeout"]
    assert (timeout.state, timeout.reason) == ("TIMEOUT", "TimeLimit"), where
    assert "time limit" in job_outcome(timeout)[2]
    (requeued,) = by_name["requeued"]
    assert (requeued.state, requeued.restarts, requeued.reason) == ("PENDING", 1, "BeginTime"), where
    assert requeued.requeued and job_outcome(requeued)[:2] == (JobOutcome.ACTIVE, FailureClass.PREEMPTED)
    (nodefail,) = by_name["nodefail"]
    assert (nodefail.state, nodefail.reason) == ("NODE_FAIL", "NodeDown"), where
    assert job_outcome(nodefail)[:2] == (JobOutcome.FAILED, FailureClass.INFRASTRUCTURE)
    tasks = sorted(by_name["array"], key=lambda t: t.array_task_id or 0)
    assert [t.array_task_id for t in tasks] == [0, 1, 2, 3, 4, 5], where
    assert {t.array_job_id for t in tasks} == {tasks[0].array_job_id}
    assert sorted(t.state for t in tasks) == ["PENDING"] * 4 + ["RUNNING"] * 2, where
    for task in tasks:
        assert task.std_out.endswith(f"/slice-{task.array_job_id}_{task.array_task_id}.out"), where
        if task.state == "PENDING":
            assert task.job_id == task.array_job_id and task.reason == "JobArrayTaskLimit"
            assert task.start_time is None


@pytest.mark.parametrize("path", RECORDED_REST, ids=lambda p: p.stem)
def test_recorded_rest_jobs(path: Path) -> None:
    payload = json.loads(path.read_text())
    _check_recorded_jobs(jobs_from_rest(payload), path.name)


@pytest.mark.parametrize("path", RECORDED_SCONTROL, ids=lambda p: p.stem)
def test_recorded_scontrol_jobs(path: Path) -> None:
    _check_recorded_jobs(jobs_from_scontrol(path.read_text()), path.name)


@pytest.mark.parametrize(
    "path", sorted(DATA.glob("rest_v00[4-9][0-9]_*_unknown_job.json")), ids=lambda p: p.stem
)
def test_recorded_unknown_job(path: Path) -> None:
    status, payload = json.loads(path.read_text())
    assert status == 404  # 22.05 answered 500
    assert rest_error_numbers(payload["errors"]) == {ESLURM_INVALID_JOB_ID}
    assert jobs_from_rest(payload) == []


def test_recorded_sacct_keeps_every_attempt_and_the_last_one_is_the_end() -> None:
    records = jobs_from_sacct((DATA / "sacct_2411_jobs.txt").read_text())
    assert all(job.source == "accounting" for job in records)
    attempts = [job for job in records if job.name == "requeued"]
    assert [(j.state, j.restarts) for j in attempts] == [("PENDING", 0), ("FAILED", 1)]
    latest = {job.name: job for job in latest_attempts(records) if job.array_task_id is None}
    assert (latest["requeued"].state, latest["requeued"].exit_code) == ("FAILED", 4)
    assert job_outcome(latest["requeued"])[:2] == (JobOutcome.FAILED, FailureClass.USER_PROGRAM_FAILED)
    # --output in a missing directory (record_fixtures.py): ESLURMD_IO_ERROR, the submission's mistake
    assert job_outcome(latest["launch"])[:2] == (JobOutcome.FAILED, FailureClass.SPEC_REJECTED)
    assert job_outcome(latest["nodefail"])[:2] == (JobOutcome.FAILED, FailureClass.INFRASTRUCTURE)
    assert latest["timeout"].state == "TIMEOUT" and latest["completed"].comment == "note Partition=x"
    assert (latest["failed"].std_out or "").endswith(f"/failed-{latest['failed'].job_id}.out")
    tasks = [job for job in latest_attempts(records) if job.name == "array"]
    assert sorted(t.array_task_id for t in tasks) == [0, 1, 2, 3, 4, 5]


def test_recorded_slurmdb_keeps_every_attempt_and_the_last_one_is_the_end() -> None:
    records = jobs_from_slurmdb({"jobs": json.loads((DATA / "slurmdb_v0042_requeued.json").read_text())})
    assert [(j.state, sorted(j.flags), j.restarts) for j in records] == [
        ("PENDING", ["REQUEUED"], 0),
        ("FAILED", [], 1),
    ]
    (last,) = latest_attempts(records)
    assert (last.state, last.exit_code, last.source) == ("FAILED", 4, "accounting")
