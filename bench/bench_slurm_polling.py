"""Load on slurmctld: Slurm RPCs per readiness poll (``check_pathways_service``) at 4 and 32 slices.

Runs against each real sandbox Slurm cluster (22.05 from ``sandbox/slurm/up.sh``, 24.11 and 26.05
from ``sandbox/slurm/versions.sh``; ``--versions`` picks), 127.0.0.1 only. Per version, two Pathways
service jobs (``start_pathways.sh``, MAX_SLICES 4 and 32) are started and waited for; then, per
transport (REST and SSH), N polls of ``check_pathways_service`` are bracketed by ``sdiag`` (slurmctld's
own "Remote Procedure Call statistics by message type" counters). Baseline, same run: a naive poller
that asks Slurm about every array task separately (``scontrol show job <array>_<i>`` / one REST GET per
task). Slurm calls and file operations per poll are also counted by wrapping the hook's transport
methods in this process (provider code is not modified). Everything is cancelled at the end.

Run from the repository root, as root: ``.venv/bin/python bench/bench_slurm_polling.py``
(``--versions 24.11`` for one version).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_home import bootstrap_airflow

REPO_ROOT = Path(__file__).resolve().parent.parent
STATE_DIR = Path(os.environ.get("SANDBOX_STATE_DIR") or REPO_ROOT / ".sandbox" / "slurm").resolve()
CONN_IDS = {"rest": "slurm_bench_rest", "ssh": "slurm_bench_ssh"}
SLICES = (4, 32)
MIN_SLICES = 2  # the node has 32 CPUs: a 32-task array cannot run whole next to its service job
TARGET_RATIO = 1.2  # RPCs per poll at 32 slices / at 4 slices
SDIAG_SELF = "REQUEST_STATS_INFO"  # sdiag's own RPC
IDLE_SECONDS = 2.0  # background window: RPCs of other users of the cluster

if TYPE_CHECKING:
    from airflow_provider_pathways.hooks.slurm import SlurmHook


# ---- sandbox and Airflow set-up -------------------------------------------------------------------


def start_sandbox(version: str) -> dict[str, str]:
    """Start that version's cluster (idempotent ``up.sh`` / ``versions.sh up``); its ``slurm.json``."""
    from sandbox.slurm.cluster import start_slurm_sandbox

    return start_slurm_sandbox(timeout=900, version=version)


CLI: list[str] = []  # the prefix that runs Slurm's commands against the cluster being measured


def use_cluster(settings: dict[str, str]) -> None:
    from sandbox.slurm.cluster import slurm_cli

    CLI[:] = slurm_cli(settings)


def set_connections(settings: dict[str, str]) -> None:
    """The REST and SSH Airflow connections, as ``AIRFLOW_CONN_*`` JSON (as the tests make them)."""
    from sandbox.slurm.cluster import airflow_connection

    for transport, conn_id in CONN_IDS.items():
        os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = airflow_connection(settings, transport)


def user_dir(settings: dict[str, str]) -> Path:
    """A fresh directory in the cluster user's home for cluster.env files and job logs."""
    path = Path(settings["SLURM_SANDBOX_USER_HOME"]) / "pathways" / f"bench-polling-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    user = pwd.getpwnam(settings["SLURM_SANDBOX_USER"])
    os.chown(path, user.pw_uid, user.pw_gid)
    return path


# ---- sdiag ----------------------------------------------------------------------------------------

_RPC_LINE = re.compile(r"^\s+(\S+)\s+\(\s*\d+\)\s+count:(\d+)", re.M)


def sdiag() -> dict[str, int]:
    """slurmctld's RPC counters by message type."""
    out = subprocess.run([*CLI, "sdiag"], capture_output=True, text=True, timeout=30, check=True).stdout
    section = out.split("Remote Procedure Call statistics by message type", 1)[1]
    section = section.split("Remote Procedure Call statistics by user", 1)[0]
    return {m[1]: int(m[2]) for m in _RPC_LINE.finditer(section)}


@dataclass
class Window:
    """RPCs slurmctld served between two ``sdiag`` calls (sdiag's own RPC excluded)."""

    by_type: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.by_type.values())

    @classmethod
    def between(cls, before: dict[str, int], after: dict[str, int]) -> Window:
        window = cls()
        for name, count in after.items():
            if name != SDIAG_SELF and count > before.get(name, 0):
                window.by_type[name] = count - before.get(name, 0)
        return window


