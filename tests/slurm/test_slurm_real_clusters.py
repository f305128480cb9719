"""What real Slurm clusters do, on every sandbox version (22.05 on the host, 24.11 and 26.05 in
chroots), over REST and SSH: jobs slurmctld forgets (MinJobAge) and accounting remembers, states on
the way through a requeue, launch and node failures, sbatch options as slurmctld receives them,
MaxArraySize. The rules come from the daemons themselves; each test names what it pins.

Each test drives both transports against one cluster, so that a slow cluster event (a purge, a node
failure, a warning signal) is waited for once per version.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pathways.failures import FailureClass
from airflow_provider_pathways.hooks.slurm import SlurmHook
from airflow_provider_pathways.slurm.end_states import JobOutcome, job_outcome
from airflow_provider_pathways.slurm.errors import SlurmApiError, SlurmCommandError, SlurmJobLost
from airflow_provider_pathways.slurm.job import SlurmJob
from tests.slurm.conftest import CONN_IDS, TRANSPORTS, Sandbox, wait_for
from tests.support.slurm_isolated import IsolatedNode, claim_isolated_node

pytestmark = pytest.mark.slurm


@pytest.fixture
def hooks(sandbox: Sandbox, connections: Any) -> Iterator[dict[str, SlurmHook]]:
    """A hook per transport for this version's cluster."""
    made = {transport: SlurmHook(CONN_IDS[transport]) for transport in TRANSPORTS}
    try:
        yield made
    finally:
        for hook in made.values():
            hook.close()


def _fields(sandbox: Sandbox, job_id: int) -> dict[str, str]:
    """``scontrol -o show job`` as root (epoch times), or {} once slurmctld forgot the job."""
    proc = sandbox.run(
        "env", "SLURM_TIME_FORMAT=%s", "scontrol", "-o", "show", "job", str(job_id), check=False
    )
    line = proc.stdout.splitlines()[0] if proc.returncode == 0 and proc.stdout.strip() else ""
    return dict(part.split("=", 1) for part in line.split() if "=" in part)


def _wait_state(hook: SlurmHook, job_id: int, states: set[str], timeout: float = 60) -> SlurmJob:
    def reached() -> SlurmJob | None:
        job = hook.get_job(job_id)
        return job if job is not None and job.state in states else None

    return wait_for(reached, f"job {job_id} to reach {sorted(states)}", timeout)


def _wait_purged(sandbox: Sandbox, job_ids: list[int]) -> None:
    """Until slurmctld no longer knows the jobs: MinJobAge after their end, plus its purge pass."""
    age = sandbox.min_job_age or 0
    wait_for(
        lambda: all(not _fields(sandbox, j) for j in job_ids),
        f"slurmctld to forget jobs {job_ids} (MinJobAge={age}s)",
        timeout=age + 75,
        interval=0.5,
    )


# ---- MinJobAge and accounting ----------------------------------------------------------------------


