"""The sandbox's life cycle across checkouts: a sandbox that another checkout left running, and was
deleted since, is taken over; after the stop step (``make sandbox-down``) nothing of it is left;
another checkout's ``make test`` beside a test session shares its Slurm clusters and stops nothing
the session uses.

The tests start the sandbox from a copy of this checkout's ``sandbox/`` (and ``Makefile``) in a
temporary directory, as another checkout would. The Slurm clusters are one per machine: the tests
that stop them or take them over (``clusters_to_ourselves``) run only when no other run or test
session uses them, and bring them back up from this checkout at the end.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import processes, registry
from sandbox.gcs.launcher import start_gcs_emulator
from sandbox.kube.launcher import ensure_kube_standin
from sandbox.slurm.cluster import VERSIONS, slurm_cli, start_slurm_sandbox
from tests.support.environment import require_debian, require_root

pytestmark = pytest.mark.slurm

REPO_ROOT = Path(__file__).resolve().parents[2]
SLURM_DIR = REPO_ROOT / "sandbox" / "slurm"
CHROOT_BASE = Path(os.environ.get("SANDBOX_CHROOT_DIR") or "/var/lib/pathways-slurm-sandbox")
# Every fixed port of the Slurm sandbox: the host's cluster, then 24.11's and 26.05's (with sshd).
SLURM_PORTS = (6817, 6818, 6819, 6820, 2222, 6827, 6828, 6829, 6830, 6831, 2232, 6837, 6838, 6840, 6841, 2242)
SLURM_DAEMONS = {"slurmctld", "slurmd", "slurmrestd", "slurmstepd", "slurmdbd", "slurmscriptd", "mariadbd"}


def _wait(predicate, what: str, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {result!r})")
        time.sleep(0.1)


def _run(command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        command, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, (
        f"{shlex.join(command)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    )
    return proc


@pytest.fixture
def other_checkout() -> Iterator[Path]:
    """A copy of this checkout's sandbox in a short temporary path (socket paths stay short)."""
    require_root("the sandbox's life cycle needs root (Slurm clusters, chroots)")
    require_debian("the Slurm sandbox needs Debian (apt-get)")
    base = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))
    copy = base / "checkout"
    copy.mkdir()
    shutil.copytree(REPO_ROOT / "sandbox", copy / "sandbox", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO_ROOT / "Makefile", copy / "Makefile")
    try:
        yield copy
    finally:
        shutil.rmtree(base, ignore_errors=True)
        # This checkout's clusters, as the rest of the test session expects them.
        for version in VERSIONS:
            start_slurm_sandbox(timeout=900, version=version)


@pytest.fixture
def clusters_to_ourselves(other_checkout: Path) -> Path:
    """The other checkout, with the machine's Slurm clusters stopped: a test that stops them or takes
    them over runs only while no other run or test session may be using them."""
    from sandbox.session import shared_slurm_users

    users = shared_slurm_users()
    if users:
        pytest.skip(f"this test stops the machine's Slurm clusters, which others use: {'; '.join(users)}")
    _run(["bash", str(SLURM_DIR / "down.sh")], REPO_ROOT)
    return other_checkout


def _start_kube(copy: Path) -> subprocess.Popen[bytes]:
    """The copy's Kubernetes stand-in, detached as ``make demo`` starts it."""
    state = copy / ".sandbox" / "kube"
    state.mkdir(parents=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "sandbox.kube", "--state-dir", str(state)],
        cwd=copy,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait(lambda: (state / "kube.json").exists(), "the copy's stand-in to listen")
    return process


def _start_gcs(copy: Path) -> int:
    """The copy's GCS emulator, detached (``python -m sandbox.gcs start``); its pid."""
    _run([sys.executable, "-m", "sandbox.gcs", "start", "--state-dir", ".sandbox/gcs"], copy)
    return int(json.loads((copy / ".sandbox" / "gcs" / "gcs.json").read_text())["pid"])