# ---- counting at the transport boundary (this process only) --------------------------------------

CALLS: Counter[str] = Counter()


def _counted(key: Callable[..., str], method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        CALLS[key(*args, **kwargs)] += 1
        return await method(*args, **kwargs)

    return wrapper


def _command_name(_self: Any, command: str, **_kwargs: Any) -> str:
    words = [w for w in shlex.split(command) if "=" not in w and w != "env"]
    return f"ssh:{os.path.basename(words[0]) if words else '?'}"


def install_counters() -> None:
    """Wrap the transports' request / command / file methods to count them (benchmark process only)."""
    from airflow_provider_pathways.hooks import slurm_rest, slurm_ssh

    rest, ssh = slurm_rest.RestTransport, slurm_ssh.SshSession
    rest._request = _counted(lambda _s, method, *_a, **_k: f"http:{method}", rest._request)  # type: ignore[method-assign]
    ssh.run = _counted(_command_name, ssh.run)  # type: ignore[method-assign]
    for cls, prefix in ((slurm_rest.LocalFiles, "local"), (slurm_ssh.SftpFiles, "sftp")):
        for name in ("stat", "read"):
            setattr(cls, name, _counted(lambda *_a, _n=f"{prefix}:{name}", **_k: _n, getattr(cls, name)))


def split_calls(calls: Counter[str]) -> tuple[Counter[str], Counter[str]]:
    """(Slurm calls: HTTP requests / SSH commands, file operations)."""
    slurm = Counter({k: v for k, v in calls.items() if k.startswith(("http:", "ssh:"))})
    files = Counter({k: v for k, v in calls.items() if k.startswith(("local:", "sftp:"))})
    return slurm, files


# ---- the service jobs -----------------------------------------------------------------------------


@dataclass
class Service:
    """One Pathways service job of the benchmark."""

    slices: int
    job_id: int
    cluster_env: str
    array_id: int | None = None
    running: int = 0
    pending: int = 0
    paused: list[int] = field(default_factory=list)


def submit_service(hook: SlurmHook, settings: dict[str, str], workdir: Path, slices: int) -> Service:
    env_path = str(workdir / f"cluster-{slices}.env")
    job_id = hook.submit_job(
        script_path=settings["SLURM_SANDBOX_START_PATHWAYS_SCRIPT"],
        job_name=f"bench-polling-{slices}",
        environment={
            "SLICE_SHAPE": "2x4",
            "MIN_SLICES": str(MIN_SLICES),
            "MAX_SLICES": str(slices),
            "GCS_BUCKET": "pathways-bench-bucket",
            "PATHWAYS_CLUSTER_ENV": env_path,
            "PATHWAYS_LOG_DIR": str(workdir / f"logs-{slices}"),
        },
        output=str(workdir / "service-%j.out"),
        working_directory=str(workdir),
    )
    return Service(slices, job_id, env_path)


async def wait_ready(hook: SlurmHook, service: Service, timeout: float = 90.0) -> None:
    """Until ``check_pathways_service`` says ready, then until the array's RUNNING count is stable."""
    from airflow_provider_pathways.slurm.service import ServiceProbe, check_pathways_service, count_running

    deadline = time.monotonic() + timeout
    try:
        while True:
            result = await check_pathways_service(
                hook,
                service.job_id,
                ServiceProbe(cluster_env_path=service.cluster_env, min_slices=MIN_SLICES),
            )
            if result.service_ended:
                raise RuntimeError(f"service job {service.job_id} ended: {result.job}")
            if result.readiness.ready:
                service.array_id = result.readiness.worker_array_job_id
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"service job {service.job_id} not ready after {timeout:g}s")
            await asyncio.sleep(0.5)
        assert service.array_id is not None
        stable_since, last = time.monotonic(), -1
        while time.monotonic() - stable_since < 2.0 and time.monotonic() < deadline:
            tasks = await hook.a_get_array_tasks(service.array_id)
            running = count_running(tasks)
            if running != last:
                stable_since, last = time.monotonic(), running
            service.running, service.pending = running, len(tasks) - running
            await asyncio.sleep(0.25)
    finally:
        await hook.a_close()