@pytest.mark.slurm_versions("24.11")  # the sandbox cluster with slurmdbd + MariaDB (MinJobAge=10)
def test_purged_job_is_read_from_accounting_with_its_last_attempt(
    sandbox: Sandbox, hooks: dict[str, SlurmHook], jobs: list[int], workdir: Path
) -> None:
    assert sandbox.accounting
    go = workdir / "go"
    failed = hooks["rest"].submit_job(
        script="#!/bin/bash\necho gone >&2\nexit 5\n",
        job_name="purged-failed",
        working_directory=str(workdir),
        output=str(workdir / "purged-%j.out"),
    )
    # A job that is requeued once, then completes: accounting keeps both attempts.
    requeued = hooks["ssh"].submit_job(
        script=f'#!/bin/bash\nwhile [ ! -e "{go}" ]; do sleep 0.1; done\necho "run $SLURM_RESTART_COUNT"\n',
        job_name="purged-requeued",
        working_directory=str(workdir),
        output=str(workdir / "purged-%j.out"),
        requeue=True,
    )
    jobs += [failed, requeued]
    _wait_state(hooks["rest"], requeued, {"RUNNING"})
    sandbox.run("scontrol", "requeue", str(requeued))
    wait_for(lambda: _fields(sandbox, requeued).get("Restarts") == "1", "the requeue")
    seen = time.time()
    wait_for(lambda: int(time.time()) > int(seen), "the requeue second to pass", 5, 0.05)

    def running_again() -> bool:
        # A requeued job waits for a begin time in the future, which slurmctld may set only once the
        # requeue has completed (after an update sent earlier, on a loaded machine): bring it
        # forward until the job runs.
        if _fields(sandbox, requeued).get("JobState") == "RUNNING":
            return True
        sandbox.run("scontrol", "update", f"jobid={requeued}", "starttime=now", check=False)
        return False

    wait_for(running_again, f"the requeued job {requeued} to run again", 60, 0.5)
    _wait_state(hooks["ssh"], requeued, {"RUNNING"})
    sandbox.write_user_file(go, "go\n")
    ended = {j: _wait_state(hooks["rest"], j, {"FAILED", "COMPLETED"}) for j in (failed, requeued)}
    assert all(job.source == "slurmctld" for job in ended.values())

    _wait_purged(sandbox, [failed, requeued])
    # slurmctld sends job records to slurmdbd asynchronously: accounting may lag for a moment.
    wait_for(
        lambda: (
            sandbox.run("sacct", "-n", "-X", "-j", f"{failed},{requeued}", "-o", "State").stdout.split()
            == ["FAILED", "COMPLETED"]
        ),
        "accounting to hold both ends",
    )
    for transport, hook in hooks.items():
        job = hook.get_job(failed, required=True)
        assert job is not None and job.source == "accounting", transport
        assert (job.state, job.exit_code, job.exit_signal) == ("FAILED", 5, 0), transport
        assert job.std_out == str(workdir / f"purged-{failed}.out"), transport
        assert job_outcome(job)[:2] == (JobOutcome.FAILED, FailureClass.USER_PROGRAM_FAILED)
        # Not the first attempt (REQUEUED) but the true end of the last one.
        again = hook.get_job(requeued)
        assert again is not None and again.source == "accounting", transport
        assert (again.state, again.restarts, again.exit_code) == ("COMPLETED", 1, 0), transport
        assert job_outcome(again)[0] is JobOutcome.SUCCEEDED
        assert hook.get_job(2_000_000_000) is None
        with pytest.raises(SlurmJobLost, match=r"accounting \(slurmdbd\) has no record of it"):
            hook.get_job(2_000_000_000, required=True)


@pytest.mark.slurm_versions("26.05")  # no slurmdbd, MinJobAge=30
def test_purged_job_without_accounting_is_an_infrastructure_failure(
    sandbox: Sandbox, hooks: dict[str, SlurmHook], jobs: list[int], workdir: Path
) -> None:
    assert not sandbox.accounting
    job_id = hooks["ssh"].submit_job(
        script="#!/bin/bash\ntrue\n", working_directory=str(workdir), output=str(workdir / "%j.out")
    )
    jobs.append(job_id)
    assert _wait_state(hooks["rest"], job_id, {"COMPLETED"}).source == "slurmctld"
    _wait_purged(sandbox, [job_id])
    for transport, hook in hooks.items():
        assert hook.get_job(job_id) is None, transport
        with pytest.raises(SlurmJobLost) as lost:
            hook.get_job(job_id, required=True)
        assert str(lost.value).startswith(
            f"job {job_id} is no longer known to slurmctld and the cluster keeps no accounting"
        )
        assert lost.value.failure_class == FailureClass.OUTCOME_UNKNOWN.value
        assert hook.get_array_tasks(job_id) == []


# ---- states on the way and at the end ----------------------------------------------------------------


