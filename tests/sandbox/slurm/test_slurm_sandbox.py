"""The Slurm sandbox itself: CLI, slurmrestd with JWT, SSH/SFTP, preemption, environment quoting."""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from slurm_sandbox_helpers import UP_SCRIPT, SlurmSandbox, ssh_run, wait_for

from tests.support.environment import require_module
from tests.support.slurm_isolated import claim_isolated_node

pytestmark = pytest.mark.slurm

# Values that break naive quoting anywhere between a client and the job's environment.
AWKWARD_VALUES = {
    "AWK_SPACES": "  two  spaces and a tab\there  ",
    "AWK_QUOTES": "it's \"quoted\" 'twice'",
    "AWK_DOLLAR": "$HOME ${PATH} $(id -u) `whoami` $$ $1",
    "AWK_SEMICOLON": "a; rm -rf /nonexistent; b && c || d | e > f < g &",
    "AWK_BACKSLASH": "back\\slash \\n \\t \\\\",
    "AWK_NEWLINE": "line one\nline two\n",
    "AWK_UNICODE": "caf\u00e9 \u2013 \u5b57 \u2713",
    "AWK_SYMBOLS": "=,:#!*?[]{}()~%^",
    "AWK_EMPTY": "",
}

DUMP_SCRIPT = """#!/bin/bash
set -eu
for name in {names}; do
    printf '%s' "${{!name}}" > "$AWK_OUT_DIR/$name"
done
""".format(names=" ".join(AWKWARD_VALUES))


def _assert_dumped(directory: Path) -> None:
    for name, value in AWKWARD_VALUES.items():
        assert (directory / name).read_bytes() == value.encode(), name


def _daemon_pids(slurm: SlurmSandbox) -> dict[str, str]:
    """slurmctld, one slurmd per node, slurmrestd, sshd: their pid files."""
    pids = {path.stem: path.read_text().strip() for path in (slurm.state_dir / "run").glob("*.pid")}
    nodes = (slurm.node, slurm.settings["SLURM_SANDBOX_ISOLATED_NODE"])
    assert set(pids) == {"slurmctld", "slurmrestd", "sshd", *(f"slurmd-{node}" for node in nodes)}
    return pids


def _run_up() -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(UP_SCRIPT)], capture_output=True, text=True, timeout=120, check=False)


def test_cluster_layout(slurm: SlurmSandbox) -> None:
    partitions = slurm.run("sinfo", "-h", "-o", "%P %N").stdout.split("\n")
    nodes = {line.split()[0].rstrip("*"): line.split()[1] for line in partitions if line.strip()}
    isolated = slurm.settings["SLURM_SANDBOX_ISOLATED_NODE"]
    assert nodes == {
        **dict.fromkeys(slurm.settings["SLURM_SANDBOX_PARTITIONS"].split(","), slurm.node),
        **dict.fromkeys(slurm.settings["SLURM_SANDBOX_ISOLATED_PARTITIONS"].split(","), isolated),
    }
    node = slurm.run("scontrol", "-o", "show", "node", slurm.node).stdout
    assert f"CPUTot={slurm.cpus}" in node
    assert slurm.cpus >= 16
    node = slurm.run("scontrol", "-o", "show", "node", isolated).stdout
    assert f"CPUTot={slurm.settings['SLURM_SANDBOX_ISOLATED_CPUS']}" in node
    config = slurm.run("scontrol", "show", "config").stdout
    assert "preempt/partition_prio" in config
    high_partition = slurm.settings["SLURM_SANDBOX_HIGH_PARTITION"]
    high = slurm.run("scontrol", "-o", "show", "partition", high_partition).stdout
    assert "PriorityTier=10" in high


def test_up_is_idempotent(slurm: SlurmSandbox) -> None:
    before = _daemon_pids(slurm)
    proc = _run_up()
    assert proc.returncode == 0, proc.stderr
    assert "starting" not in proc.stderr  # nothing was (re)started
    assert _daemon_pids(slurm) == before  # the same daemons still run
    token_file = Path(slurm.settings["SLURM_SANDBOX_JWT_TOKEN_FILE"])
    assert token_file.stat().st_mode & 0o777 == 0o600


def test_drained_node_comes_back_with_up_sh(slurm: SlurmSandbox) -> None:
    slurm.run("scontrol", "update", f"nodename={slurm.node}", "state=drain", "reason=sandbox-test")
    try:
        wait_for(
            lambda: "drain" in slurm.node_state(),
            "node to drain",
        )
        proc = _run_up()
        assert proc.returncode == 0, proc.stderr
        assert "state=resume" in proc.stderr
        assert slurm.node_state() in {"idle", "mixed", "allocated"}
    finally:
        slurm.run("scontrol", "update", f"nodename={slurm.node}", "state=resume", check=False)