def job_pids(job_id: int) -> list[int]:
    """Processes of the job on this (only) node, from ``scontrol listpids``."""
    out = subprocess.run(
        [*CLI, "scontrol", "listpids", str(job_id)], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    rows = [line.split() for line in out.splitlines()]
    return [int(row[0]) for row in rows if row and row[0].isdigit()]


@contextlib.contextmanager
def paused(services: list[Service]) -> Iterator[None]:
    """SIGSTOP the service scripts (they run ``squeue`` every second) while RPCs are counted."""
    try:
        for service in services:
            service.paused = job_pids(service.job_id)
            for pid in service.paused:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
        yield
    finally:
        for service in services:
            for pid in service.paused:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            service.paused = []


def cancel_all(hook: SlurmHook, services: list[Service]) -> None:
    """Cancel the service jobs and their arrays; wait (bounded) until Slurm reports them ended."""
    for service in services:
        for job_id in (service.job_id, service.array_id):
            if job_id:
                with contextlib.suppress(Exception):
                    hook.cancel_job(job_id)
    deadline = time.monotonic() + 30
    for service in services:
        while time.monotonic() < deadline:
            try:
                job = hook.get_job(service.job_id)
                tasks = hook.get_array_tasks(service.array_id) if service.array_id else []
            except Exception:
                break
            if (job is None or job.terminal) and all(t.terminal for t in tasks):
                break
            time.sleep(0.5)


# ---- pollers --------------------------------------------------------------------------------------


async def provider_poll(hook: SlurmHook, service: Service) -> int:
    """One readiness poll as the trigger and the sensor do it; the RUNNING slice count."""
    from airflow_provider_pathways.slurm.service import ServiceProbe, check_pathways_service

    check = await check_pathways_service(
        hook, service.job_id, ServiceProbe(cluster_env_path=service.cluster_env, min_slices=MIN_SLICES)
    )
    if not check.readiness.ready:
        raise RuntimeError(f"service {service.job_id} not ready: {check.readiness.reason}")
    return check.readiness.running_slices or 0


async def naive_poll(hook: SlurmHook, service: Service) -> int:
    """Baseline: the same checks, but one Slurm query per array task (``<array>_<i>``)."""
    from airflow_provider_pathways.slurm.job import jobs_from_scontrol
    from airflow_provider_pathways.slurm.rest import jobs_from_rest

    job = await hook.a_get_job(service.job_id)
    if job is None or job.terminal:
        raise RuntimeError(f"service {service.job_id} ended")
    if await hook.a_stat_file(service.cluster_env) is not None:
        await hook.a_read_file(service.cluster_env)
    transport: Any = await hook._a_transport()  # the hook's own connection, as a real poller would use
    running = 0
    for index in range(service.slices):
        task = f"{service.array_id}_{index}"
        if hook.settings.transport == "rest":
            version = await transport.api_version()
            _status, payload = await transport._request("GET", f"/slurm/{version}/job/{task}")
            records = jobs_from_rest(payload or {})
        else:
            command = shlex.join(["env", "SLURM_TIME_FORMAT=%s", "scontrol", "-o", "show", "job", task])
            _status, out, _err = await transport.session.run(command)
            records = jobs_from_scontrol(out)
        running += sum(1 for r in records if r.array_task_id == index and r.state == "RUNNING")
    return running


@dataclass
class Measure:
    """Per-poll costs of one poller on one service job over one transport."""

    transport: str
    poller: str
    slices: int
    polls: int
    rpcs: float
    by_type: dict[str, float]
    slurm_calls: dict[str, float]
    file_ops: dict[str, float]
    batches: list[int]
    running: int


async def measure(
    hook: SlurmHook,
    service: Service,
    poller: str,
    polls: int,
    batches: int,
) -> Measure:
    """``batches`` windows of ``polls`` polls each; the quietest window counts (others only add)."""
    poll = provider_poll if poller == "provider" else naive_poll
    windows: list[Window] = []
    calls: list[Counter[str]] = []
    running = 0
    for _ in range(batches):
        CALLS.clear()
        before = await asyncio.to_thread(sdiag)
        for _ in range(polls):
            running = await poll(hook, service)
        after = await asyncio.to_thread(sdiag)
        windows.append(Window.between(before, after))
        calls.append(Counter(CALLS))
    best = min(range(batches), key=lambda i: windows[i].total)
    win = windows[best]
    slurm, files = split_calls(calls[best])
    return Measure(
        transport=hook.settings.transport,
        poller=poller,
        slices=service.slices,
        polls=polls,
        rpcs=win.total / polls,
        by_type={k.removeprefix("REQUEST_"): v / polls for k, v in sorted(win.by_type.items())},
        slurm_calls={k: v / polls for k, v in slurm.items()},
        file_ops={k: v / polls for k, v in files.items()},
        batches=[w.total for w in windows],
        running=running,
    )


async def measure_transport(
    transport: str, services: list[Service], polls: int, naive_polls: int, batches: int
) -> list[Measure]:
    from airflow_provider_pathways.hooks.slurm import SlurmHook

    hook = SlurmHook(slurm_conn_id=CONN_IDS[transport])
    results: list[Measure] = []
    try:
        for service in services:  # warm-up: connection, API version detection (not counted)
            await provider_poll(hook, service)
            await naive_poll(hook, service)
        for service in services:
            results.append(await measure(hook, service, "provider", polls, batches))
        for service in services:
            results.append(await measure(hook, service, "naive", naive_polls, batches))
    finally:
        await hook.a_close()
    return results


# ---- report ---------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def fmt(counts: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in counts.items()) or "-"


def report(results: list[Measure]) -> None:
    print()
    print(
        f"{'transport':<9} {'poller':<8} {'slices':>6} {'RPCs/poll':>9}  {'windows':<9} "
        f"{'Slurm calls/poll':<17} {'file ops/poll':<27} RPCs by type, per poll"
    )
    for m in results:
        windows = f"{min(m.batches)}..{max(m.batches)}"
        print(
            f"{m.transport:<9} {m.poller:<8} {m.slices:>6} {m.rpcs:>9.2f}  {windows:<9} "
            f"{fmt(m.slurm_calls):<17} {fmt(m.file_ops):<27} {fmt(m.by_type)}"
        )
    print("  windows: lowest..highest RPC count of the counting windows; the lowest gives RPCs/poll")
    print()
    print(f"Ratio RPCs per poll at 32 slices / at 4 slices (target <= {TARGET_RATIO:g}, i.e. does not grow):")
    for transport in ("rest", "ssh"):
        for poller in ("provider", "naive"):
            rows = {m.slices: m for m in results if m.transport == transport and m.poller == poller}
            if set(rows) != set(SLICES):
                continue
            ratio = rows[32].rpcs / rows[4].rpcs if rows[4].rpcs else float("inf")
            tag = (
                f"target <= {TARGET_RATIO:g}   {verdict(ratio <= TARGET_RATIO)}"
                if poller == "provider"
                else "(baseline, same run: grows with the slices)"
            )
            print(
                f"  {transport:<4} {poller:<8}  {rows[4].rpcs:6.2f} -> {rows[32].rpcs:6.2f} RPCs/poll   "
                f"ratio {ratio:5.2f}   {tag}"
            )
    for transport in ("rest", "ssh"):
        prov = {m.slices: m for m in results if m.transport == transport and m.poller == "provider"}
        naive = {m.slices: m for m in results if m.transport == transport and m.poller == "naive"}
        if set(prov) == set(naive) == set(SLICES) and prov[4].rpcs and prov[32].rpcs:
            at4, at32 = naive[4].rpcs / prov[4].rpcs, naive[32].rpcs / prov[32].rpcs
            print(f"  {transport:<4} naive / provider: {at4:.1f}x the RPCs at 4 slices, {at32:.1f}x at 32")
    print()
    print("Notes:")
    print("  - every job query (scontrol, squeue, slurmrestd) is REQUEST_FED_INFO + REQUEST_JOB_INFO_SINGLE;")
    print("    a REST GET of '<array>_<i>' costs two of each for a task that has its own job record")
    print("    (slurmrestd first resolves the task's job id), one for a still-pending task.")
    print("  - cluster.env reads never reach slurmctld: REST reads this machine's filesystem (shared_fs),")
    print("    SSH uses SFTP on the login node.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=10, help="provider polls per counting window")
    parser.add_argument("--naive-polls", type=int, default=2, help="naive polls per counting window")
    parser.add_argument("--batches", type=int, default=6, help="counting windows per row (lowest counts)")
    parser.add_argument(
        "--versions", default="22.05,24.11,26.05", help="sandbox Slurm versions to measure, comma separated"
    )
    args = parser.parse_args()
    polls = min(max(args.polls, 1), 100)
    naive_polls = min(max(args.naive_polls, 1), 20)
    batches = min(max(args.batches, 1), 10)
    if os.geteuid() != 0:
        print("bench_slurm_polling: needs root (sdiag, scontrol listpids, sandbox/slurm/up.sh)")
        return 1

    started = time.monotonic()
    bootstrap_airflow()
    install_counters()
    print("bench_slurm_polling: Slurm RPCs per readiness poll (check_pathways_service) vs MAX_SLICES")
    for version in [v.strip() for v in args.versions.split(",") if v.strip()]:
        measure_version(version, polls, naive_polls, batches)
    print(f"\n(wall time of the benchmark: {time.monotonic() - started:.1f} s)")
    return 0


def measure_version(version: str, polls: int, naive_polls: int, batches: int) -> None:
    """The whole measurement on one sandbox Slurm version."""
    from airflow_provider_pathways.hooks.slurm import SlurmHook

    load = os.getloadavg()
    settings = start_sandbox(version)
    use_cluster(settings)
    set_connections(settings)
    release = settings.get("SLURM_SANDBOX_SLURM_RELEASE", version)
    print()
    print(
        f"== Slurm {release}: sandbox on 127.0.0.1 (REST {settings['SLURM_SANDBOX_REST_URL']}, "
        f"{settings['SLURM_SANDBOX_REST_API_VERSION']}; SSH port {settings['SLURM_SANDBOX_SSH_PORT']}); "
        f"load average at start {load[0]:.2f} on {os.cpu_count()} cores"
    )
    workdir = user_dir(settings)
    admin = SlurmHook(slurm_conn_id=CONN_IDS["rest"])
    services: list[Service] = []
    try:
        for slices in SLICES:
            services.append(submit_service(admin, settings, workdir, slices))
            asyncio.run(wait_ready(admin, services[-1]))
        foreign = subprocess.run(
            [*CLI, "squeue", "-h", "-o", "%i %j"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.split("\n")
        ours = {str(s.job_id) for s in services} | {str(s.array_id) for s in services}
        others = [line for line in foreign if line.strip() and line.split()[0].split("_")[0] not in ours]
        for s in services:
            print(
                f"service job {s.job_id}: MAX_SLICES={s.slices} MIN_SLICES={MIN_SLICES}, ready; worker array "
                f"{s.array_id}: {s.running} RUNNING, {s.pending} PENDING (32 CPUs are shared by all jobs)"
            )
        print(f"other jobs in the queue (not ours): {len(others)}")
        lines = [
            f"poll (provider): check_pathways_service(hook, job, ServiceProbe(cluster_env_path=..., "
            f"min_slices={MIN_SLICES})) = the service job",
            "  + cluster.env stat/read + the worker array in one query",
            "poll (naive baseline): the same, but one query per array task "
            "(scontrol show job <array>_<i> / GET job/<array>_<i>)",
            f"method: slurmctld's RPC counters by message type (sdiag; its own {SDIAG_SELF} excluded) "
            f"before and after {polls}",
            f"  provider polls / {naive_polls} naive polls; {batches} counting windows per row, the lowest "
            "counts (other users of the",
            "  cluster can only add RPCs). Slurm calls and file ops: the hook's transport methods wrapped "
            "in this process.",
            "  The service scripts (squeue every second) are paused (SIGSTOP) while counting.",
        ]
        print("\n".join(lines))
        with paused(services):
            before = sdiag()
            time.sleep(IDLE_SECONDS)
            idle = Window.between(before, sdiag())
            print(
                f"background (all jobs of this benchmark paused, nothing polling): {idle.total} RPCs in "
                f"{IDLE_SECONDS:g} s ({fmt(dict(idle.by_type)) if idle.total else 'quiet'})"
            )
            results: list[Measure] = []
            for transport in ("rest", "ssh"):
                results += asyncio.run(measure_transport(transport, services, polls, naive_polls, batches))
        report(results)
        for m in results:
            if m.running < min(MIN_SLICES, m.slices):
                print(f"  warning: {m.transport}/{m.poller}/{m.slices} saw only {m.running} RUNNING tasks")
    finally:
        cancel_all(admin, services)
        admin.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