def test_a_missing_output_directory_is_the_submission_and_a_signal_is_the_program(
    sandbox: Sandbox, hooks: dict[str, SlurmHook], jobs: list[int], workdir: Path
) -> None:
    """An output file slurmstepd cannot create: 22.05 ends FAILED/JobLaunchFailure, 24.11 and 26.05
    FAILED/RaisedSignal:53, all with ExitCode=0:53 (ESLURMD_IO_ERROR 4021 & 0x7f)."""
    launched: dict[str, int] = {}
    killed: dict[str, int] = {}
    for transport, hook in hooks.items():
        launched[transport] = hook.submit_job(
            script="#!/bin/bash\necho never\n",
            working_directory=str(workdir),
            output=f"/nonexistent/pathways-sandbox-{uuid.uuid4().hex[:8]}/%j.out",
        )
        killed[transport] = hook.submit_job(
            script="#!/bin/bash\nkill -9 $$\n", working_directory=str(workdir), output="/dev/null"
        )
        jobs += [launched[transport], killed[transport]]
    for transport, hook in hooks.items():
        job = _wait_state(hook, launched[transport], {"FAILED", "COMPLETED"})
        assert (job.state, job.exit_code, job.exit_signal) == ("FAILED", 0, 53), transport
        outcome, failure, message = job_outcome(job)
        assert (outcome, failure) == (JobOutcome.FAILED, FailureClass.SPEC_REJECTED), message
        assert "ESLURMD_IO_ERROR" in message and "--output" in message
        job = _wait_state(hook, killed[transport], {"FAILED", "COMPLETED"})
        assert (job.state, job.exit_signal) == ("FAILED", 9), transport
        assert job_outcome(job)[:2] == (JobOutcome.FAILED, FailureClass.USER_PROGRAM_FAILED)


def test_node_failure_ends_a_job_that_may_not_be_requeued_and_requeues_the_others(
    sandbox: Sandbox, hooks: dict[str, SlurmHook], jobs: list[int], workdir: Path
) -> None:
    """requeue=False on every transport and version (22.05's slurmrestd needs ``no_requeue``: it
    ignores ``"requeue": false``): the node goes down, the job ends NODE_FAIL (an infrastructure
    failure); a requeueable job goes back to PENDING with restarts 1. ReturnToService=2 brings the
    node back once its slurmd answers. On the isolated node: no other test's job is there."""
    with claim_isolated_node(sandbox.settings, sandbox.run) as isolated:
        fixed: dict[str, int] = {}
        movable: dict[str, int] = {}
        for transport, hook in hooks.items():
            fixed[transport] = hook.submit_job(
                script="#!/bin/bash\nsleep 300\n",
                partition=isolated.partition,
                working_directory=str(workdir),
                output="/dev/null",
                requeue=False,
            )
            movable[transport] = hook.submit_job(
                script="#!/bin/bash\nsleep 300\n",
                partition=isolated.partition,
                working_directory=str(workdir),
                output="/dev/null",
                requeue=True,
            )
            jobs += [fixed[transport], movable[transport]]
        for transport, hook in hooks.items():
            for job_id, flag in ((fixed[transport], "0"), (movable[transport], "1")):
                _wait_state(hook, job_id, {"RUNNING"})
                assert _fields(sandbox, job_id)["Requeue"] == flag, (transport, job_id)
        sandbox.run(
            "scontrol",
            "update",
            f"nodename={isolated.node}",
            "state=down",
            "reason=pathways-node-failure-test",
        )
        try:
            for transport, hook in hooks.items():
                job = _wait_state(hook, fixed[transport], {"NODE_FAIL", "PENDING"})
                assert job.state == "NODE_FAIL", transport
                outcome, failure, message = job_outcome(job)
                assert (outcome, failure) == (JobOutcome.FAILED, FailureClass.INFRASTRUCTURE), message
                back = _wait_state(hook, movable[transport], {"PENDING"})
                assert back.restarts == 1 and back.requeued
                assert job_outcome(back)[:2] == (JobOutcome.ACTIVE, FailureClass.PREEMPTED)
        finally:
            wait_for(
                lambda: (
                    "down" not in sandbox.run("sinfo", "-h", "-N", "-n", isolated.node, "-o", "%T").stdout
                ),
                "the node to come back (ReturnToService=2)",
                timeout=60,
            )