def _pids(run_dir: Path) -> dict[str, tuple[int, int]]:
    """``{pid file: (pid, start time)}`` of the daemons a Slurm state dir records."""
    found = {}
    for path in run_dir.glob("*.pid"):
        pid = int(path.read_text().strip())
        started = processes.start_time(pid)
        assert started is not None, f"{path} names no running process"
        found[path.name] = (pid, started)
    return found


def _gone(pid: int, started: int) -> bool:
    return processes.start_time(pid) != started


def test_a_sandbox_left_by_a_deleted_checkout_is_taken_over(
    clusters_to_ourselves: Path, tmp_path: Path
) -> None:
    copy = clusters_to_ourselves
    kube = _start_kube(copy)
    gcs_pid = _start_gcs(copy)
    started = {pid: processes.start_time(pid) for pid in (kube.pid, gcs_pid)}
    _run(["bash", str(copy / "sandbox/slurm/up.sh")], copy, SANDBOX_SLURM_TAKEOVER="1")
    _run(["bash", str(copy / "sandbox/slurm/versions.sh"), "up", "26.05"], copy, SANDBOX_SLURM_TAKEOVER="1")
    daemons = {**_pids(copy / ".sandbox/slurm/run"), **_pids(copy / ".sandbox/slurm-26.05/run")}
    assert {"slurmctld.pid", "slurmrestd.pid", "sshd.pid"} <= set(daemons)

    shutil.rmtree(copy)  # the other checkout is deleted; its sandbox still runs

    # Bringing the sandbox up from this checkout succeeds and ends what the deleted one left.
    standin = ensure_kube_standin(tmp_path / "kube", detach=False)
    emulator = start_gcs_emulator(tmp_path / "gcs", reuse=False)
    try:
        host = start_slurm_sandbox()
        chroot = start_slurm_sandbox(timeout=900, version="26.05")
        for pid, start in started.items():
            assert _gone(pid, start), f"the deleted checkout's pid {pid} still runs"
        kube.wait(10)
        left = {name: pid for name, (pid, start) in daemons.items() if not _gone(pid, start)}
        assert not left, f"daemons of the deleted checkout still run: {left}"
        assert host["SLURM_SANDBOX_STATE_DIR"] == str(REPO_ROOT / ".sandbox" / "slurm")
        assert chroot["SLURM_SANDBOX_STATE_DIR"] == str(REPO_ROOT / ".sandbox" / "slurm-26.05")
        # The ports are this checkout's daemons'.
        ours = _pids(REPO_ROOT / ".sandbox/slurm/run")
        assert processes.port_owners(6817) == {ours["slurmctld.pid"][0]}
        assert not [r for r in registry.records() if r.repo == str(copy)]
    finally:
        standin.stop()
        emulator.stop()


def _sandbox_leftovers(cluster_uid: int) -> list[str]:
    """Every process that belongs to the sandbox's Slurm clusters, described."""
    roots = {str(CHROOT_BASE / version / "root") for version in VERSIONS[1:]}
    found = []
    for pid in processes.all_pids():
        comm, root = processes.comm(pid), processes.root(pid)
        if processes.start_time(pid) is None:
            continue  # a zombie: gone, only not reaped
        if comm in SLURM_DAEMONS or root in roots or processes.uid(pid) == cluster_uid:
            found.append(f"{pid} {comm} (root {root}): {' '.join(processes.cmdline(pid))[:120]}")
        elif comm == "sshd" and any(".sandbox/slurm" in part for part in processes.cmdline(pid)):
            found.append(f"{pid} sshd: {' '.join(processes.cmdline(pid))[:120]}")
    return found


