"""The sandbox's Pathways scripts: the service job, its worker array and the sample workload."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import time
from pathlib import Path

import pytest
from slurm_sandbox_helpers import SCRIPTS_DIR, SlurmSandbox, ssh_run, wait_for

pytestmark = pytest.mark.slurm

START = SCRIPTS_DIR / "start_pathways.sh"
WORKLOAD = SCRIPTS_DIR / "run_workload.sh"


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


def proxy_banner(address: str) -> str:
    host, _, port = address.removeprefix("grpc://").rpartition(":")
    assert host == "127.0.0.1"
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        return conn.makefile().readline().strip()


#: The comment the submitter gives the service job (the provider's marks are one).
SUBMITTER_MARK = "submitted-by=sandbox-test"


def submit_service(
    slurm: SlurmSandbox, ssh, workdir: Path, min_slices: int, max_slices: int, **extra: str
) -> tuple[str, Path, Path]:
    """Submit start_pathways.sh over SSH as the cluster user; returns (job id, cluster.env, log)."""
    cluster_env = workdir / "cluster.env"
    env = {
        "SLICE_SHAPE": "2x4",
        "MIN_SLICES": str(min_slices),
        "MAX_SLICES": str(max_slices),
        "GCS_BUCKET": "gs://sandbox-bucket",
        "PATHWAYS_CLUSTER_ENV": str(cluster_env),
        "PATHWAYS_LOG_DIR": str(workdir),
        "PATHWAYS_POLL_SECONDS": "0.5",
        **extra,
    }
    assignments = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
    command = (
        f"cd {shlex.quote(str(workdir))} && {assignments} sbatch --parsable --output=service-%j.out "
        f"--comment={SUBMITTER_MARK} "
        f"{shlex.quote(slurm.settings['SLURM_SANDBOX_START_PATHWAYS_SCRIPT'])}"
    )
    rc, out, err = ssh_run(ssh, command)
    assert rc == 0, err
    job_id = out.strip().split(";")[0]
    return job_id, cluster_env, workdir / f"service-{job_id}.out"


def worker_array_of(slurm: SlurmSandbox, service_job: str) -> str:
    """Find the worker array of a service job by its name, as a client would.

    squeue's ``%F`` is the array's base job id. Not ``%A``: that is the id of each array
    element, which equals the base id only while the array is still one pending record; once
    the tasks start, ``%A`` of task 0 is another job (``30_0`` is job 32), and
    ``squeue -r -j 32`` lists that single task, not the array.
    """

    def find() -> str | None:
        out = slurm.run("squeue", "-h", "-n", f"pathways-workers-{service_job}", "-o", "%F").stdout.split()
        ids = set(out)
        assert len(ids) <= 1, f"more than one worker array for service job {service_job}: {sorted(ids)}"
        return ids.pop() if ids else None

    return wait_for(find, f"the worker array of service job {service_job}")


def running_tasks(slurm: SlurmSandbox, array_job: str) -> int:
    return sum(1 for state, _ in slurm.array_tasks(array_job).values() if state == "RUNNING")


# ------------------------------------------------------------------------------- no daemons


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"SLICE_SHAPE": "2x4; touch {marker}"}, "SLICE_SHAPE"),
        ({"MIN_SLICES": "$(touch {marker})"}, "MIN_SLICES"),
        ({"MAX_SLICES": "`touch {marker}`"}, "MAX_SLICES"),
        ({"MIN_SLICES": "5", "MAX_SLICES": "4"}, "must not exceed"),
        ({"GCS_BUCKET": "bucket' ; touch '{marker}"}, "GCS_BUCKET"),
        ({"GCS_BUCKET": ""}, "GCS_BUCKET"),
        ({"TPU_VERSION": "v6e && touch {marker}"}, "TPU_VERSION"),
        ({"PATHWAYS_PROXY_PORT": "1|touch {marker}"}, "PATHWAYS_PROXY_PORT"),
        ({"SLURM_JOB_ID": ""}, "sbatch"),
    ],
)
def test_service_rejects_bad_input(tmp_path: Path, overrides: dict[str, str], message: str) -> None:
    marker = tmp_path / "injected"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SLICE_SHAPE": "2x4",
        "MIN_SLICES": "1",
        "MAX_SLICES": "2",
        "GCS_BUCKET": "bucket",
        "SLURM_JOB_ID": "12345",
    }
    env.update({key: value.format(marker=marker) for key, value in overrides.items()})
    proc = subprocess.run(
        ["bash", str(START)], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert not marker.exists()
    assert not (tmp_path / "pathways").exists()


def _run_workload(tmp_path: Path, cluster_env: str | None, **env: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "cluster.env"
    if cluster_env is not None:
        path.write_text(cluster_env)
    full_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PATHWAYS_CLUSTER_ENV": str(path),
        "PATHWAYS_CLUSTER_ENV_TIMEOUT": "0",
        "WORKLOAD_STEPS": "3",
        "WORKLOAD_STEP_SECONDS": "0",
        **env,
    }
    return subprocess.run(["bash", str(WORKLOAD)], env=full_env, capture_output=True, text=True, timeout=30)


def test_workload_reads_cluster_env_without_executing_it(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    content = (
        "# comment\n\n"
        f"EVIL=$(touch {marker})\n"
        "PATHWAYS_PROXY_ADDRESS=grpc://127.0.0.1:1\n"
        "MY_PROXY='127.0.0.1:2'\n"
    )
    proc = _run_workload(tmp_path, content)
    assert proc.returncode == 0, proc.stderr
    assert "Pathways proxy address: grpc://127.0.0.1:1" in proc.stdout
    assert "step 3/3" in proc.stdout
    assert "does not answer" in proc.stdout
    assert not marker.exists()

    proc = _run_workload(tmp_path, content, PATHWAYS_PROXY_KEY="MY_PROXY", WORKLOAD_EXIT_CODE="7")
    assert proc.returncode == 7
    assert "JAX_BACKEND_TARGET=grpc://127.0.0.1:2" in proc.stdout
    assert "failed with exit code 7" in proc.stdout

    proc = _run_workload(tmp_path, content, PATHWAYS_REQUIRE_PROXY="1")
    assert proc.returncode == 4
    assert _run_workload(tmp_path, content, WORKLOAD_EXIT_CODE="1; touch x").returncode == 2
    assert _run_workload(tmp_path, content, PATHWAYS_PROXY_KEY="NOPE").returncode == 3
    (tmp_path / "cluster.env").unlink()
    assert _run_workload(tmp_path, None).returncode == 3


# ------------------------------------------------------------------------------- on Slurm


def test_service_writes_cluster_env_once_min_slices_run(slurm: SlurmSandbox, jobs: list[str], ssh) -> None:
    # Two service jobs side by side: each gets its own ports, worker array and cluster.env.
    first_dir, second_dir = slurm.user_jobs_dir(), slurm.user_jobs_dir()
    service, cluster_env, log = submit_service(slurm, ssh, first_dir, min_slices=2, max_slices=4)
    jobs.append(service)
    other, other_env, _ = submit_service(slurm, ssh, second_dir, min_slices=1, max_slices=2)
    jobs.append(other)
    array = worker_array_of(slurm, service)
    jobs.append(array)
    jobs.append(worker_array_of(slurm, other))

    wait_for(cluster_env.exists, "cluster.env", timeout=45)
    assert running_tasks(slurm, array) >= 2
    values = read_env_file(cluster_env)
    address = values["PATHWAYS_PROXY_ADDRESS"]
    assert re.fullmatch(r"grpc://127\.0\.0\.1:\d+", address)
    assert values["JAX_BACKEND_TARGET"] == address
    assert values["PATHWAYS_SERVICE_JOB_ID"] == service
    assert values["PATHWAYS_WORKER_ARRAY_JOB_ID"] == array
    assert values["PATHWAYS_INSTANCE_TYPE"] == "tpuv6e:2x4"
    assert values["PATHWAYS_GCS_SCRATCH_LOCATION"] == "gs://sandbox-bucket/pathways-scratch/shared"
    assert values["PATHWAYS_MIN_SLICES"] == "2"
    assert values["PATHWAYS_MAX_SLICES"] == "4"
    assert proxy_banner(address).startswith(f"pathways-sandbox proxy_server job={service} ")
    rm_host, _, rm_port = values["PATHWAYS_RESOURCE_MANAGER_ADDRESS"].rpartition(":")
    assert proxy_banner(f"{rm_host}:{rm_port}").startswith("pathways-sandbox resource_manager")

    # The log says 'ready' only after at least MIN_SLICES tasks ran.
    text = log.read_text()
    counts = [int(n) for n in re.findall(r"slices running: (\d+)/4", text.split("Pathways cluster ready")[0])]
    assert counts and counts[-1] >= 2
    assert f"worker array job id: {array}" in text
    # The service job keeps the comment it was submitted with (nothing published says the script
    # rewrites it; the provider marks its jobs there); the array's comment names the service.
    assert slurm.job(service)["Comment"] == SUBMITTER_MARK
    assert slurm.job(array)["Comment"] == f"pathways-service={service}"
    tasks = wait_for(
        lambda: (t := slurm.array_tasks(array)) and all(s == "RUNNING" for s, _ in t.values()) and t,
        "all four slices to run",
    )
    assert sorted(tasks) == ["0", "1", "2", "3"]
    # RUNNING does not mean the worker script has printed yet: wait for its output.
    worker_log = first_dir / f"pathways-workers-{service}_3.out"
    text = wait_for(
        lambda: worker_log.exists() and "TPU_TOPOLOGY=" in (t := worker_log.read_text()) and t,
        "slice 3's log",
    )
    assert "MEGASCALE_SLICE_ID=3" in text
    assert "MEGASCALE_NUM_SLICES=4" in text

    wait_for(other_env.exists, "the second cluster.env", timeout=45)
    other_address = read_env_file(other_env)["PATHWAYS_PROXY_ADDRESS"]
    assert other_address != address
    assert proxy_banner(other_address).startswith(f"pathways-sandbox proxy_server job={other} ")

    # A workload (as the cluster user) reads cluster.env and reaches the proxy; its exit code counts.
    workload = slurm.settings["SLURM_SANDBOX_RUN_WORKLOAD_SCRIPT"]
    submitted = {}
    for code in ("0", "3"):
        rc, out, err = ssh_run(
            ssh,
            f"cd {shlex.quote(str(first_dir))} && PATHWAYS_CLUSTER_ENV={shlex.quote(str(cluster_env))} "
            f"PATHWAYS_REQUIRE_PROXY=1 WORKLOAD_STEPS=3 WORKLOAD_STEP_SECONDS=0.1 WORKLOAD_EXIT_CODE={code} "
            f"sbatch --parsable --output=workload-%j.out {shlex.quote(workload)}",
        )
        assert rc == 0, err
        submitted[code] = out.strip().split(";")[0]
        jobs.append(submitted[code])
    assert slurm.wait_state(submitted["0"], "COMPLETED")["ExitCode"] == "0:0"
    assert slurm.wait_state(submitted["3"], "FAILED")["ExitCode"] == "3:0"
    output = (first_dir / f"workload-{submitted['0']}.out").read_text()
    assert f"Pathways proxy address: {address}" in output
    assert f"proxy answered: pathways-sandbox proxy_server job={service}" in output
    assert "step 3/3" in output

    # scancel of the service job takes its worker array down with it.
    slurm.run("scancel", service)
    slurm.wait_state(service, "CANCELLED")
    wait_for(
        lambda: all(state == "CANCELLED" for state, _ in slurm.array_tasks(array).values()),
        "the worker array to be cancelled",
    )
    assert "cancelling worker array" in log.read_text()
    assert read_env_file(cluster_env)["PATHWAYS_PROXY_ADDRESS"] == address  # left in place


def test_requeued_slice_keeps_the_service_up(slurm: SlurmSandbox, jobs: list[str], ssh) -> None:
    workdir = slurm.user_jobs_dir()
    service, cluster_env, log = submit_service(slurm, ssh, workdir, min_slices=2, max_slices=2)
    jobs.append(service)
    array = worker_array_of(slurm, service)
    jobs.append(array)
    wait_for(cluster_env.exists, "cluster.env", timeout=45)
    before = cluster_env.stat()
    address = read_env_file(cluster_env)["PATHWAYS_PROXY_ADDRESS"]

    # Requeue slice 1 (what Slurm does when a slice is preempted or fails).
    slurm.run("scontrol", "requeue", f"{array}_1")

    def held() -> bool:
        state, reason = slurm.array_tasks(array).get("1", ("", ""))
        return state == "PENDING" and reason == "BeginTime"

    wait_for(held, "slice 1 to be requeued and held")
    held_seen_at = time.time()
    wait_for(lambda: "Insufficient slices active: 1 < 2" in log.read_text(), "the service to notice")
    assert slurm.job_state(service) == "RUNNING"
    assert proxy_banner(address).startswith(f"pathways-sandbox proxy_server job={service} ")

    # Release the hold (Slurm would wait ~2 minutes), the slice comes back, the address stays.
    slurm.release_held(f"{array}_1", held_seen_at)
    wait_for(lambda: running_tasks(slurm, array) == 2, "slice 1 to run again")
    wait_for(
        lambda: log.read_text().count("Sufficient slices active: 2 >= 2") >= 2, "the service to see 2 slices"
    )
    after = cluster_env.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not rewritten
    assert slurm.job_state(service) == "RUNNING"
    assert slurm.job(f"{array}_1")["Restarts"] == "1"
    # --open-mode=append: the requeued task's log keeps its first run (once the rerun has logged).
    worker_log = workdir / f"pathways-workers-{service}_1.out"
    text = wait_for(lambda: "restart 1" in (t := worker_log.read_text()) and t, "the rerun of slice 1 to log")
    assert text.count("=== slice 1 start") == 2


def test_service_can_release_requeued_slices_itself(slurm: SlurmSandbox, jobs: list[str], ssh) -> None:
    workdir = slurm.user_jobs_dir()
    service, cluster_env, log = submit_service(
        slurm, ssh, workdir, min_slices=1, max_slices=1, PATHWAYS_RELEASE_REQUEUED="1"
    )
    jobs.append(service)
    array = worker_array_of(slurm, service)
    jobs.append(array)
    wait_for(cluster_env.exists, "cluster.env", timeout=45)
    slurm.run("scontrol", "requeue", f"{array}_0")
    wait_for(lambda: f"releasing requeued slice {array}_0" in log.read_text(), "the service to release it")
    wait_for(
        lambda: slurm.job(f"{array}_0").get("Restarts") == "1" and running_tasks(slurm, array) == 1, "rerun"
    )
