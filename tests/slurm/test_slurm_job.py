"""The transport-independent Slurm job model: parsing (REST v0.0.38 recorded from the sandbox,
v0.0.40+ hand-written from the public OpenAPI shapes, scontrol text), outcomes, submission input."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_provider_pathways.failures import FailureClass
from airflow_provider_pathways.slurm_job import (
    ESLURM_INVALID_JOB_ID,
    JobOutcome,
    SlurmJob,
    SubmitRequest,
    decode_wait_status,
    expand_output_pattern,
    expand_task_ids,
    job_outcome,
    jobs_from_rest,
    jobs_from_scontrol,
    normalize_state,
    parse_sbatch_directives,
    parse_scontrol_record,
    parse_time_limit,
    path_wrapper_script,
    rest_error_numbers,
    rest_errors_text,
    rest_submit_body,
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


# ---- REST v0.0.40+ (hand-written from the public OpenAPI schemas) ------------------------------


def test_rest_v0040_requeued_flag_and_numbers() -> None:
    (job,) = jobs_from_rest(_load("rest_v0040_requeued.json"))
    assert job.job_id == 4101 and job.state == "PENDING" and job.flags == frozenset({"REQUEUED"})
    assert job.requeued and job.restarts == 1
    assert job.array_job_id is None and job.array_task_id is None
    assert job.submit_time == T0
    assert job.start_time is None and job.end_time is None and job.exit_code is None
    assert job.std_out == "/home/pathways/service-4101.out"
    assert job.partition == "tpu-v6e" and job.comment == "pathways-workers=4102"
    outcome, failure, message = job_outcome(job)
    assert (outcome, failure) == (JobOutcome.ACTIVE, FailureClass.PREEMPTED)
    assert "requeued" in message and "BeginTime" in message


def test_rest_v0041_array_tasks() -> None:
    jobs = _by_id(jobs_from_rest(_load("rest_v0041_array.json")))
    assert sorted(task for _, task in jobs) == [0, 1, 2, 3, 4, 5, 6, 7]
    for task in (4, 5, 6, 7):
        pending = jobs[(4102, task)]
        assert pending.state == "PENDING" and pending.array_job_id == 4102
        assert pending.std_out == f"/home/pathways/pathways/logs/slice-4102_{task}.log"
    done = jobs[(4103, 0)]
    assert done.state == "COMPLETED" and done.exit_code == 0 and done.end_time is not None
    assert job_outcome(done)[0] is JobOutcome.SUCCEEDED
    failed = jobs[(4104, 1)]
    assert (failed.state, failed.exit_code, failed.exit_signal) == ("FAILED", 3, 0)
    assert job_outcome(failed)[:2] == (JobOutcome.FAILED, FailureClass.USER_PROGRAM_FAILED)
    running = jobs[(4105, 2)]
    assert running.state == "RUNNING" and running.node_list == "tpu-slice-[0-3]"
    assert running.end_time is None and running.std_out == "/home/pathways/pathways/logs/slice-4102_2.log"
    completing = jobs[(4106, 3)]
    assert completing.state == "COMPLETING" and completing.active
    assert job_outcome(completing)[:2] == (JobOutcome.ACTIVE, None)


def test_rest_v0043_ended_jobs() -> None:
    jobs = {j.name: j for j in jobs_from_rest(_load("rest_v0043_ended.json"))}
    killed = jobs["killed"]
    assert (killed.exit_code, killed.exit_signal) == (0, 9)
    outcome, failure, message = job_outcome(killed)
    assert (outcome, failure) == (JobOutcome.FAILED, FailureClass.USER_PROGRAM_FAILED)
    assert "signal 9" in message
    assert killed.std_out == "/scratch/run/slurm-5001.out"
    oom = jobs["oom"]
    assert oom.std_out == "/scratch/run/oom.5002.out"
    assert job_outcome(oom)[:2] == (JobOutcome.FAILED, FailureClass.USER_PROGRAM_FAILED)
    assert "memory" in job_outcome(oom)[2]
    preempted = jobs["slice"]
    assert preempted.std_out == "/scratch/run/out/5003.log"
    assert job_outcome(preempted)[:2] == (JobOutcome.FAILED, FailureClass.PREEMPTED)
    assert job_outcome(jobs["lost"])[:2] == (JobOutcome.FAILED, FailureClass.PREEMPTED)
    outcome, failure, message = job_outcome(jobs["slow"])
    assert (outcome, failure) == (JobOutcome.FAILED, FailureClass.UNKNOWN)
    assert "time limit" in message and "TimeLimit" in message


def test_rest_v0044_submit_and_unknown_job() -> None:
    submit = _load("rest_v0044_submit.json")
    assert submit["job_id"] == submit["result"]["job_id"] == 6001
    unknown = _load("rest_v0044_unknown_job.json")
    assert rest_error_numbers(unknown["errors"]) == {ESLURM_INVALID_JOB_ID}
    assert jobs_from_rest(unknown) == []


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
        (
            _job("FAILED", reason="JobLaunchFailure"),
            JobOutcome.FAILED,
            FailureClass.UNKNOWN,
            "JobLaunchFailure",
        ),
        (_job("PREEMPTED"), JobOutcome.FAILED, FailureClass.PREEMPTED, "preempted"),
        (_job("NODE_FAIL", reason="NodeDown"), JobOutcome.FAILED, FailureClass.PREEMPTED, "NODE_FAIL"),
        (_job("BOOT_FAIL"), JobOutcome.FAILED, FailureClass.PREEMPTED, "BOOT_FAIL"),
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
        (_job("SOMETHING_NEW"), JobOutcome.ACTIVE, None, "unknown Slurm state"),
    ],
)
def test_job_outcome(job: SlurmJob, outcome: JobOutcome, failure: FailureClass | None, text: str) -> None:
    got_outcome, got_failure, message = job_outcome(job)
    assert (got_outcome, got_failure) == (outcome, failure)
    assert text in message and "7" in message


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
    assert merged.extra_options == {"cpus-per-task": "2"} and ignored == ["--mem"]
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
    assert job["tasks"] == {"set": True, "infinite": False, "number": 2}


def test_importing_the_model_is_light() -> None:
    code = (
        "import sys, airflow_provider_pathways.slurm_job as m\n"
        "heavy = [n for n in ('aiohttp', 'asyncssh', 'paramiko', 'airflow') if n in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
