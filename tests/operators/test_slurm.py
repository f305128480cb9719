"""Slurm operators and the cluster.env sensor end to end, over REST and over SSH, on real Slurm."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pendulum
import pytest
from airflow.providers.common.compat.sdk import AirflowException

from airflow_provider_pathways.airflow_features import RETRY_POLICIES
from airflow_provider_pathways.hooks.slurm import SlurmHook
from airflow_provider_pathways.operators.slurm import (
    CancelSlurmJobOperator,
    PathwaysSlurmServiceOperator,
    SlurmJobOperator,
)
from tests.slurm.conftest import Sandbox, wait_for
from tests.support.airflow_runs import clear_and_rerun, load_dag, run_dag
from tests.support.airflow_versions import TASK_LOG_IN_OUTPUT
from tests.support.lost_answer import LosingRelay
from tests.support.slurm_scripts import (
    copy_service_scripts,
    logged_proxy,
    start_service,
    stop_service,
    wait_until_alone,
)
from tests.support.task_kill import FirstTry, killed_when

DAGS = "slurm_scenarios.py"
TRANSPORTS = ["slurm_rest", "slurm_ssh"]
pytestmark = [pytest.mark.slurm]


def squeue(*args: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, check=True).stdout
    return [line.split() for line in out.splitlines() if line.strip()]  # type: ignore[misc]


def job_state(job_id: int | str) -> str:
    out = subprocess.run(
        ["scontrol", "-o", "show", "job", str(job_id)], capture_output=True, text=True, check=False
    ).stdout
    for field in out.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return "UNKNOWN"


def slice_runs(array: int | str) -> list[tuple[int, int]]:
    """(start, end) in epoch seconds of each ended task of a worker array, as scontrol shows it."""
    out = subprocess.run(
        ["scontrol", "-o", "show", "job", str(array)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SLURM_TIME_FORMAT": "%s"},
    ).stdout
    runs = []
    for line in out.splitlines():
        fields = dict(field.split("=", 1) for field in line.split() if "=" in field)
        if fields.get("StartTime", "").isdigit() and fields.get("EndTime", "").isdigit():
            runs.append((int(fields["StartTime"]), int(fields["EndTime"])))
    return runs


def params(slurm_cluster: dict[str, str], conn: str, **extra: str) -> dict[str, str]:
    return {"conn": conn, "scripts": slurm_cluster["SLURM_SANDBOX_SCRIPTS_DIR"], **extra}


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_failing_workload_fails_at_once_with_exit_code_and_output(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    outcome = run_dag(load_dag(DAGS, "slurm_workload_fails"), params(slurm_cluster, conn))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "failed"
    assert outcome.try_number == 1  # retries=3, yet a program error is not retried
    assert "exit code 3" in logs
    assert "ValueError: bad batch" in logs  # the output tail reaches the task log
    assert outcome.xcom["job"]["state"] == "FAILED"


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_preempted_workload_is_retried_and_then_succeeds(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    marker = f"/tmp/pathways-preempt-{uuid.uuid4().hex}"
    hog: list[str] = []

    def preempt_when_running() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            running = [row for row in squeue("-p", "preemptible", "-t", "R", "-o", "%i") if row]
            if running and Path(marker).exists():
                cpus = slurm_cluster["SLURM_SANDBOX_CPUS"]
                out = subprocess.run(
                    ["sbatch", "--parsable", "-p", "high", "-c", cpus, "--wrap", "sleep 2"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                hog.append(out.strip())
                return
            time.sleep(0.1)

    thread = threading.Thread(target=preempt_when_running, daemon=True)
    thread.start()
    outcome = run_dag(load_dag(DAGS, "slurm_workload_preempted"), params(slurm_cluster, conn, marker=marker))[
        "train"
    ]
    thread.join(5)
    logs = capfd.readouterr().out
    assert hog, "the workload never ran"
    assert outcome.state == "success"
    assert outcome.try_number == 2
    if RETRY_POLICIES:  # the retry policy's reason (Airflow 3.3+)
        assert "preemption, retrying with backoff" in logs
    assert "second run: finishing" in logs


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_killed_workload_is_cancelled_and_a_second_cancel_is_harmless(
    slurm_cluster: dict[str, str], conn: str
) -> None:
    dag = load_dag(DAGS, "slurm_kill_on_timeout")
    outcome = run_dag(dag, params(slurm_cluster, conn))["train"]
    assert outcome.state == "failed"
    job_id = outcome.xcom["job_id"]
    deadline = time.monotonic() + 20
    while job_state(job_id) not in ("CANCELLED", "UNKNOWN") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job_state(job_id) == "CANCELLED"
    dag.get_task("train").on_kill()  # the job already ended: nothing happens


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_bad_input_fails_before_submission_naming_the_field(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    outcomes = run_dag(load_dag(DAGS, "slurm_bad_input"), params(slurm_cluster, conn))
    logs = capfd.readouterr().out
    for task_id, field in [
        ("bad_shape", "slice_shape"),
        ("min_over_max", "min_slices"),
        ("bad_bucket", "gcs_bucket"),
        ("missing_script", "/nonexistent/start_pathways.sh"),
    ]:
        assert outcomes[task_id].state == "failed", task_id
        assert outcomes[task_id].try_number == 1, task_id
        assert field in logs, task_id
    names = ",".join(f"slurm_bad_input.{task_id}" for task_id in outcomes)  # the operators' job names
    assert squeue("-t", "all", "-n", names, "-o", "%i") == []  # nothing was submitted


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_service_that_dies_fails_the_sensor_fast_naming_its_state(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    env_path = f"~/pathways/tests/{uuid.uuid4().hex}.env"
    outcomes = run_dag(
        load_dag(DAGS, "slurm_service_dies"), params(slurm_cluster, conn, cluster_env=env_path)
    )
    elapsed = time.monotonic() - started
    logs = capfd.readouterr().out
    assert outcomes["service"].state == "success"
    assert outcomes["ready"].state == "failed"
    assert outcomes["ready"].try_number == 1
    assert "ended before it was ready: FAILED" in logs
    assert elapsed < 60  # the sensor's timeout is 300 s


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_service_that_ended_fails_the_sensor_without_spending_its_retries(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    env_path = f"~/pathways/tests/{uuid.uuid4().hex}.env"
    outcomes = run_dag(
        load_dag(DAGS, "slurm_service_ends"), params(slurm_cluster, conn, cluster_env=env_path)
    )
    logs = capfd.readouterr().out
    assert outcomes["service"].state == "success"
    assert (outcomes["ready"].state, outcomes["ready"].try_number) == ("failed", 1)  # retries=2
    assert "ended before it was ready: COMPLETED" in logs


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_stale_cluster_env_from_an_earlier_run_is_ignored(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    home = Path(slurm_cluster["SLURM_SANDBOX_USER_HOME"])
    name = f"{uuid.uuid4().hex}.env"
    stale = home / "pathways" / "tests" / name
    stale.parent.mkdir(parents=True, exist_ok=True)
    user = slurm_cluster["SLURM_SANDBOX_USER"]
    for folder in (stale.parent.parent, stale.parent):  # jobs run as the cluster user write here
        shutil.chown(folder, user=user, group=user)
    stale.write_text("PATHWAYS_PROXY_ADDRESS=grpc://10.9.9.9:29000\n")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    outcomes = run_dag(
        load_dag(DAGS, "slurm_stale_cluster_env"),
        params(slurm_cluster, conn, cluster_env=f"~/pathways/tests/{name}"),
    )
    logs = capfd.readouterr().out
    assert outcomes["ready"].state == "failed"  # timed out: the old file never counted
    assert "older than the service job" in logs
    assert outcomes["stop"].state == "success"
    service = outcomes["service"].xcom["job_id"]
    wait_for(lambda: job_state(service) == "CANCELLED", f"service job {service} to end CANCELLED")


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_example_dag_runs_service_readiness_workload_and_teardown(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str], gcs: Any
) -> None:
    conf = {
        "slurm_conn_id": conn,
        "scripts_dir": slurm_cluster["SLURM_SANDBOX_SCRIPTS_DIR"],
        "workload_script": Path(slurm_cluster["SLURM_SANDBOX_RUN_WORKLOAD_SCRIPT"]).name,
    }
    outcomes = run_dag(load_dag("example_pathways_slurm.py", "example_pathways_slurm"), conf)
    logs = capfd.readouterr().out
    assert {k: v.state for k, v in outcomes.items()} == {
        "start_pathways": "success",
        "wait_for_pathways": "success",
        "train": "success",
        "stop_pathways": "success",
        "cleanup_compilation_cache": "success",
    }
    ready = outcomes["wait_for_pathways"].xcom["return_value"]
    assert ready["proxy_address"].startswith("grpc://127.0.0.1:")
    assert ready["running_slices"] >= 2
    assert f"Pathways proxy address: {ready['proxy_address']}" in logs  # the workload read cluster.env
    service_id = outcomes["start_pathways"].xcom["job_id"]
    deadline = time.monotonic() + 30
    while job_state(service_id) not in ("CANCELLED", "COMPLETED") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job_state(service_id) == "CANCELLED"
    array = ready["worker_array_job_id"]
    while squeue("-j", str(array), "-t", "R,PD", "-o", "%i") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert squeue("-j", str(array), "-t", "R,PD", "-o", "%i") == []  # the worker slices went too
    # The workload's TPU-hours: 8 chips per 2x4 slice x the time its slices ran while it ran, as
    # Slurm recorded it (each slice's start and end; the workload's own)
    job = outcomes["train"].xcom["job"]
    start, end = (pendulum.parse(job[key]).timestamp() for key in ("start_time", "end_time"))
    seconds = sum(max(0, min(stop, end) - max(begin, start)) for begin, stop in slice_runs(array))
    assert seconds >= 2 * (end - start) > 0  # min_slices ran throughout
    usage = outcomes["train"].xcom["tpu_hours"]
    assert usage["tries"][0]["slice_hours"] == pytest.approx(seconds / 3600)
    assert usage["total"] == pytest.approx(8 * seconds / 3600, abs=1e-6) and usage["complete"]
    assert f"TPU-hours: try 1 {8 * seconds / 3600:.4f} (TPU: 8 chips x {seconds / 60:.2f} slice-min)" in logs


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_retry_reconnects_to_the_job_still_running(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    name = f"reattach-{uuid.uuid4().hex[:8]}"
    marker = f"/tmp/pathways-reattach-{uuid.uuid4().hex}"
    outcome = run_dag(
        load_dag(DAGS, "slurm_reattach"), params(slurm_cluster, conn, marker=marker, job_name=name)
    )["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "success"
    assert outcome.try_number == 2
    assert "Reattaching to Slurm job" in logs
    assert len(squeue("-t", "all", "-n", name, "-o", "%i")) == 1  # one job, followed by both tries
    assert outcome.xcom["return_value"]["state"] == "COMPLETED"


@pytest.mark.parametrize("conn", ["slurm_ssh"])
def test_retry_after_the_job_finished_returns_its_result_without_resubmitting(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    name = f"finished-{uuid.uuid4().hex[:8]}"
    marker = f"/tmp/pathways-reattach-{uuid.uuid4().hex}"
    dag = load_dag(DAGS, "slurm_reattach_finished")
    outcome = run_dag(dag, params(slurm_cluster, conn, marker=marker, job_name=name))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "success" and outcome.try_number == 2
    assert "succeeded after an earlier try ended; reporting it, not running it again" in logs
    assert len(squeue("-t", "all", "-n", name, "-o", "%i")) == 1


@pytest.mark.parametrize("conn", ["slurm_ssh"])
def test_a_cleared_task_after_a_failure_it_reported_submits_a_fresh_job(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    name = f"cleared-{uuid.uuid4().hex[:8]}"
    marker = f"/tmp/pathways-cleared-{uuid.uuid4().hex}"
    dag, when = load_dag(DAGS, "slurm_cleared_after_failure"), pendulum.datetime(2026, 3, 1, tz="UTC")
    conf = params(slurm_cluster, conn, marker=marker, job_name=name)
    assert run_dag(dag, conf, logical_date=when)["train"].state == "failed"
    cleared = clear_and_rerun(dag, when)["train"]
    assert cleared.state == "success"  # not stuck on the first try's failure
    assert len(squeue("-t", "all", "-n", name, "-o", "%i")) == 2  # the failed job and a fresh one


#: A cleared task reports the success its earlier try remembered, without reading the job.
REPORTED_AGAIN = "succeeded and an earlier try reported it; reporting it again, not running it again"
#: What a try that followed its job to a success pushes to XCom (``submitted_request`` aside: a try
#: that submits nothing pushes none).
SUCCESS_XCOMS = ("job_id", "job", "return_value")


@pytest.mark.parametrize("conn", ["slurm_ssh"])
def test_a_cleared_task_whose_job_succeeded_reports_it_again_without_resubmitting(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    name = f"cleared-ok-{uuid.uuid4().hex[:8]}"
    dag, when = load_dag(DAGS, "slurm_cleared_after_success"), pendulum.datetime(2026, 3, 2, tz="UTC")
    assert run_dag(dag, params(slurm_cluster, conn, job_name=name), logical_date=when)["train"].state == (
        "success"
    )
    capfd.readouterr()
    cleared = clear_and_rerun(dag, when)["train"]
    logs = capfd.readouterr().out
    assert cleared.state == "success"
    if TASK_LOG_IN_OUTPUT:
        assert REPORTED_AGAIN in logs
    assert cleared.xcom["return_value"]["state"] == "COMPLETED"
    assert cleared.xcom["job_id"] == cleared.xcom["return_value"]["job_id"]
    assert len(squeue("-t", "all", "-n", name, "-o", "%i")) == 1


@pytest.mark.slow
def test_a_cleared_task_reports_its_success_again_once_the_cluster_forgot_the_job(
    slurm_cluster_without_accounting: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    """A cluster without accounting forgets an ended job MinJobAge (30 s) after its end. A task
    cleared after that reports the success its try remembered, with the same XComs, and submits
    nothing (it used to fail with PathwaysOutcomeUnknown): over REST and SSH, polling and deferred.
    One purge wait serves all four."""
    cluster = Sandbox(slurm_cluster_without_accounting)
    workdir = cluster.user_dir()
    dag = load_dag(DAGS, "slurm_cleared_after_forgotten_success")
    name = f"forgotten-{uuid.uuid4().hex[:8]}"
    firsts = {}
    for day, conn in enumerate(TRANSPORTS, start=3):
        when = pendulum.datetime(2026, 3, day, tz="UTC")
        conf = params(slurm_cluster_without_accounting, conn, job_name=f"{name}-{conn}", workdir=str(workdir))
        first = run_dag(dag, conf, logical_date=when)
        assert {task: o.state for task, o in first.items()} == {
            "train_polling": "success",
            "train_deferred": "success",
        }
        firsts[conn] = (when, first)
    job_ids = [o.xcom["job_id"] for _, first in firsts.values() for o in first.values()]

    def forgotten() -> bool:
        return all(
            not cluster.run("scontrol", "-o", "show", "job", str(j), check=False).stdout.strip()
            for j in job_ids
        )

    wait_for(
        forgotten, f"slurmctld to forget jobs {job_ids}", timeout=(cluster.min_job_age or 0) + 75, interval=1
    )
    capfd.readouterr()
    for conn, (when, first) in firsts.items():
        cleared = clear_and_rerun(dag, when)
        logs = capfd.readouterr().out
        for task, outcome in cleared.items():
            failures = [line for line in logs.splitlines() if "Error" in line or "Unknown" in line]
            assert (outcome.state, outcome.try_number) == ("success", 2), (conn, task, failures[-4:])
            again = {key: outcome.xcom.get(key) for key in SUCCESS_XCOMS}
            assert again == {key: first[task].xcom[key] for key in SUCCESS_XCOMS}, (conn, task)
            assert again["return_value"]["state"] == "COMPLETED", (conn, task)
            assert "submitted_request" not in outcome.xcom, (conn, task)  # nothing was submitted
        if TASK_LOG_IN_OUTPUT:
            assert logs.count(REPORTED_AGAIN) == 2, conn
    names = ",".join(f"{name}-{conn}-{mode}" for conn in TRANSPORTS for mode in ("polling", "deferred"))
    assert cluster.run("squeue", "-h", "-t", "all", "-n", names, "-o", "%i").stdout.split() == []


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_native_templates_reach_the_job_as_text_and_rendered_paths(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    workdir = slurm_cluster["SLURM_SANDBOX_USER_HOME"]
    outcome = run_dag(load_dag(DAGS, "slurm_native_templates"), params(slurm_cluster, conn, workdir=workdir))
    logs = capfd.readouterr().out
    assert outcome["train"].state == "success"
    assert f"STEPS=3 VERBOSE=true PWD={workdir}" in logs  # the output tail


@pytest.mark.parametrize(
    ("field", "value"),
    [("slice_shape", "2x4\n"), ("gcs_bucket", "my-bucket\n"), ("environment", {"A\n": "1"})],
)
def test_values_with_a_trailing_newline_are_refused(field: str, value: Any) -> None:
    # Jinja drops one trailing newline of a rendered field, so this is what a value passed as is meets.
    from airflow_provider_pathways.operators.slurm import PathwaysSlurmServiceOperator

    arguments: dict[str, Any] = {
        "slice_shape": "2x4",
        "min_slices": 1,
        "max_slices": 2,
        "gcs_bucket": "my-bucket",
    }
    operator = PathwaysSlurmServiceOperator(
        task_id="service", script_path="/x.sh", **{**arguments, field: value}
    )
    assert any(problem.startswith(f"{field}") for problem in operator.input_problems())


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_service_operator_waits_for_readiness_deferred_and_polling(
    slurm_cluster: dict[str, str], conn: str
) -> None:
    env = f"{slurm_cluster['SLURM_SANDBOX_USER_HOME']}/pathways/tests/{uuid.uuid4().hex}.env"
    outcomes = run_dag(load_dag(DAGS, "slurm_service_ready"), params(slurm_cluster, conn, cluster_env=env))
    for mode in ("deferred", "polling"):
        service = outcomes[f"service_{mode}"]
        assert service.state == "success", mode
        assert service.xcom["proxy_address"].startswith("grpc://127.0.0.1:"), mode
        assert service.xcom["return_value"]["running_slices"] >= 2, mode
        assert outcomes[f"stop_{mode}"].state == "success", mode
        job_id = service.xcom["job_id"]
        wait_for(lambda job_id=job_id: job_state(job_id) == "CANCELLED", f"service {job_id} to be cancelled")


@pytest.mark.parametrize("conn", ["slurm_rest"])
def test_clearing_a_service_task_whose_service_still_serves_follows_it_without_deferring(
    slurm_cluster: dict[str, str],
    conn: str,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The service task had succeeded (ready), so a clear killed nothing: the cleared try follows
    the same service, finds it ready and does not defer (its trigger would fire at once, before
    Airflow 3.3's scheduler may have processed the deferral: apache/airflow#72716)."""
    env = f"{slurm_cluster['SLURM_SANDBOX_USER_HOME']}/pathways/tests/{uuid.uuid4().hex}.env"
    dag, when = load_dag(DAGS, "slurm_service_cleared_while_serving"), pendulum.datetime(2026, 3, 9, tz="UTC")
    first = run_dag(dag, params(slurm_cluster, conn, cluster_env=env), logical_date=when)["service"]
    assert first.state == "success"
    capfd.readouterr()
    caplog.clear()
    try:
        cleared = clear_and_rerun(dag, when)["service"]
        logs = capfd.readouterr().out
        assert cleared.state == "success"
        assert "Pausing task as DEFERRED" not in logs + caplog.text  # no trigger ran
        assert cleared.xcom["job_id"] == first.xcom["job_id"]  # the same service, not restarted
        assert cleared.xcom["proxy_address"] == first.xcom["proxy_address"]
        assert job_state(first.xcom["job_id"]) == "RUNNING"
    finally:
        stop = CancelSlurmJobOperator(
            task_id="stop", slurm_conn_id=conn, job_ids=str(first.xcom["job_id"]), cluster_env_path=env
        )
        stop.execute({})  # type: ignore[arg-type]


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_mapped_tasks_each_follow_their_own_job_deferred_and_polling(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    outcomes = run_dag(load_dag(DAGS, "slurm_mapped"), params(slurm_cluster, conn))
    logs = capfd.readouterr().out
    for mode in ("deferred", "polling"):
        job_ids = set()
        for index in range(3):
            outcome = outcomes[f"train_{mode}[{index}]"]
            assert outcome.state == "success", (mode, index)
            job_id = outcome.xcom["return_value"]["job_id"]
            assert job_id == outcome.xcom["job_id"] == outcome.xcom["job"]["job_id"], (mode, index)
            assert outcome.xcom["job"]["state"] == "COMPLETED", (mode, index)
            job_ids.add(job_id)
        assert len(job_ids) == 3, mode  # three jobs, each index reporting its own
    for index in range(3):
        assert f"shard {index} done" in logs  # each job's output tail reached its task log


def test_more_slices_than_the_clusters_max_array_size_are_refused_before_submission(
    slurm_cluster: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    # MaxArraySize is read with scontrol over SSH (slurmrestd serves it from v0.0.45 on); the
    # sandbox cluster keeps Slurm's default, 1001.
    outcome = run_dag(load_dag(DAGS, "slurm_too_many_slices"), params(slurm_cluster, "slurm_ssh"))["service"]
    logs = capfd.readouterr().out
    assert outcome.state == "failed" and outcome.try_number == 1
    assert "max_slices: 10000 is more than the cluster's MaxArraySize (1001)" in logs
    assert squeue("-t", "all", "-n", "slurm_too_many_slices.service", "-o", "%i") == []


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_two_service_jobs_at_once_each_read_their_own_cluster_env(
    slurm_cluster_version: dict[str, str], conn: str
) -> None:
    """Given the path (PATHWAYS_CLUSTER_ENV for the sandbox script), each service job of one name
    writes a cluster.env of its own task instance, and each operator reads its own."""
    scripts = copy_service_scripts(slurm_cluster_version)
    name = f"pair-{uuid.uuid4().hex[:8]}"
    dag = load_dag(DAGS, "slurm_two_services_own_files")
    outcomes = run_dag(dag, {"conn": conn, "scripts": str(scripts), "job_name": name})
    assert {k: v.state for k, v in outcomes.items()} == {
        "first": "success",
        "second": "success",
        "stop": "success",
    }
    results = [outcomes[task].xcom["return_value"] for task in ("first", "second")]
    for task, result in zip(("first", "second"), results, strict=True):
        assert result["cluster_env"]["PATHWAYS_SERVICE_JOB_ID"] == str(result["job_id"]), task
        assert result["proxy_address"] == logged_proxy(scripts, result["job_id"]), task
        assert result["cluster_env_path"].startswith(f"~/pathways/airflow/{dag.dag_id}.{task}."), task
    assert results[0]["cluster_env_path"] != results[1]["cluster_env_path"]


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_a_second_service_job_sharing_cluster_env_is_refused_naming_the_first(
    slurm_cluster_version: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Seed 002's script writes ~/pathways/cluster.env and names no job in it: the second service
    job of one user and name cannot tell its file (or worker array) from the first's, so it waits
    and ends at its timeout saying why, instead of taking the first's proxy."""
    scripts = copy_service_scripts(slurm_cluster_version)
    name = f"pair-{uuid.uuid4().hex[:8]}"
    hook = SlurmHook(slurm_conn_id=conn)
    try:
        wait_until_alone(hook)  # the first service tells its file and array only while alone
        outcomes = run_dag(
            load_dag(DAGS, "slurm_two_services_shared_file"),
            {"conn": conn, "scripts": str(scripts), "job_name": name},
        )
    finally:  # dag.test() runs no teardown after a failed setup: leave no service behind
        for job in hook.get_jobs_named(name):
            if job.active:
                stop_service(hook, scripts, job.job_id)
        hook.close()
    logs = capfd.readouterr().out
    assert outcomes["first"].state == "success", re.findall(r"Pathways service \d+: .*", logs)[-3:]
    first = outcomes["first"].xcom["return_value"]  # alone while it waited
    assert first["proxy_address"] == logged_proxy(scripts, first["job_id"])
    assert outcomes["second"].state == "failed"
    assert outcomes["second"].xcom.get("proxy_address") is None
    assert f"job(s) {first['job_id']} of the same Slurm user" in logs
    assert outcomes["stop"].state == "success"


@pytest.mark.parametrize("mode", ["deferred", "polling"])
@pytest.mark.parametrize("conn", TRANSPORTS)
def test_a_held_job_ends_the_wait_after_hold_timeout_and_is_cancelled(
    slurm_cluster: dict[str, str], conn: str, mode: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A job held since its submission (``sbatch --hold``: Slurm's reason ``JobHeldUser``) never
    starts by itself; after ``hold_timeout`` the wait ends, the job is cancelled and the try fails as
    an infrastructure failure (its program never ran). The reason is what real slurmctld reports."""
    name = f"held-{uuid.uuid4().hex[:8]}"
    dag = load_dag(DAGS, f"slurm_held_{mode}")
    outcome = run_dag(dag, params(slurm_cluster, conn, job_name=name))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "failed" and outcome.try_number == 1
    assert "will not start: it is held (scontrol hold, sbatch --hold or scontrol requeuehold)" in logs
    assert re.search(r"\(JobHeldUser\) and stayed held for \d+s, longer than hold_timeout \(0s\)", logs)
    assert "it was cancelled" in logs
    assert job_state(outcome.xcom["job_id"]) == "CANCELLED"


@pytest.mark.parametrize("mode", ["deferred", "polling"])
@pytest.mark.parametrize("conn", TRANSPORTS)
def test_a_job_requeued_more_often_than_max_requeues_is_cancelled_as_a_preemption(
    slurm_cluster: dict[str, str], conn: str, mode: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """``scontrol requeue`` of the running job (as preemption with ``PreemptMode=REQUEUE`` or a node
    failure does): Slurm puts it back PENDING with ``Restarts=1``; past ``max_requeues`` the wait ends
    as a preemption and the job is cancelled instead of being waited for without end."""
    name = f"requeued-{uuid.uuid4().hex[:8]}"
    requeued: list[str] = []

    def requeue_when_running() -> None:
        rows = wait_for(lambda: squeue("-n", name, "-t", "R", "-o", "%i"), f"job {name} to run", 60)
        subprocess.run(["scontrol", "requeue", rows[0][0]], check=True, capture_output=True)
        requeued.append(rows[0][0])

    thread = threading.Thread(target=requeue_when_running, daemon=True)
    thread.start()
    outcome = run_dag(
        load_dag(DAGS, f"slurm_requeued_too_often_{mode}"), params(slurm_cluster, conn, job_name=name)
    )["train"]
    thread.join(5)
    logs = capfd.readouterr().out
    assert requeued, "the job never ran"
    assert outcome.state == "failed" and outcome.try_number == 1
    assert "was requeued 1 times (preempted or its node failed), more than max_requeues (0)" in logs
    assert "it was cancelled" in logs
    assert job_state(requeued[0]) == "CANCELLED"


def _cluster_env_value(path: str, key: str) -> str | None:
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return values.get(key, "").strip() or None


@pytest.mark.parametrize("mode", ["deferred", "polling"])
@pytest.mark.parametrize("conn", TRANSPORTS)
def test_a_slice_lost_under_a_failing_workload_is_a_preemption_and_is_retried(
    slurm_cluster: dict[str, str], conn: str, mode: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A worker array task (a slice) of the service is requeued by Slurm while the workload runs (as
    preemption with ``PreemptMode=REQUEUE`` or a node failure does: ``scontrol requeue``), and the
    workload dies with DATA_LOSS: a preemption, retried, not the program's failure. Real slurmctld
    holds the requeued slice about two minutes and sets its submit time to the requeue's moment,
    so the slice is still pending, or running again, only after the workload ended."""
    token = uuid.uuid4().hex
    marker = f"/tmp/pathways-slice-lost-{token}"
    env = f"{slurm_cluster['SLURM_SANDBOX_USER_HOME']}/pathways/tests/{token}.env"
    name = f"slice-lost-{token[:8]}"
    lost: list[str] = []

    def lose_a_slice() -> None:
        wait_for(lambda: squeue("-n", name, "-t", "R", "-o", "%i"), f"workload {name} to run", 180)
        array = _cluster_env_value(env, "PATHWAYS_WORKER_ARRAY_JOB_ID")
        assert array, f"{env} names no worker array"
        subprocess.run(["scontrol", "requeue", f"{array}_1"], check=True, capture_output=True)
        lost.append(f"{array}_1")
        Path(marker).touch()

    thread = threading.Thread(target=lose_a_slice, daemon=True)
    thread.start()
    try:
        conf = params(slurm_cluster, conn, marker=marker, cluster_env=env, job_name=name)
        outcomes = run_dag(load_dag(DAGS, f"slurm_slice_lost_{mode}"), conf)
        thread.join(5)
    finally:
        for path in (marker, f"{marker}.failed"):
            Path(path).unlink(missing_ok=True)
    logs = capfd.readouterr().out
    assert lost, "the workload never ran"
    train = outcomes["train"]
    assert train.state == "success" and train.try_number == 2
    assert f"slice {lost[0]} was requeued while the workload ran" in logs
    assert "a lost slice, retried as a preemption" in logs
    assert "second run: finishing" in logs
    assert outcomes["stop"].state == "success"


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_a_replaced_polling_service_cancels_the_worker_array_its_script_leaves_running(
    slurm_cluster: dict[str, str], conn: str
) -> None:
    """Nothing published promises that the service script cancels its worker array when it ends:
    with a script that leaves it running, the polling service operator's own cancel (one for
    replacement, timeout and kill) still ends the slices, so a replacement never runs beside a
    second array."""
    scripts = copy_service_scripts(slurm_cluster)
    hook = SlurmHook(slurm_conn_id=conn)
    name = f"leaves-workers-{uuid.uuid4().hex[:8]}"
    service, path = start_service(hook, scripts, name, published=False, leaves_workers=True)
    operator = PathwaysSlurmServiceOperator(
        task_id="service",
        slurm_conn_id=conn,
        slice_shape="2x4",
        min_slices=2,
        max_slices=2,
        gcs_bucket="my-bucket",
        cluster_env_path=path,
        deferrable=False,
    )
    try:
        array = wait_for(
            lambda: _cluster_env_value(path, "PATHWAYS_WORKER_ARRAY_JOB_ID"), "the service to be ready", 90
        )
        operator.discard_job(service, "replaced by a fresh service job")
        wait_for(lambda: job_state(service) == "CANCELLED", "the service to be cancelled")

        def slice_states() -> set[str]:
            return {row[0] for row in squeue("-r", "-j", str(array), "-t", "all", "-o", "%T")}

        wait_for(lambda: slice_states() == {"CANCELLED"}, "every worker slice to be cancelled")
    finally:
        stop_service(hook, scripts, service)
        hook.close()
        operator.hook.close()


def _run_losing_the_submission_answer(
    slurm_cluster: dict[str, str], monkeypatch: pytest.MonkeyPatch, dag_id: str, name: str
) -> tuple[Any, list[bool]]:
    """Run ``dag_id`` over slurmrestd through a relay that loses the answer to the first job
    submission (tests/support/lost_answer.py): the outcome, and per submission whether it was answered."""
    rest = json.loads(os.environ["AIRFLOW_CONN_SLURM_REST"])
    with LosingRelay(rest["host"], int(rest["port"])) as relay:
        relay.drop("/job/submit")
        lossy = {**rest, "host": "127.0.0.1", "port": relay.port}
        monkeypatch.setenv("AIRFLOW_CONN_SLURM_REST_LOSSY", json.dumps(lossy))
        conf = params(slurm_cluster, "slurm_rest_lossy", job_name=name)
        outcome = run_dag(load_dag(DAGS, dag_id), conf)["train"]
    return outcome, [answered for request, answered in relay.requests if request.endswith("/job/submit")]


def test_a_job_whose_submission_answer_was_lost_is_followed_not_submitted_again(
    slurm_cluster: dict[str, str], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """slurmrestd submits the job, its answer never comes back: try 1 fails without the id (a lost
    watch, retried also on the preemption budget). Every job carries its task instance's marker in
    ``--comment``, and try 2 finds and follows that job instead of running the program again."""
    name = f"lost-answer-{uuid.uuid4().hex[:8]}"
    outcome, submits = _run_losing_the_submission_answer(
        slurm_cluster, monkeypatch, "slurm_lost_answer", name
    )
    logs = capfd.readouterr().out
    assert submits == [False]  # one submission, its answer lost; none from try 2
    assert outcome.state == "success" and outcome.try_number == 2
    assert "which an earlier try of this task instance submitted without learning its id" in logs
    assert "the one run: done" in logs
    assert len(squeue("-t", "all", "-n", name, "-o", "%i")) == 1


def test_a_job_whose_submission_answer_was_lost_on_the_last_try_is_cancelled(
    slurm_cluster: dict[str, str], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same lost answer with ``retries=0``: no try will follow the job the cluster made, so the
    try finds it by its task instance's marker and cancels it (it ran unwatched to its end)."""
    name = f"lost-last-{uuid.uuid4().hex[:8]}"
    outcome, submits = _run_losing_the_submission_answer(
        slurm_cluster, monkeypatch, "slurm_lost_answer_last_try", name
    )
    logs = capfd.readouterr().out
    assert submits == [False] and (outcome.state, outcome.try_number) == ("failed", 1)
    assert "the answer to the submission was lost" in logs and "this was the last try" in logs
    [[job_id]] = squeue("-t", "all", "-n", name, "-o", "%i")
    assert job_state(job_id) == "CANCELLED"


def test_a_try_killed_while_submitting_cancels_the_job_its_submission_makes(
    slurm_cluster: dict[str, str], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user marks the task failed while its submission is on its way to slurmrestd (a soak met
    it: the job then ran with no task watching it). The killed try knows no job id, and slurmrestd
    makes the job only after the kill began (the relay carries the held submission out once the
    try sends its next request). The try's ``on_kill`` finds the job by its marker and cancels it;
    the submission's answer, arriving after that, changes nothing: the try fails, saying so."""
    name = f"killed-submitting-{uuid.uuid4().hex[:8]}"
    rest = json.loads(os.environ["AIRFLOW_CONN_SLURM_REST"])
    with LosingRelay(rest["host"], int(rest["port"])) as relay:
        relay.hold("/job/submit", name.encode())
        slow = {**rest, "host": "127.0.0.1", "port": relay.port}
        monkeypatch.setenv("AIRFLOW_CONN_SLURM_REST_SLOW", json.dumps(slow))
        operator = SlurmJobOperator(
            task_id="train",
            slurm_conn_id="slurm_rest_slow",
            job_name=name,
            script="#!/bin/bash\nsleep 300\n",
            retries=0,
            deferrable=False,
        )
        with (
            killed_when(operator, relay.held),
            pytest.raises(AirflowException, match="killed while submitting"),
        ):
            operator.execute({"ti": FirstTry("killed_submitting", f"manual__{name}")})  # type: ignore[arg-type]
    logs = capfd.readouterr().out
    [[job_id]] = squeue("-t", "all", "-n", name, "-o", "%i")
    # cancelled: COMPLETING while slurmd ends the batch script, then CANCELLED
    wait_for(lambda: job_state(job_id) != "COMPLETING", f"job {job_id} to end", 30)
    assert job_state(job_id) == "CANCELLED"
    assert f"Killed while submitting; ended Slurm job {job_id}" in logs


class _WorkerFrozenAfterSubmitting:
    """The task instance of try 1 as the task runner gives it, whose worker stops (a network
    partition, SIGSTOP) in the first call after the submission: pushing the job id to XCom."""

    dag_id, task_id, map_index, try_number, max_tries = "superseded_early", "train", -1, 1, 0

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.frozen = threading.Event()
        self.thawed = threading.Event()

    def xcom_push(self, key: str, value: Any) -> None:
        if key == "job_id" and not self.frozen.is_set():
            self.frozen.set()
            self.thawed.wait(120)


@pytest.mark.parametrize("conn", TRANSPORTS)
def test_a_try_killed_right_after_submitting_leaves_the_job_a_newer_try_follows(
    slurm_cluster: dict[str, str], conn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Try 1 submits its job and its worker stops before it follows the job; try 2 takes the job
    over (its try number in the job's comment); when try 1's worker comes back its supervisor kills
    it (``on_kill``, from the signal handler, while ``execute`` is where it stopped). Try 1 knows
    which try it is from its start, so it leaves the job running for try 2 instead of cancelling
    it (the real deployment's ``superseded`` scenario met this once in a slow run)."""
    name = f"superseded-early-{uuid.uuid4().hex[:8]}"
    ti = _WorkerFrozenAfterSubmitting(run_id=f"manual__{name}")
    operator = SlurmJobOperator(
        task_id="train",
        slurm_conn_id=conn,
        job_name=name,
        script="#!/bin/bash\nsleep 300\n",
        deferrable=False,
        poll_interval=0.2,
    )
    failures: list[BaseException] = []

    def run_try_1() -> None:
        try:
            operator.execute({"ti": ti})  # type: ignore[arg-type]
        except BaseException as err:  # the job ends cancelled below: the try fails
            failures.append(err)

    thread = threading.Thread(target=run_try_1, daemon=True)
    thread.start()
    job_id = None
    try:
        assert ti.frozen.wait(60), "try 1 never submitted its job"
        rows = wait_for(lambda: squeue("-n", name, "-o", "%i"), f"job {name} in the queue", 60)
        job_id = rows[0][0]
        subprocess.run(  # try 2 follows the job now
            ["scontrol", "update", f"JobId={job_id}", f"Comment={_comment(job_id)} try=2"],
            check=True,
            capture_output=True,
        )
        operator.on_kill()  # try 1's worker is back: its supervisor kills it
        logs = capfd.readouterr().out
        left = f"Left Slurm job {job_id} alone: try 2 of this task instance follows it (this is try 1)"
        assert left in logs
        assert job_state(job_id) in ("PENDING", "RUNNING")
    finally:
        if job_id is not None:
            subprocess.run(["scancel", job_id], check=False)
        ti.thawed.set()
        thread.join(60)


def _comment(job_id: str) -> str:
    out = subprocess.run(
        ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=True
    ).stdout
    return out.split("Comment=", 1)[1].split(" ", 1)[0] if "Comment=" in out else ""


@pytest.mark.parametrize("conn", TRANSPORTS)
@pytest.mark.parametrize("dag_id", ["slurm_superseded_try", "slurm_superseded_deferred_try"])
def test_a_superseded_try_that_gives_up_leaves_the_job_a_newer_try_follows(
    slurm_cluster: dict[str, str], conn: str, dag_id: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Try 1 waits for its job, polling or deferred; try 2 of the same task instance follows the job
    meanwhile and marks it (its try number in the job's comment, after the task instance's marker).
    When try 1 then gives up (its execution_timeout while polling, its wait_timeout when resumed from
    the trigger), it leaves the job running for try 2 instead of cancelling it."""
    name = f"superseded-{uuid.uuid4().hex[:8]}"
    marked: list[str] = []

    def newer_try_follows() -> None:
        rows = wait_for(lambda: squeue("-n", name, "-t", "R", "-o", "%i"), f"job {name} to run", 60)
        job_id = rows[0][0]
        comment = _comment(job_id)
        assert comment.startswith("airflow-task-instance="), comment
        subprocess.run(
            ["scontrol", "update", f"JobId={job_id}", f"Comment={comment} try=2"],
            check=True,
            capture_output=True,
        )
        marked.append(job_id)

    thread = threading.Thread(target=newer_try_follows, daemon=True)
    thread.start()
    try:
        outcome = run_dag(load_dag(DAGS, dag_id), params(slurm_cluster, conn, job_name=name))["train"]
        thread.join(5)
        logs = capfd.readouterr().out
        assert marked, "the job never ran"
        assert outcome.state == "failed"  # try 1 timed out
        assert (
            f"Left Slurm job {marked[0]} alone: try 2 of this task instance follows it (this is try 1)"
            in logs
        )
        assert job_state(marked[0]) == "RUNNING"
    finally:
        for job_id in marked:
            subprocess.run(["scancel", job_id], check=False)