def test_preemption_requeue_is_never_an_end(
    sandbox: Sandbox, hooks: dict[str, SlurmHook], jobs: list[int], workdir: Path
) -> None:
    """Preempted with PreemptMode=REQUEUE, a job passes COMPLETING (24.11/26.05 report it as
    ``["PENDING", "COMPLETING"]``) on its way back to PENDING: no look at it may read as an end.
    On the isolated node: the high-tier job preempts only this test's jobs."""
    with claim_isolated_node(sandbox.settings, sandbox.run) as isolated:
        _preempt_and_watch(sandbox, hooks, jobs, workdir, isolated)


def _preempt_and_watch(
    sandbox: Sandbox, hooks: dict[str, SlurmHook], jobs: list[int], workdir: Path, isolated: IsolatedNode
) -> None:
    victims = {
        transport: hook.submit_job(
            script="#!/bin/bash\nsleep 300\n",
            partition=isolated.partition,
            working_directory=str(workdir),
            output="/dev/null",
            requeue=True,
        )
        for transport, hook in hooks.items()
    }
    jobs += list(victims.values())
    for transport, hook in hooks.items():
        _wait_state(hook, victims[transport], {"RUNNING"})
    options = (f"--partition={isolated.high}", f"--cpus-per-task={isolated.cpus}", "--output=/dev/null")
    high = sandbox.sbatch(*options, "--wrap", "sleep 300")
    jobs.append(high)
    seen: dict[str, list[str]] = {transport: [] for transport in hooks}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = True
        for transport, hook in hooks.items():
            job = hook.get_job(victims[transport])
            assert job is not None
            outcome, failure, _message = job_outcome(job)
            assert outcome is JobOutcome.ACTIVE, (transport, job)
            if not seen[transport] or seen[transport][-1] != job.state:
                seen[transport].append(job.state)
            if job.state == "PENDING" and job.restarts >= 1:
                assert failure is FailureClass.PREEMPTED
            else:
                done = False
        if done:
            break
    assert all(states[-1] == "PENDING" for states in seen.values()), seen


# ---- sbatch options ------------------------------------------------------------------------------------


def test_sbatch_options_reach_slurmctld(
    sandbox: Sandbox, hooks: dict[str, SlurmHook], jobs: list[int], workdir: Path
) -> None:
    """The common sbatch options, mapped per transport and API version, as slurmctld shows them."""
    # A reservation to name: one core, a month ahead (jobs without a time limit cannot start on
    # reserved resources however far ahead; one core leaves the node to everyone else).
    reservation = f"pathways-test-{uuid.uuid4().hex[:8]}"
    sandbox.run(
        "scontrol", "create", "reservation", f"ReservationName={reservation}", "StartTime=now+30days",
        "Duration=1", f"Users={sandbox.user}", f"Nodes={sandbox.node}", "CoreCnt=1",
    )  # fmt: skip
    submitted: list[int] = []
    try:
        anchor = hooks["ssh"].submit_job(
            script="#!/bin/bash\ntrue\n", output="/dev/null", extra_options={"hold": ""}
        )
        jobs.append(anchor)
        node_counts: dict[bool, str] = {}
        for transport, hook in hooks.items():
            for requeue, exclusive in ((False, ""), (True, "user")):
                begin = time.time() + 3600
                job_id = hook.submit_job(
                    script="#!/bin/bash\ntrue\n",
                    working_directory=str(workdir),
                    output="/dev/null",
                    requeue=requeue,
                    extra_options={
                        "begin": "now+3600",
                        "dependency": f"afterany:{anchor}",
                        "exclusive": exclusive,
                        "nodes": "1",
                        "ntasks": "2",
                        "cpus-per-task": "2",
                        "mem": "100M",
                        "reservation": reservation,
                        "hold": "",
                    },
                )
                jobs.append(job_id)
                submitted.append(job_id)
                f = _fields(sandbox, job_id)
                where = (transport, requeue)
                assert f["JobState"] == "PENDING" and f["Reason"] == "JobHeldUser", where
                assert abs(int(f["EligibleTime"]) - begin) <= 5, where
                assert f["Dependency"].startswith(f"afterany:{anchor}"), where
                # 22.05, 24.11: OverSubscribe=NO (--exclusive) / USER; 26.05 shows it apart as
                # Exclusive=NODE / USER (OverSubscribe=NO either way).
                shown = f["Exclusive"] if "Exclusive" in f else f["OverSubscribe"]
                assert shown == ("USER" if exclusive else ("NODE" if "Exclusive" in f else "NO")), where
                assert (f["NumTasks"], f["CPUs/Task"]) == ("2", "2"), where
                # sbatch --nodes=1 reads NumNodes=1 on 22.05, 1-1 on 24.11 and 26.05; REST alike.
                assert f["NumNodes"] == node_counts.setdefault(requeue, f["NumNodes"]), where
                assert f["NumNodes"] in ("1", "1-1"), where
                assert f["MinMemoryNode"] == "100M" and f["Reservation"] == reservation, where
                assert f["Requeue"] == ("1" if requeue else "0"), where
            # What the cluster has no resources for is refused by slurmctld at submission, naming it.
            for option, value, words in (
                ("constraint", "no-such-feature", "feature"),
                ("gres", "nosuchgres:1", "gres"),
            ):
                with pytest.raises((SlurmApiError, SlurmCommandError)) as refused:
                    hook.submit_job(
                        script="#!/bin/bash\ntrue\n",
                        output="/dev/null",
                        extra_options={option: value, "hold": ""},
                    )
                text = str(refused.value).lower()
                # slurmrestd 22.05 only says "Failure during parsing [9001]" (ESLURM_REST_FAIL_PARSING).
                generic = transport == "rest" and sandbox.version == "22.05" and "[9001]" in text
                assert words in text or generic, (transport, text)
    finally:
        # Jobs that name a reservation keep it from being deleted.
        if submitted:
            sandbox.run("scancel", *(str(j) for j in submitted), check=False)
            sandbox.wait_gone(submitted)
        sandbox.run("scontrol", "delete", f"ReservationName={reservation}")