def test_nothing_of_the_sandbox_is_left_after_the_stop_step(clusters_to_ourselves: Path) -> None:
    from sandbox.airflow.postgres import postgres_bin_dir

    postgres_bin_dir()  # PostgreSQL (make sandbox-airflow installs it; as root this does too)
    copy = clusters_to_ourselves
    kube = _start_kube(copy)
    gcs_pid = _start_gcs(copy)
    # The whole Slurm sandbox from the copy, as `make test` starts it, with a job on each cluster.
    _run(["make", "--no-print-directory", "sandbox-slurm"], copy)
    for state in ("slurm", "slurm-24.11", "slurm-26.05"):
        settings = json.loads((copy / ".sandbox" / state / "slurm.json").read_text())
        sbatch = [*slurm_cli(settings), "sbatch", "--chdir=/tmp", "--output=/dev/null", "--wrap", "sleep 600"]
        _run(sbatch, copy)
    # A PostgreSQL whose owner died without stopping it (a killed test session).
    _run(
        [
            sys.executable,
            "-c",
            "from sandbox.airflow.postgres import start_postgres; print(start_postgres().port)",
        ],
        copy,
    )
    records = [r for r in registry.records() if r.repo == str(copy)]
    assert {r.kind for r in records} == {"kube", "gcs", "postgres"}
    munge_marker = registry.run_dir() / "munged.started-by-sandbox"
    munged = int(munge_marker.read_text()) if munge_marker.exists() else None
    ports = {port for r in records for port in processes.listening_ports(r.pid)}
    assert len(ports) == 3

    try:
        _run(["make", "--no-print-directory", "sandbox-down", f"PY={sys.executable}"], copy)
    finally:
        for record in records:  # the directories of what the copy started (the processes are checked below)
            if record.kind == "postgres":
                shutil.rmtree(record.state_dir, ignore_errors=True)

    kube.wait(30)
    assert all(not r.alive() for r in records), [str(r) for r in records if r.alive()]
    assert processes.start_time(gcs_pid) is None
    busy = {port for port in (*SLURM_PORTS, *ports) if processes.port_listening(port)}
    assert not busy, f"ports still taken: {busy}"
    # The copy's own cluster user (sandbox/slurm/lib.sh sandbox_cluster_user): nothing of it runs.
    cluster_user = json.loads((copy / ".sandbox" / "slurm" / "slurm.json").read_text())["SLURM_SANDBOX_USER"]
    assert not _sandbox_leftovers(pwd.getpwnam(cluster_user).pw_uid)
    if munged is not None:  # the munged the sandbox started
        assert processes.start_time(munged) is None and not munge_marker.exists()
    mounts = Path("/proc/self/mounts").read_text()
    assert f" {CHROOT_BASE}/" not in mounts, "something is still mounted in a chroot"
    status = subprocess.run(
        ["bash", str(SLURM_DIR / "status.sh")], capture_output=True, text=True, check=True
    )
    assert status.stdout == ""
    assert not [r for r in registry.records() if r.repo == str(copy) or r.orphaned()]