def test_cli_sbatch_squeue_scontrol(slurm: SlurmSandbox, jobs: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    failing = slurm.sbatch(f"--output={out}", "--job-name=sandbox-cli-fail", "--wrap", "echo hello; exit 3")
    jobs.append(failing)
    sleeper = slurm.sbatch("--output=/dev/null", "--job-name=sandbox-cli-sleep", "--wrap", "sleep 300")
    jobs.append(sleeper)

    fields = slurm.wait_state(failing, "FAILED")
    assert fields["ExitCode"] == "3:0"
    assert fields["Reason"] == "NonZeroExitCode"
    assert out.read_text() == "hello\n"

    slurm.wait_state(sleeper, "RUNNING")
    listed = slurm.run("squeue", "-h", "-j", sleeper, "-o", "%i %T %j").stdout.split()
    assert listed == [sleeper, "RUNNING", "sandbox-cli-sleep"]
    slurm.run("scancel", sleeper)
    assert slurm.wait_state(sleeper, "CANCELLED")["JobName"] == "sandbox-cli-sleep"


def test_rest_submit_get_cancel(slurm: SlurmSandbox, jobs: list[str]) -> None:
    workdir = slurm.user_jobs_dir()
    status, body = slurm.rest(
        "POST",
        "job/submit",
        {
            "script": '#!/bin/bash\necho "started as $(id -un)"\nsleep 300\n',
            "job": {
                "name": "sandbox-rest",
                "current_working_directory": str(workdir),
                "standard_output": str(workdir / "rest-%j.out"),
                "environment": {"PATH": "/usr/bin:/bin", "SANDBOX": "rest"},
            },
        },
    )
    assert status == 200, body
    assert body["errors"] == []
    job_id = str(body["job_id"])
    jobs.append(job_id)

    def running() -> dict | None:
        st, data = slurm.rest("GET", f"job/{job_id}")
        assert st == 200, data
        job = data["jobs"][0]
        return job if job["job_state"] == "RUNNING" else None

    job = wait_for(running, "REST job to run")
    assert job["name"] == "sandbox-rest"
    assert job["user_name"] == slurm.user
    assert job["partition"] == slurm.settings["SLURM_SANDBOX_DEFAULT_PARTITION"]
    # RUNNING in slurmctld does not mean the script has run its first line: cancelling right
    # away can put slurmstepd's "CANCELLED" line in the output before (or instead of) the echo.
    output = workdir / f"rest-{job_id}.out"
    wait_for(lambda: output.exists() and "\n" in output.read_text(), "the job's first output line")

    status, body = slurm.rest("DELETE", f"job/{job_id}")
    assert status == 200, body
    slurm.wait_state(job_id, "CANCELLED")
    status, body = slurm.rest("GET", f"job/{job_id}")
    assert status == 200
    assert body["jobs"][0]["job_state"] == "CANCELLED"
    assert output.read_text().startswith(f"started as {slurm.user}\n")


def test_rest_errors(slurm: SlurmSandbox) -> None:
    # slurmrestd 22.05 answers an unknown job id with 500 and an 'errors' list, not 404.
    status, body = slurm.rest("GET", "job/999999999")
    assert status == 500
    assert body["errors"], body
    assert "Invalid job id" in body["errors"][0]["error"]
    status, _ = slurm.rest("GET", "ping", headers={})
    assert status == 401
    bogus = {"X-SLURM-USER-NAME": slurm.user, "X-SLURM-USER-TOKEN": "bogus"}
    status, _ = slurm.rest("GET", "ping", headers=bogus)
    assert status in {401, 500}
    status, body = slurm.rest("GET", "ping")
    assert status == 200, body


def test_ssh_strict_host_key_squeue_and_sftp(slurm: SlurmSandbox, ssh) -> None:
    rc, out, err = ssh_run(ssh, "id -un && squeue -h -o %i >/dev/null && echo squeue-ok && echo $HOME")
    assert rc == 0, err
    assert out.split() == [slurm.user, "squeue-ok", str(slurm.home)]

    target = slurm.user_jobs_dir() / "sftp.txt"
    rc, _, err = ssh_run(ssh, f"printf 'written over ssh\\n' > {shlex.quote(str(target))}")
    assert rc == 0, err
    with ssh.open_sftp() as sftp:
        with sftp.open(str(target)) as handle:
            assert handle.read() == b"written over ssh\n"
        payload = bytes(range(256)) * 64
        sftp.putfo(io.BytesIO(payload), str(target.with_name("upload.bin")))
    assert target.with_name("upload.bin").read_bytes() == payload


def test_ssh_rejects_a_wrong_host_key(slurm: SlurmSandbox, tmp_path: Path) -> None:
    paramiko = require_module("paramiko", "SSH tests need paramiko (the test extra has it)")
    other = paramiko.Ed25519Key.from_private_key_file(slurm.settings["SLURM_SANDBOX_SSH_PRIVATE_KEY"])
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[{slurm.ssh_host}]:{slurm.ssh_port} {other.get_name()} {other.get_base64()}\n")
    with pytest.raises(paramiko.BadHostKeyException):
        slurm.ssh_client(str(known_hosts))
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        slurm.ssh_client(str(empty))


def test_env_values_arrive_byte_for_byte(slurm: SlurmSandbox, jobs: list[str], ssh, tmp_path: Path) -> None:
    # 1. sbatch on the CLI: the submitting environment is exported to the job.
    cli_out = tmp_path / "cli"
    cli_out.mkdir()
    script = tmp_path / "dump.sh"
    script.write_text(DUMP_SCRIPT)
    env = {**slurm.env, **AWKWARD_VALUES, "AWK_OUT_DIR": str(cli_out)}
    cli_job = slurm.sbatch("--output=/dev/null", str(script), env=env)
    jobs.append(cli_job)

    # 2. slurmrestd: the environment is a JSON object.
    rest_out = slurm.user_jobs_dir()
    status, body = slurm.rest(
        "POST",
        "job/submit",
        {
            "script": DUMP_SCRIPT,
            "job": {
                "name": "sandbox-env-rest",
                "current_working_directory": str(rest_out),
                "standard_output": "/dev/null",
                "environment": {"PATH": "/usr/bin:/bin", **AWKWARD_VALUES, "AWK_OUT_DIR": str(rest_out)},
            },
        },
    )
    assert status == 200, body
    rest_job = str(body["job_id"])
    jobs.append(rest_job)

    # 3. SSH: one shell command line, every value quoted with shlex.quote.
    ssh_out = slurm.user_jobs_dir()
    remote_script = ssh_out / "dump.sh"
    with ssh.open_sftp() as sftp, sftp.open(str(remote_script), "w") as handle:
        handle.write(DUMP_SCRIPT)
    assignments = " ".join(f"{name}={shlex.quote(value)}" for name, value in AWKWARD_VALUES.items())
    command = (
        f"cd {shlex.quote(str(ssh_out))} && {assignments} AWK_OUT_DIR={shlex.quote(str(ssh_out))} "
        f"sbatch --parsable --output=/dev/null {shlex.quote(str(remote_script))}"
    )
    rc, out, err = ssh_run(ssh, command)
    assert rc == 0, err
    ssh_job = out.strip().split(";")[0]
    jobs.append(ssh_job)

    for job_id in (cli_job, rest_job, ssh_job):
        slurm.wait_state(job_id, "COMPLETED")
    _assert_dumped(cli_out)
    _assert_dumped(rest_out)
    _assert_dumped(ssh_out)


def test_preemption_through_the_high_partition(slurm: SlurmSandbox, jobs: list[str]) -> None:
    """On the isolated node (its own partitions, nothing else runs there): a job in the high tier
    requeues a REQUEUE-partition job and cancels a CANCEL-partition one."""
    with claim_isolated_node(slurm.settings, slurm.run) as isolated:

        def sleeper(partition: str, cpus: int) -> str:
            options = (f"--partition={partition}", f"--cpus-per-task={cpus}", "--output=/dev/null")
            job_id = slurm.sbatch(*options, "--wrap", "sleep 300")
            jobs.append(job_id)
            return job_id

        requeued = sleeper(isolated.partition, isolated.cpus // 2)
        cancelled = sleeper(isolated.preemptible, isolated.cpus // 2)
        slurm.wait_state(requeued, "RUNNING")
        slurm.wait_state(cancelled, "RUNNING")

        high = sleeper(isolated.high, isolated.cpus)
        slurm.wait_state(high, "RUNNING")
        assert slurm.wait_state(cancelled, "PREEMPTED")["Restarts"] == "0"
        fields = slurm.wait_state(requeued, "PENDING")
        held_seen_at = time.time()
        assert fields["Restarts"] == "1"
        assert fields["Reason"] == "BeginTime"  # requeued jobs are held ~2 minutes
        status, body = slurm.rest("GET", f"job/{requeued}")
        assert status == 200
        assert body["jobs"][0]["job_state"] == "PENDING"
        assert body["jobs"][0]["restart_cnt"] == 1

        # Once the high-priority job is gone and the hold is lifted, the requeued job runs again.
        slurm.run("scancel", high)
        slurm.release_held(requeued, held_seen_at)
        assert slurm.wait_state(requeued, "RUNNING")["Restarts"] == "1"


def test_sandbox_files_are_where_slurm_env_says(slurm: SlurmSandbox) -> None:
    env_file = slurm.state_dir / "slurm.env"
    lines = [line for line in env_file.read_text().splitlines() if line and not line.startswith("#")]
    parsed = dict(line.split("=", 1) for line in lines)
    # Both files come from the same run of up.sh (which other tests may have rerun).
    assert parsed == json.loads((slurm.state_dir / "slurm.json").read_text())
    assert parsed.keys() == slurm.settings.keys()
    for key in (
        "SLURM_SANDBOX_SSH_PRIVATE_KEY",
        "SLURM_SANDBOX_SSH_KNOWN_HOSTS",
        "SLURM_SANDBOX_JWT_TOKEN_FILE",
        "SLURM_SANDBOX_START_PATHWAYS_SCRIPT",
        "SLURM_SANDBOX_RUN_WORKER_SLICE_SCRIPT",
        "SLURM_SANDBOX_RUN_WORKLOAD_SCRIPT",
        "SLURM_CONF",
    ):
        assert os.path.isfile(parsed[key]), key
    assert parsed["SLURM_SANDBOX_REST_URL"].startswith("http://127.0.0.1:")
    assert parsed["SLURM_SANDBOX_SSH_HOST"] == "127.0.0.1"