def test_signal_option_reaches_the_batch_shell(
    sandbox: Sandbox, hooks: dict[str, SlurmHook], jobs: list[int], workdir: Path
) -> None:
    """``--signal=B:USR1@60`` with a one-minute limit: the warning is due at once and slurmctld sends
    it at its next time-limit pass (every 30 s, PERIODIC_TIMEOUT in slurmctld.h)."""
    marks = {transport: workdir / f"signal-{transport}" for transport in hooks}
    if sandbox.version == "22.05":  # slurmrestd 22.05 cannot signal the batch shell only ("B:")
        with pytest.raises(ValueError, match=r"signal.*batch shell"):
            hooks["rest"].submit_job(script="#!/bin/bash\ntrue\n", extra_options={"signal": "B:USR1@60"})
        del marks["rest"]
    for transport, hook in hooks.items():
        if transport not in marks:
            continue
        job_id = hook.submit_job(
            script=(
                "#!/bin/bash\n"
                f"trap 'echo got-usr1 > \"{marks[transport]}\"; exit 0' USR1\n"
                "while true; do sleep 0.2; done\n"
            ),
            working_directory=str(workdir),
            output="/dev/null",
            time_limit=1,
            extra_options={"signal": "B:USR1@60"},
        )
        jobs.append(job_id)
    wait_for(lambda: all(mark.exists() for mark in marks.values()), "USR1 in both batch shells", timeout=50)


# ---- MaxArraySize ------------------------------------------------------------------------------------------