def test_another_checkouts_make_test_beside_this_session_shares_its_clusters_and_stops_nothing_of_it(
    other_checkout: Path, tmp_path: Path
) -> None:
    """Two sessions at once: while this test session uses the Slurm clusters, a stand-in and an
    emulator of its own, another checkout's ``make test`` begins (``make sandbox-slurm`` inside a
    ``sandbox.session`` run) and ends (its stop step, its orphan reaping). It uses the running clusters
    (one per machine) instead of taking them over, and leaves running every daemon, job and process
    of this session: what once made a fresh clone's run fail beside another checkout's. Its ``make
    sandbox-down`` then leaves the clusters to the sessions that still use them."""
    copy = other_checkout
    clusters = {version: start_slurm_sandbox(timeout=900, version=version) for version in VERSIONS}
    daemons = {
        f"{version}/{name}": pid
        for version, settings in clusters.items()
        for name, pid in _pids(Path(settings["SLURM_SANDBOX_STATE_DIR"]) / "run").items()
    }
    jobs = {}
    for version, settings in clusters.items():
        sbatch = [*slurm_cli(settings), "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null"]
        jobs[version] = _run([*sbatch, "--wrap", "sleep 600"], REPO_ROOT).stdout.strip().split(";")[0]
    standin = ensure_kube_standin(tmp_path / "kube", detach=False)
    emulator = start_gcs_emulator(tmp_path / "gcs", reuse=False)
    try:
        # The copy's own state dirs (as another checkout has), not a run of this session.
        own = ("SANDBOX_STATE_DIR", "SANDBOX_VERSION_STATE_DIR", "PATHWAYS_SANDBOX_SESSION")
        env = {k: v for k, v in os.environ.items() if k not in own}

        def in_copy(*command: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                command, cwd=copy, env=env, capture_output=True, text=True, timeout=900, check=False
            )

        run = (sys.executable, "-m", "sandbox.session", "run", "--name", "test", "--")
        proc = in_copy(*run, "make", "--no-print-directory", "sandbox-slurm")
        assert proc.returncode == 0, f"the other checkout's run failed:\n{proc.stdout}\n{proc.stderr}"
        for version, settings in clusters.items():
            where = settings["SLURM_SANDBOX_STATE_DIR"]
            assert f"using the cluster another checkout started from {where}" in proc.stderr
            state = "slurm" if version == VERSIONS[0] else f"slurm-{version}"
            theirs = json.loads((copy / ".sandbox" / state / "slurm.json").read_text())
            assert theirs["SLURM_SANDBOX_STATE_DIR"] == where
            assert theirs["SLURM_SANDBOX_REST_URL"] == settings["SLURM_SANDBOX_REST_URL"]
            # It is a cluster user of its own, as a second developer on a real cluster is: its jobs,
            # its ~/pathways/cluster.env (one Pathways service per user), its token and key.
            _assert_own_cluster_user(theirs, settings, copy)

        # Its `make sandbox-down` leaves the clusters to the test sessions that use them (here
        # another one, not this test's own: the stop step's own session never counts as another).
        other = subprocess.Popen(["sleep", "600"], start_new_session=True)
        registry.add_user("slurm", pid=other.pid)
        try:
            down = in_copy("make", "--no-print-directory", "sandbox-down", f"PY={sys.executable}")
        finally:
            other.kill()
            other.wait()
        assert down.returncode == 0, f"{down.stdout}\n{down.stderr}"
        assert "left running: Slurm 22.05" in down.stderr and f"pid {other.pid} (sleep 600)" in down.stderr

        restarted = {name for name, (pid, start) in daemons.items() if _gone(pid, start)}
        assert not restarted, f"the other checkout's run stopped or restarted {restarted}:\n{proc.stderr}"
        for version, settings in clusters.items():
            squeue = [*slurm_cli(settings), "squeue", "-h", "-j", jobs[version], "-o", "%T"]
            assert _run(squeue, REPO_ROOT).stdout.strip() == "RUNNING", f"{version} job {jobs[version]}"
        assert standin.request("GET", "/version")
        assert emulator.alive()
        assert "[sandbox] stopping" not in proc.stderr and "Slurm 22.05" in proc.stderr  # and says so
    finally:
        for version, settings in clusters.items():
            if version in jobs:
                subprocess.run([*slurm_cli(settings), "scancel", jobs[version]], check=False)
        standin.stop()
        emulator.stop()


def _assert_own_cluster_user(theirs: dict[str, str], ours: dict[str, str], checkout: Path) -> None:
    """The other checkout reaches the shared cluster as its own user (sandbox/slurm/lib.sh,
    ``sandbox_cluster_user``): over REST with its JWT, over SSH with its key, to its home in its
    own state dir."""
    from tests.sandbox.slurm.slurm_sandbox_helpers import SlurmSandbox, ssh_run

    user, home = theirs["SLURM_SANDBOX_USER"], theirs["SLURM_SANDBOX_USER_HOME"]
    assert user != ours["SLURM_SANDBOX_USER"] and home != ours["SLURM_SANDBOX_USER_HOME"]
    assert Path(home).is_relative_to(checkout / ".sandbox")
    assert theirs["SLURM_SANDBOX_CLUSTER_ENV"] == f"{home}/pathways/cluster.env"
    cluster = SlurmSandbox(theirs)
    status, body = cluster.rest("GET", "ping")
    assert status == 200, body
    client = cluster.ssh_client()
    try:
        assert ssh_run(client, 'id -un; echo "$HOME"')[1].split() == [user, home]
    finally:
        client.close()


