"""SlurmHook against the real sandbox clusters, every behaviour over both transports (REST, SSH) and
on every Slurm version the sandbox runs (22.05: slurmrestd v0.0.38; 24.11: v0.0.42; 26.05: v0.0.45).

Nothing is mocked: slurmrestd (JWT), sshd/SFTP, slurmctld and slurmd are real. Tests wait on
conditions with deadlines; the only sleeps are inside the batch jobs themselves.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pathways.failures import FailureClass
from airflow_provider_pathways.hooks.slurm import SlurmHook
from airflow_provider_pathways.hooks.slurm_ssh import SshSession
from airflow_provider_pathways.slurm.end_states import JobOutcome, job_outcome
from airflow_provider_pathways.slurm.errors import SlurmAuthError, SlurmConnectionError, SlurmHostKeyError
from airflow_provider_pathways.slurm.job import SlurmJob
from tests.slurm.conftest import CONN_IDS, Sandbox, wait_for
from tests.support.slurm_isolated import claim_isolated_node
from tests.support.tcp_gate import Gate

pytestmark = pytest.mark.slurm


def _wait_job(hook: SlurmHook, job_id: int, states: set[str] | str, timeout: float = 30.0) -> SlurmJob:
    wanted = {states} if isinstance(states, str) else states

    def reached() -> SlurmJob | None:
        job = hook.get_job(job_id)
        return job if job is not None and job.state in wanted else None

    return wait_for(reached, f"job {job_id} to reach {sorted(wanted)}", timeout)


def _gated_script(go: Path, body: str = "echo done") -> str:
    """A job that waits (inside the job) until the test creates ``go``."""
    return f'#!/bin/bash\nwhile [ ! -e "{go}" ]; do sleep 0.1; done\n{body}\n'


def _go(sandbox: Sandbox, go: Path) -> None:
    sandbox.write_user_file(go, "go\n")


# ---- submission and the job life cycle ---------------------------------------------------------


def test_script_text_pending_running_completed(
    hook: SlurmHook, sandbox: Sandbox, jobs: list[int], workdir: Path
) -> None:
    go = workdir / "go"
    job_id = hook.submit_job(
        script=_gated_script(go, 'echo "finished in $PWD"'),
        job_name="hook-lifecycle",
        working_directory=str(workdir),
        output=str(workdir / "out-%j.log"),
        time_limit="0:05:00",
        comment="pathways-test comment with spaces Partition=x",
        extra_options={"hold": ""},
    )
    jobs.append(job_id)

    pending = _wait_job(hook, job_id, "PENDING")
    assert pending.reason == "JobHeldUser"
    assert pending.name == "hook-lifecycle"
    assert pending.comment == "pathways-test comment with spaces Partition=x"
    assert pending.start_time is None and pending.end_time is None and pending.exit_code is None
    assert pending.submit_time is not None and pending.submit_time.tzinfo is not None
    assert pending.std_out == str(workdir / f"out-{job_id}.log")
    assert pending.work_dir == str(workdir)
    assert pending.partition == "batch"
    assert job_outcome(pending)[:2] == (JobOutcome.ACTIVE, None)

    sandbox.run("scontrol", "release", str(job_id))
    running = _wait_job(hook, job_id, "RUNNING")
    assert running.node_list == sandbox.node and running.start_time is not None
    assert job_outcome(running)[0] is JobOutcome.ACTIVE

    _go(sandbox, go)
    done = _wait_job(hook, job_id, "COMPLETED")
    assert (done.exit_code, done.exit_signal) == (0, 0)
    assert done.end_time is not None and done.end_time >= done.start_time
    assert job_outcome(done) == (JobOutcome.SUCCEEDED, None, f"Slurm job {job_id} (hook-lifecycle) completed")
    assert hook.read_file(done.std_out) == f"finished in {workdir}\n"
    assert SlurmJob.from_dict(done.to_dict()) == done


def test_script_path_keeps_its_sbatch_directives(
    hook: SlurmHook, sandbox: Sandbox, jobs: list[int], workdir: Path
) -> None:
    script = sandbox.write_user_file(
        workdir / "my script.sh",
        '#!/bin/bash\n#SBATCH --comment=from-directive\n# a comment\necho "ran $(basename "$0") $1"\n',
        mode=0o755,
    )
    job_id = hook.submit_job(script_path=str(script), output=str(workdir / "path-%j.out"))
    jobs.append(job_id)
    done = _wait_job(hook, job_id, "COMPLETED")
    assert done.name == "my script.sh"
    assert done.comment == "from-directive"
    output = hook.read_file(done.std_out)
    assert output is not None and output.startswith("ran ")


def test_failing_job_is_a_user_program_failure(hook: SlurmHook, jobs: list[int], workdir: Path) -> None:
    job_id = hook.submit_job(
        script="#!/bin/bash\necho failing >&2\nexit 3\n",
        job_name="hook-fails",
        working_directory=str(workdir),
        output=str(workdir / "fail-%j.out"),
    )
    jobs.append(job_id)
    job = _wait_job(hook, job_id, "FAILED")
    assert job.reason == "NonZeroExitCode"
    assert (job.exit_code, job.exit_signal) == (3, 0)
    outcome, failure, message = job_outcome(job)
    assert (outcome, failure) == (JobOutcome.FAILED, FailureClass.USER_PROGRAM_FAILED)
    assert "exit code 3" in message and str(job_id) in message


def test_array_tasks_with_pending_ranges(
    hook: SlurmHook, sandbox: Sandbox, jobs: list[int], workdir: Path
) -> None:
    go = workdir / "go"
    array_id = hook.submit_job(
        script=_gated_script(go, 'echo "task $SLURM_ARRAY_TASK_ID"'),
        job_name="hook-array",
        working_directory=str(workdir),
        output=str(workdir / "task-%A_%a.out"),
        array="0-5%2",
    )
    jobs.append(array_id)

    def two_running() -> list[SlurmJob] | None:
        tasks = hook.get_array_tasks(array_id)
        return tasks if sum(t.state == "RUNNING" for t in tasks) == 2 else None

    tasks = wait_for(two_running, "two array tasks to run")
    assert [t.array_task_id for t in tasks] == [0, 1, 2, 3, 4, 5]
    assert {t.array_job_id for t in tasks} == {array_id}
    pending = [t for t in tasks if t.state == "PENDING"]
    assert len(pending) == 4 and all(t.reason == "JobArrayTaskLimit" for t in pending)
    assert hook.get_array_tasks(tasks[0].job_id if tasks[0].job_id != array_id else tasks[1].job_id) == []

    _go(sandbox, go)

    def all_done() -> list[SlurmJob] | None:
        tasks = hook.get_array_tasks(array_id)
        return tasks if len(tasks) == 6 and all(t.state == "COMPLETED" for t in tasks) else None

    tasks = wait_for(all_done, "every array task to complete")
    assert len({t.job_id for t in tasks}) == 6
    for task in tasks:
        assert task.std_out == str(workdir / f"task-{array_id}_{task.array_task_id}.out")
        assert hook.read_file(task.std_out) == f"task {task.array_task_id}\n"


def test_jobs_of_the_user_by_name(hook: SlurmHook, sandbox: Sandbox, jobs: list[int], workdir: Path) -> None:
    """One listing finds the connection user's jobs of exactly one name, every array task included,
    with user and submit time: what finds a worker array submitted as ``sbatch run_worker_slice.sh``
    (sbatch names a job after its script file). Another lists them whatever their names."""
    go = workdir / "go"
    name = f"named-{uuid.uuid4().hex[:8]}"
    common: dict[str, Any] = {"working_directory": str(workdir), "output": str(workdir / "named-%j.out")}
    array_id = hook.submit_job(script=_gated_script(go), job_name=name, array="0-2%1", **common)
    single = hook.submit_job(script=_gated_script(go), job_name=name, **common)
    other = hook.submit_job(script=_gated_script(go), job_name=f"{name}-other", **common)
    roots = sandbox.sbatch("--job-name", name, "--wrap", "sleep 60")  # same name, another user
    jobs.extend([array_id, single, other, roots])
    named = hook.get_jobs_named(name)
    tasks = sorted((j.array_job_id, j.array_task_id) for j in named if j.array_job_id is not None)
    assert tasks == [(array_id, 0), (array_id, 1), (array_id, 2)]
    assert [j.job_id for j in named if j.array_job_id is None] == [single]
    assert {j.user for j in named} == {sandbox.user}
    assert all(j.submit_time is not None and j.name == name for j in named)
    assert hook.get_jobs_named(name[:-1]) == []  # exact names only
    mine = hook.get_user_jobs()  # every name: how a service tells other services of its user
    assert {array_id, single, other} <= {j.array_job_id or j.job_id for j in mine}
    assert roots not in {j.job_id for j in mine} and {j.user for j in mine} == {sandbox.user}
    assert sorted(j.array_task_id for j in mine if j.array_job_id == array_id) == [0, 1, 2]
    _go(sandbox, go)


def test_requeue_shows_restarts_and_the_requeued_flag(
    hook: SlurmHook, sandbox: Sandbox, jobs: list[int], workdir: Path
) -> None:
    go = workdir / "go"
    job_id = hook.submit_job(
        script=_gated_script(go, 'echo "run $SLURM_RESTART_COUNT"'),
        job_name="hook-requeue",
        working_directory=str(workdir),
        output=str(workdir / "requeue-%j.out"),
        requeue=True,
    )
    jobs.append(job_id)
    _wait_job(hook, job_id, "RUNNING")
    sandbox.run("scontrol", "requeue", str(job_id))

    def requeued() -> SlurmJob | None:
        job = hook.get_job(job_id)
        return job if job is not None and job.state == "PENDING" and job.restarts >= 1 else None

    job = wait_for(requeued, "the job to be requeued")
    held_seen_at = time.time()
    assert job.requeued and "REQUEUED" in job.flags and job.restarts == 1
    assert job.exit_code is None and job.start_time is None
    outcome, failure, message = job_outcome(job)
    assert (outcome, failure) == (JobOutcome.ACTIVE, FailureClass.PREEMPTED)
    assert "requeued" in message and "PENDING" in message

    # Slurm holds a requeued job ~2 minutes; release it, but not in the second of the requeue.
    wait_for(lambda: int(time.time()) > int(held_seen_at), "the requeue second to pass", 5, 0.05)
    sandbox.run("scontrol", "update", f"jobid={job_id}", "starttime=now")
    running = _wait_job(hook, job_id, "RUNNING")
    assert not running.requeued and running.restarts == 1
    assert job_outcome(running)[:2] == (JobOutcome.ACTIVE, None)
    _go(sandbox, go)
    done = _wait_job(hook, job_id, "COMPLETED")
    output = hook.read_file(done.std_out) or ""
    # --open-mode=append (the default): the first run's lines survive the requeue.
    assert done.restarts == 1 and "DUE TO JOB REQUEUE" in output and output.endswith("run 1\n")


def test_preemption_through_the_high_partition(
    hook: SlurmHook, sandbox: Sandbox, jobs: list[int], workdir: Path
) -> None:
    """On the isolated node (nothing else runs there): a high-tier job preempts a job of the
    CANCEL partition (PREEMPTED) and requeues one of the REQUEUE partition."""
    with claim_isolated_node(sandbox.settings, sandbox.run) as isolated:
        requeueing = hook.submit_job(
            script="#!/bin/bash\nsleep 300\n",
            job_name="hook-victim-requeue",
            partition=isolated.partition,
            working_directory=str(workdir),
            output="/dev/null",
            requeue=True,
        )
        jobs.append(requeueing)
        cancelled = hook.submit_job(
            script="#!/bin/bash\nsleep 300\n",
            job_name="hook-victim-cancel",
            partition=isolated.preemptible,
            working_directory=str(workdir),
            output="/dev/null",
        )
        jobs.append(cancelled)
        _wait_job(hook, requeueing, "RUNNING")
        _wait_job(hook, cancelled, "RUNNING")

        options = (f"--partition={isolated.high}", f"--cpus-per-task={isolated.cpus}", "--output=/dev/null")
        jobs.append(sandbox.sbatch(*options, "--wrap", "sleep 300"))

        preempted = _wait_job(hook, cancelled, "PREEMPTED")
        outcome, failure, message = job_outcome(preempted)
        assert (outcome, failure) == (JobOutcome.FAILED, FailureClass.PREEMPTED)
        assert "preempted" in message

        def requeued() -> SlurmJob | None:
            # On its way back a requeued job passes COMPLETING (24.11, 26.05): wait until it waits.
            job = hook.get_job(requeueing)
            return job if job is not None and job.state == "PENDING" and job.restarts >= 1 else None

        victim = wait_for(requeued, "the batch job to be requeued by preemption")
        assert job_outcome(victim)[:2] == (JobOutcome.ACTIVE, FailureClass.PREEMPTED)


def test_cancel_twice_is_harmless(hook: SlurmHook, jobs: list[int], workdir: Path) -> None:
    job_id = hook.submit_job(
        script="#!/bin/bash\nsleep 300\n",
        working_directory=str(workdir),
        output="/dev/null",
        extra_options={"hold": ""},
    )
    jobs.append(job_id)
    _wait_job(hook, job_id, "PENDING")
    assert hook.cancel_job(job_id) is True
    cancelled = _wait_job(hook, job_id, "CANCELLED")
    outcome, failure, message = job_outcome(cancelled)
    assert (outcome, failure) == (JobOutcome.FAILED, FailureClass.UNKNOWN) and "cancelled" in message
    assert hook.cancel_job(job_id) is False
    assert hook.cancel_job(2_000_000_000) is False
    assert hook.get_job(2_000_000_000) is None
    assert hook.get_array_tasks(2_000_000_000) == []


NASTY = {
    "SPACES": "a  b   c ",
    "QUOTES": "it's \"double\" and 'single'",
    "DOLLARS": "$HOME ${PATH} $(id) $$",
    "SEMICOLONS": "a; echo injected && b | c",
    "BACKTICKS": "`id` and `echo hi`",
    "NEWLINES": "line one\nline two\n",
    "BACKSLASHES": "back\\slash \\n \\\\",
    "COMMAS": "a,b,c=d,MORE=x",
    "PERCENT": "%j %x %% %A",
    "GLOBS": "*?[abc] ~ ~/x !bang #hash",
    "UNICODE": "ünïcødé ✓ 日本",
    "TABS": "tab\there",
    "EMPTY": "",
}


def test_environment_arrives_byte_for_byte(
    hook: SlurmHook, sandbox: Sandbox, jobs: list[int], workdir: Path
) -> None:
    dump = workdir / "env.bin"
    names = " ".join(f'"${name}"' for name in NASTY)
    job_id = hook.submit_job(
        script=f"#!/bin/bash\nprintf '%s\\0' {names} > \"{dump}\"\n",
        environment=NASTY,
        working_directory=str(workdir),
        output="/dev/null",
    )
    jobs.append(job_id)
    _wait_job(hook, job_id, "COMPLETED")
    expected = b"".join(value.encode() + b"\0" for value in NASTY.values())
    assert dump.read_bytes() == expected


@pytest.mark.slurm_one_version  # client-side behaviour
def test_missing_script_path_fails_before_submission(
    hook: SlurmHook, sandbox: Sandbox, workdir: Path
) -> None:
    missing = str(workdir / "no-such-script.sh")
    name = f"never-{uuid.uuid4().hex[:8]}"
    with pytest.raises(FileNotFoundError, match=r"no-such-script\.sh"):
        hook.submit_job(script_path=missing, job_name=name)
    out = sandbox.run("squeue", "-h", "-t", "all", "-n", name, "-o", "%i").stdout
    assert out.strip() == ""


@pytest.mark.slurm_one_version  # client-side behaviour
def test_bad_input_is_refused_before_submission(hook: SlurmHook) -> None:
    with pytest.raises(ValueError, match="exactly one of script"):
        hook.submit_job(script="#!/bin/bash\n", script_path="/bin/true")
    with pytest.raises(ValueError, match="environment variable name"):
        hook.submit_job(script="#!/bin/bash\ntrue\n", environment={"BAD-NAME": "x"})
    with pytest.raises(ValueError, match="time_limit"):
        hook.submit_job(script="#!/bin/bash\ntrue\n", time_limit="soon")
    with pytest.raises(ValueError, match="array"):
        hook.submit_job(script="#!/bin/bash\ntrue\n", array="0-3; rm -rf /")


# ---- files -------------------------------------------------------------------------------------


def _check_file_access(hook: SlurmHook, sandbox: Sandbox, workdir: Path) -> None:
    data = "first line\nsecond line ✓\n" + "x" * 5000 + "\nlast line\n"
    path = sandbox.write_user_file(workdir / "log.txt", data)
    assert hook.read_file(str(path)) == data
    assert hook.read_file(str(path), tail_bytes=10) == "last line\n"
    assert hook.read_file(str(path), tail_bytes=0) == ""
    mtime, size = hook.stat_file(str(path))
    assert size == len(data.encode()) and abs(mtime - path.stat().st_mtime) < 1.0
    relative = "~/" + str(path.relative_to(sandbox.home))
    assert hook.read_file(relative) == data
    assert hook.stat_file(relative) == hook.stat_file(str(path))
    assert hook.read_file(str(workdir / "missing.txt")) is None
    assert hook.stat_file(str(workdir / "missing.txt")) is None
    assert hook.stat_file(str(workdir / "no-dir" / "missing.txt")) is None
    with pytest.raises(ValueError, match="only the cluster user's home"):
        hook.read_file("~root/.bashrc")


def test_read_and_stat_files(hook: SlurmHook, sandbox: Sandbox, workdir: Path) -> None:
    _check_file_access(hook, sandbox, workdir)


def test_rest_can_read_files_over_sftp(sandbox: Sandbox, workdir: Path, connections: Any) -> None:
    ssh = sandbox.ssh_connection()
    sftp = {k: v for k, v in ssh["extra"].items() if k != "transport"}
    conn = sandbox.rest_connection(extra={"ssh_host": ssh["host"], "ssh_port": ssh["port"], **sftp})
    hook = SlurmHook(connections("pathways_slurm_test_rest_sftp", conn))
    try:
        assert not hook.settings.shared_fs
        _check_file_access(hook, sandbox, workdir)
        ok, message = hook.test_connection()
        assert ok and f"SFTP at 127.0.0.1:{sandbox.settings['SLURM_SANDBOX_SSH_PORT']}" in message
    finally:
        hook.close()


# ---- async twins -------------------------------------------------------------------------------


async def test_async_twins_match_sync(
    transport: str, sandbox: Sandbox, jobs: list[int], workdir: Path, connections: Any
) -> None:
    sync_hook = SlurmHook(CONN_IDS[transport])
    async_hook = SlurmHook(CONN_IDS[transport])
    try:
        array_id = await asyncio.to_thread(
            sync_hook.submit_job,
            script="#!/bin/bash\necho async-$SLURM_ARRAY_TASK_ID\nexit 4\n",
            working_directory=str(workdir),
            output=str(workdir / "a-%A_%a.out"),
            array="0-2",
        )
        jobs.append(array_id)
        deadline = time.monotonic() + 30
        while True:
            tasks = await async_hook.a_get_array_tasks(array_id)
            if len(tasks) == 3 and all(t.terminal for t in tasks):
                break
            assert time.monotonic() < deadline, f"array {array_id} did not finish: {tasks}"
            await asyncio.sleep(0.1)
        assert tasks == await asyncio.to_thread(sync_hook.get_array_tasks, array_id)
        # Sync methods run on the hook's own loop thread, so they also work inside a running loop.
        assert sync_hook.get_array_tasks(array_id) == tasks
        for task in tasks:
            assert task.state == "FAILED" and task.exit_code == 4
            assert await async_hook.a_get_job(task.job_id) == await asyncio.to_thread(
                sync_hook.get_job, task.job_id
            )
            text = await async_hook.a_read_file(task.std_out)
            assert text == f"async-{task.array_task_id}\n"
            assert text == await asyncio.to_thread(sync_hook.read_file, task.std_out)
            assert await async_hook.a_read_file(task.std_out, tail_bytes=2) == f"{task.array_task_id}\n"
            assert await async_hook.a_stat_file(task.std_out) == await asyncio.to_thread(
                sync_hook.stat_file, task.std_out
            )
        assert await async_hook.a_stat_file(str(workdir / "missing")) is None
        assert await async_hook.a_read_file(str(workdir / "missing")) is None
        assert await async_hook.a_get_job(2_000_000_000) is None
        assert await async_hook.a_cancel_job(array_id) is False

        held = await async_hook.a_submit_job(
            script="#!/bin/bash\nsleep 300\n",
            working_directory=str(workdir),
            output="/dev/null",
            extra_options={"hold": ""},
        )
        jobs.append(held)
        assert await async_hook.a_cancel_job(held) is True
        assert (await async_hook.a_test_connection())[0] is True
    finally:
        await async_hook.a_close()
        sync_hook.close()


# ---- errors and secrets ------------------------------------------------------------------------


def _assert_clean(message: str, secrets: list[str]) -> None:
    for secret in secrets:
        assert secret not in message


def test_rest_bad_token_is_named_without_the_token(
    sandbox: Sandbox, connections: Any, caplog: pytest.LogCaptureFixture
) -> None:
    token = sandbox.token()
    bad = token[:-8] + ("A" * 8 if not token.endswith("A" * 8) else "B" * 8)
    hook = SlurmHook(connections("pathways_slurm_test_badtoken", sandbox.rest_connection(password=bad)))
    caplog.set_level(logging.DEBUG)
    try:
        with pytest.raises(SlurmAuthError, match="rejected the token") as raised:
            hook.get_job(1)
        with pytest.raises(SlurmAuthError, match="rejected the token") as raised_submit:
            hook.submit_job(script="#!/bin/bash\ntrue\n", working_directory=str(sandbox.home))
        ok, message = hook.test_connection()
    finally:
        hook.close()
    assert not ok and "rejected the token" in message
    texts = [str(raised.value), str(raised_submit.value), message, caplog.text, repr(hook.settings)]
    for text in texts:
        _assert_clean(text, [bad, token, bad[-20:]])


@pytest.mark.slurm_one_version  # client-side behaviour
def test_rest_unreachable_port_names_host_and_port(sandbox: Sandbox, connections: Any) -> None:
    hook = SlurmHook(connections("pathways_slurm_test_restdown", sandbox.rest_connection(port=1)))
    try:
        with pytest.raises(SlurmConnectionError, match=r"127\.0\.0\.1:1\b"):
            hook.get_job(1)
        ok, message = hook.test_connection()
        assert not ok and "127.0.0.1:1" in message
    finally:
        hook.close()


@pytest.mark.slurm_one_version  # client-side behaviour
def test_ssh_unknown_host_key_is_refused(sandbox: Sandbox, connections: Any) -> None:
    key = Path(sandbox.settings["SLURM_SANDBOX_SSH_PRIVATE_KEY"]).read_text()
    wrong = (
        f"[127.0.0.1]:{sandbox.settings['SLURM_SANDBOX_SSH_PORT']} ssh-ed25519 "
        "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
    )
    conn = sandbox.ssh_connection(extra={"key_file": None, "private_key": key, "known_hosts": wrong})
    hook = SlurmHook(connections("pathways_slurm_test_badhostkey", conn))
    try:
        port = sandbox.settings["SLURM_SANDBOX_SSH_PORT"]
        with pytest.raises(
            SlurmHostKeyError, match=rf"host key of 127\.0\.0\.1:{port} is not trusted"
        ) as raised:
            hook.get_job(1)
        ok, message = hook.test_connection()
    finally:
        hook.close()
    assert not ok and "not trusted" in message
    _assert_clean(str(raised.value) + message, [key, key.splitlines()[1]])


@pytest.mark.slurm_one_version  # client-side behaviour
def test_ssh_host_key_checking_is_only_off_when_asked(sandbox: Sandbox, connections: Any) -> None:
    conn = sandbox.ssh_connection(extra={"known_hosts": None, "strict_host_key_checking": False})
    hook = SlurmHook(connections("pathways_slurm_test_nostrict", conn))
    try:
        ok, message = hook.test_connection()
        assert ok, message
    finally:
        hook.close()


@pytest.mark.slurm_one_version  # client-side behaviour
def test_ssh_unreachable_port_names_host_and_port(sandbox: Sandbox, connections: Any) -> None:
    hook = SlurmHook(connections("pathways_slurm_test_sshdown", sandbox.ssh_connection(port=1)))
    try:
        with pytest.raises(SlurmConnectionError, match=r"SSH server at 127\.0\.0\.1:1\b"):
            hook.get_job(1)
    finally:
        hook.close()


@pytest.mark.slurm_one_version  # client-side behaviour
def test_ssh_connection_cut_mid_command_is_a_lost_connection(sandbox: Sandbox, connections: Any) -> None:
    """sshd restarting or a partition cuts the connection while ``scontrol`` runs: that is a lost
    connection (which waits ride out), never the command's failure. asyncssh may end such a run
    with no exit status at all (the channel closed before sshd sent one, RFC 4254 6.10)."""
    settings = sandbox.settings
    gate = Gate(settings["SLURM_SANDBOX_SSH_HOST"], int(settings["SLURM_SANDBOX_SSH_PORT"]), "sshd")
    extra = {"known_hosts": None, "strict_host_key_checking": False}
    conn = sandbox.ssh_connection(port=gate.port, extra=extra)
    hook = SlurmHook(connections("pathways_slurm_test_sshcut", conn))
    session = SshSession(hook.settings, hook.settings.host, gate.port)
    marker = f"sleep 30.{uuid.uuid4().int % 10**6:06d}"

    def running() -> bool:
        found = subprocess.run(["pgrep", "-f", f"^{marker}$"], capture_output=True, check=False)
        return found.returncode == 0

    async def cut() -> None:
        command = asyncio.ensure_future(session.run(marker, retry=False))
        await asyncio.to_thread(wait_for, running, f"{marker!r} to run on the login node")
        await asyncio.to_thread(gate.down)
        try:
            with pytest.raises(SlurmConnectionError, match=r"SSH connection to 127\.0\.0\.1:\d+ was lost"):
                await asyncio.wait_for(command, 30)
        finally:
            await session.close()

    try:
        asyncio.run(cut())
    finally:
        gate.close()
        subprocess.run(["pkill", "-f", f"^{marker}$"], check=False)


def test_ssh_refused_password_is_not_repeated(sandbox: Sandbox, connections: Any) -> None:
    password = "correct horse battery staple 9271"
    conn = sandbox.ssh_connection(password=password, extra={"key_file": None})
    hook = SlurmHook(connections("pathways_slurm_test_sshpassword", conn))
    try:
        with pytest.raises(SlurmAuthError, match="refused") as raised:
            hook.get_job(1)
        ok, message = hook.test_connection()
    finally:
        hook.close()
    assert not ok
    _assert_clean(str(raised.value) + message, [password])


def test_connection_test_passes(hook: SlurmHook, transport: str, sandbox: Sandbox) -> None:
    ok, message = hook.test_connection()
    assert ok, message
    if transport == "rest":  # the highest API version this slurmrestd serves
        assert f"slurmrestd {sandbox.settings['SLURM_SANDBOX_REST_API_VERSION']}" in message
    assert sandbox.settings.get("SLURM_SANDBOX_SLURM_RELEASE", sandbox.version) in message


@pytest.mark.slurm_one_version  # client-side behaviour
def test_connection_settings_are_validated(connections: Any, sandbox: Sandbox) -> None:
    conn = sandbox.rest_connection(extra={"transport": "grpc"})
    hook = SlurmHook(connections("pathways_slurm_test_badtransport", conn))
    with pytest.raises(ValueError, match="'transport' must be 'rest' or 'ssh'"):
        hook.get_job(1)
    conn = sandbox.rest_connection(password=None)
    hook = SlurmHook(connections("pathways_slurm_test_notoken", conn))
    with pytest.raises(ValueError, match="JWT in password or a token_file"):
        hook.get_job(1)


def test_rest_every_served_api_version(sandbox: Sandbox, jobs: list[int], connections: Any) -> None:
    """Each API version this slurmrestd serves (from its data_parser plugins: 22.05 v0.0.38, 24.11
    v0.0.40-v0.0.42, 26.05 v0.0.42-v0.0.45), pinned in the connection, with the token from a file."""
    from airflow_provider_pathways.slurm.settings import SUPPORTED_API_VERSIONS

    served = sandbox.settings["SLURM_SANDBOX_REST_API_VERSIONS"].split(",")
    pinned = [v for v in served if v in SUPPORTED_API_VERSIONS]
    assert pinned and pinned[0] == sandbox.settings["SLURM_SANDBOX_REST_API_VERSION"]
    workdir = sandbox.user_dir()
    submitted: dict[str, int] = {}
    hooks = []
    try:
        for version in pinned:
            token_file = sandbox.settings["SLURM_SANDBOX_JWT_TOKEN_FILE"]
            conn = sandbox.rest_connection(
                password=None, extra={"token_file": token_file, "api_version": version}
            )
            hook = SlurmHook(connections(f"pathways_slurm_test_api_{version.replace('.', '_')}", conn))
            hooks.append(hook)
            ok, message = hook.test_connection()
            assert ok and f"slurmrestd {version} " in message, message
            assert hook.get_job(2_000_000_000) is None
            job_id = hook.submit_job(
                script='#!/bin/bash\necho "api $API $SLURM_JOB_ID"\nexit 2\n',
                environment={"API": f"{version} with spaces"},
                working_directory=str(workdir),
                output=str(workdir / f"api-{version}-%j.out"),
                time_limit=5,
                array="0-1",
            )
            jobs.append(job_id)
            submitted[version] = job_id
        for hook, (version, job_id) in zip(hooks, submitted.items(), strict=True):

            def ended(hook: SlurmHook = hook, job_id: int = job_id) -> list[SlurmJob] | None:
                tasks = hook.get_array_tasks(job_id)
                return tasks if len(tasks) == 2 and all(t.terminal for t in tasks) else None

            tasks = wait_for(ended, f"array {job_id} ({version}) to end")
            for task in tasks:
                assert (task.state, task.exit_code, task.exit_signal) == ("FAILED", 2, 0), version
                assert task.reason == "NonZeroExitCode" and task.array_job_id == job_id
                assert job_outcome(task)[:2] == (JobOutcome.FAILED, FailureClass.USER_PROGRAM_FAILED)
                assert task.std_out == str(workdir / f"api-{version}-{task.job_id}.out")
                assert hook.read_file(task.std_out) == f"api {version} with spaces {task.job_id}\n"
    finally:
        for hook in hooks:
            hook.close()