def test_max_array_size_is_read_from_the_cluster(
    sandbox: Sandbox, hooks: dict[str, SlurmHook], connections: Any, jobs: list[int], workdir: Path
) -> None:
    limit = int(sandbox.run("scontrol", "show", "config").stdout.split("MaxArraySize", 1)[1].split()[1])
    assert hooks["ssh"].max_array_size() == limit
    api = sandbox.settings["SLURM_SANDBOX_REST_API_VERSION"]
    # slurmrestd shows the configuration from v0.0.45 (26.05) on; before, only over SSH (ssh_host).
    assert hooks["rest"].max_array_size() == (limit if api >= "v0.0.45" else None)
    ssh = sandbox.ssh_connection()
    sftp = {k: v for k, v in ssh["extra"].items() if k != "transport"}
    conn = sandbox.rest_connection(extra={"ssh_host": ssh["host"], "ssh_port": ssh["port"], **sftp})
    with_ssh = SlurmHook(connections("pathways_slurm_test_rest_ssh_host", conn))
    try:
        assert with_ssh.max_array_size() == limit
    finally:
        with_ssh.close()
    for transport, hook in hooks.items():
        if hook.max_array_size() is None:
            continue
        with pytest.raises(ValueError, match=f"MaxArraySize is {limit}"):
            hook.submit_job(script="#!/bin/bash\ntrue\n", output="/dev/null", array=f"0-{limit}")
        job_id = hook.submit_job(
            script="#!/bin/bash\ntrue\n",
            working_directory=str(workdir),
            output="/dev/null",
            array=f"{limit - 1}",
            extra_options={"hold": ""},
        )
        jobs.append(job_id)
        assert [t.array_task_id for t in hook.get_array_tasks(job_id)] == [limit - 1], transport


def test_a_jobs_comment_is_replaced_by_its_owner_over_both_transports(
    hooks: dict[str, SlurmHook], jobs: list[int], workdir: Path
) -> None:
    """The provider marks which try of a task instance follows a job in the job's comment: the
    cluster user may replace it (``scontrol update Comment=``, slurmrestd's job update), and every
    way of reading the job shows the new text, spaces included."""
    for transport, hook in hooks.items():
        job_id = hook.submit_job(
            script="#!/bin/bash\ntrue\n",
            working_directory=str(workdir),
            output="/dev/null",
            comment="airflow-task-instance=abc",
            extra_options={"hold": ""},
        )
        jobs.append(job_id)
        hook.set_job_comment(job_id, "airflow-task-instance=abc try=2")
        for reader in hooks.values():
            job = reader.get_job(job_id)
            assert job is not None and job.comment == "airflow-task-instance=abc try=2", transport


@pytest.mark.slurm_versions("26.05")  # its slurmrestd serves v0.0.42 to v0.0.45
@pytest.mark.parametrize("api_version", ["v0.0.43", "v0.0.44", "v0.0.45"])
def test_each_data_parser_version_the_daemon_serves_submits_follows_and_cancels(
    sandbox: Sandbox, connections: Any, jobs: list[int], workdir: Path, api_version: str
) -> None:
    """Slurm 25.05 brought data parser v0.0.43 and 25.11 v0.0.44; 26.05's slurmrestd still serves
    both (its ``/openapi/v3`` lists them, as ``tests/sandbox/slurm/test_slurm_versions.py`` pins). A
    connection pinned to each (extra ``api_version``) submits, reads a job through its end with its
    exit code and times, finds an array's tasks, renames a comment and cancels, on the real daemon."""
    conn_id = connections(
        f"pathways_slurm_test_rest_{api_version.replace('.', '_')}",
        sandbox.rest_connection(extra={"api_version": api_version}),
    )
    hook = SlurmHook(conn_id)
    try:
        assert api_version in hook.test_connection()[1]
        done = hook.submit_job(
            script="#!/bin/bash\nexit 4\n", working_directory=str(workdir), output=str(workdir / "%j.out")
        )
        jobs.append(done)
        job = _wait_state(hook, done, {"FAILED"})
        assert (job.exit_code, job.reason) == (4, "NonZeroExitCode")
        assert job.submit_time is not None and job.start_time is not None and job.end_time is not None
        array = hook.submit_job(
            script="#!/bin/bash\nsleep 300\n",
            working_directory=str(workdir),
            output="/dev/null",
            array="0-2",
            extra_options={"hold": ""},
            comment="airflow-task-instance=abc",
        )
        jobs.append(array)
        assert [task.array_task_id for task in hook.get_array_tasks(array)] == [0, 1, 2]
        hook.set_job_comment(array, "airflow-task-instance=abc try=2")
        assert {task.comment for task in hook.get_array_tasks(array)} == {"airflow-task-instance=abc try=2"}
        assert hook.cancel_job(array) is True
        wait_for(
            lambda: {t.state for t in hook.get_array_tasks(array)} == {"CANCELLED"}, "the array cancelled"
        )
    finally:
        hook.close()