def test_the_demos_cleanup_cancels_the_slurm_jobs_its_runs_left_and_no_others() -> None:
    """``make demo`` stopped (Ctrl-C, or SIGTERM passed on by its session) while its Slurm example
    waits: the DAG run never reaches its teardown. The cleanup the demo runs however it ends
    (``sandbox/demo.py``, ``main``'s ``finally``) cancels what its runs left active, the jobs
    carrying its deployment's name and its services' worker arrays, and nothing of another demo or
    test run on the shared cluster (their names differ; a job without one is not its). The signal
    reaching that ``finally`` is not driven here (it needs a whole demo run)."""
    from sandbox.demo import _end_left_jobs

    settings = start_slurm_sandbox()
    sbatch = [*slurm_cli(settings), "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null"]
    sbatch += [f"--uid={settings['SLURM_SANDBOX_USER']}"]
    marks = "airflow-task-instance=0 role=pathways-service dag=d task=t map=-1 keep=success"

    def submit(comment: str, *extra: str) -> str:
        return _run(
            [*sbatch, *extra, f"--comment={comment}", "--wrap", "sleep 600"], REPO_ROOT
        ).stdout.strip()

    service = submit(f"{marks} dep=demo-1")
    workers = submit(f"pathways-service={service}", "--array=0-1")
    others = [submit(f"{marks} dep=demo-2"), submit("unmarked"), submit("pathways-service=1", "--array=0-1")]
    try:
        assert _end_left_jobs(settings, "demo-1") == sorted([service, workers], key=int)

        def state(job: str) -> set[str]:
            squeue = [*slurm_cli(settings), "squeue", "-h", "-r", "-t", "all", "-j", job, "-o", "%T"]
            return set(_run(squeue, REPO_ROOT).stdout.split())

        _wait(lambda: state(service) | state(workers) <= {"CANCELLED"}, "the demo's jobs to be cancelled")
        assert all(state(job) <= {"PENDING", "RUNNING"} for job in others)
        assert _end_left_jobs(settings, "demo-1") == []
    finally:
        subprocess.run([*slurm_cli(settings), "scancel", service, workers, *others], check=False)


_HOLD = """
import signal, sys
from pathlib import Path
from sandbox.kube.launcher import ensure_kube_standin
standin = ensure_kube_standin(Path(sys.argv[1]))
print(standin.pid, flush=True)
signal.pause()
"""


def _as_a_terminal_job() -> None:
    """Ctrl-C's signals as a terminal's foreground job has them. A command started in the background
    of a non-interactive shell (CI's runners, ``nohup ... &``) inherits SIGINT and SIGQUIT ignored,
    and a Python started so keeps ignoring them: Ctrl-C would never reach the command."""
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("keep", [False, True], ids=["stop", "keep"])
def test_a_run_stops_what_it_started_when_interrupted(tmp_path: Path, keep: bool) -> None:
    """``python -m sandbox.session run`` (``make test``/``make demo``) interrupted with Ctrl-C (SIGINT to
    the terminal's process group): the command ends, then what it started is stopped, or with
    ``--keep`` left running and listed with the command that stops it. A run directory of its own
    keeps this run apart from the machine's (whatever else runs counts as already running)."""
    env = {**os.environ, registry.RUN_DIR_ENV: str(tmp_path / "run")}
    command = [sys.executable, "-m", "sandbox.session", "run", "--name", "interrupted"]
    command += ["--keep"] if keep else []
    run = subprocess.Popen(
        [*command, "--", sys.executable, "-c", _HOLD, str(tmp_path / "kube")],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        preexec_fn=_as_a_terminal_job,
    )
    try:
        assert run.stdout is not None
        standin = int(run.stdout.readline())
        started = processes.start_time(standin)
        os.killpg(run.pid, signal.SIGINT)  # Ctrl-C
        _out, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode != 0
    assert "interrupted (SIGINT)" in err
    if keep:
        assert processes.start_time(standin) == started, err
        assert "Kubernetes stand-in" in err and "stop it with: make sandbox-down" in err
        processes.stop_all([standin], 10)
    else:
        assert processes.start_time(standin) is None, err
        assert "stopping Kubernetes stand-in" in err
