"""Readiness latency on Slurm: cluster.env written -> PathwaysClusterEnvTrigger event, vs a 60 s poke sensor.

Runs against the real sandbox Slurm cluster (``sandbox/slurm/up.sh``, 127.0.0.1 only). Per repetition,
a Pathways service job (``start_pathways.sh``, MIN_SLICES = MAX_SLICES = 2) is submitted held; four
triggers start at once (REST and SSH, each with ``poll_interval`` = the trigger's default and 1 s),
plus a poke-mode ``PathwaysClusterEnvSensor.poke`` loop every 1 s (REST) for the scaled baseline. The
job is released after a random delay, so the write falls at a random phase of every poll loop.
Latency = wall-clock time of the event - mtime of cluster.env (same machine, same clock); a 2 ms local
``os.stat`` watcher in a thread gives the time the file appeared, as a cross-check.
Baseline: a poke sensor every 60 s, analytic (mean 30 s), and the 1 s poke loop scaled x60.

Run from the repository root, as root: ``.venv/bin/python bench/bench_slurm_readiness.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import math
import os
import pwd
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_home import bootstrap_airflow

REPO_ROOT = Path(__file__).resolve().parent.parent
STATE_DIR = Path(os.environ.get("SANDBOX_STATE_DIR") or REPO_ROOT / ".sandbox" / "slurm").resolve()
CONN_IDS = {"rest": "slurm_bench_rest", "ssh": "slurm_bench_ssh"}
SLICES = 2
FAST_INTERVAL = 1.0  # s, the second trigger poll interval, and the scaled poke loop's interval
SENSOR_INTERVAL = 60.0  # s, the poke-mode baseline
OVERHEAD_ALLOWANCE = 1.0  # s, one poll (and the event hand-off) on top of the phase wait
WAIT_TIMEOUT = 45.0  # s, per repetition, after the release

if TYPE_CHECKING:
    from airflow_provider_pathways.hooks.slurm import SlurmHook


# ---- sandbox and Airflow set-up -------------------------------------------------------------------


CLI: list[str] = []  # the prefix that runs Slurm's commands against the cluster being measured


def start_sandbox(version: str) -> dict[str, str]:
    """Start that version's cluster (idempotent ``up.sh`` / ``versions.sh up``); its ``slurm.json``."""
    from sandbox.slurm.cluster import slurm_cli, start_slurm_sandbox

    settings = start_slurm_sandbox(timeout=900, version=version)
    CLI[:] = slurm_cli(settings)
    return settings


def set_connections(settings: dict[str, str]) -> None:
    """The REST and SSH Airflow connections, as ``AIRFLOW_CONN_*`` JSON (as the tests make them)."""
    from sandbox.slurm.cluster import airflow_connection

    for transport, conn_id in CONN_IDS.items():
        os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = airflow_connection(settings, transport)


def user_dir(settings: dict[str, str]) -> Path:
    """A fresh directory in the cluster user's home for cluster.env files and job logs."""
    path = Path(settings["SLURM_SANDBOX_USER_HOME"]) / "pathways" / f"bench-readiness-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    user = pwd.getpwnam(settings["SLURM_SANDBOX_USER"])
    os.chown(path, user.pw_uid, user.pw_gid)
    return path


# ---- measurement helpers --------------------------------------------------------------------------

POLL_SECONDS: dict[str, list[float]] = defaultdict(list)


def install_poll_timer() -> None:
    """Time every ``check_pathways_service`` call (trigger and sensor) in this process, per connection."""
    from airflow_provider_pathways.sensors import slurm as sensor_module
    from airflow_provider_pathways.slurm.service import check_pathways_service
    from airflow_provider_pathways.triggers import slurm as trigger_module

    async def timed(hook: SlurmHook, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await check_pathways_service(hook, *args, **kwargs)
        finally:
            POLL_SECONDS[hook.slurm_conn_id].append(time.perf_counter() - started)

    trigger_module.check_pathways_service = timed  # type: ignore[assignment]
    sensor_module.check_pathways_service = timed  # type: ignore[assignment]


class FileWatcher(threading.Thread):
    """``os.stat`` the path every 2 ms: when it first appeared (wall clock) and its mtime."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.timeout = timeout
        self.seen: float | None = None
        self.mtime: float | None = None
        self.stop_event = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                time.sleep(0.002)
                continue
            self.seen, self.mtime = time.time(), st.st_mtime_ns / 1e9
            return


class _TaskInstance:
    """Just enough of a task instance for ``PathwaysClusterEnvSensor.poke`` to push its XCom."""

    def xcom_push(self, key: str, value: Any) -> None:
        return None


@dataclass
class Rep:
    """Event times (wall clock) of one repetition."""

    job_id: int
    mtime: float
    seen: float
    events: dict[str, float] = field(default_factory=dict)
    poke: float | None = None


async def first_event(trigger: Any) -> tuple[float, dict[str, Any]]:
    """Run the trigger until its (only) event; the wall-clock time it arrived and its payload."""
    events = trigger.run()
    try:
        event = await events.__anext__()
        return time.time(), event.payload
    finally:
        await events.aclose()


def poke_loop(sensor: Any, interval: float, phase: float, until: float) -> float | None:
    """Poke-mode sensor: first poke after ``phase`` s, then every ``interval`` s; time of success."""
    time.sleep(phase)
    next_poke = time.monotonic()
    context: Any = {"ti": _TaskInstance()}
    while time.monotonic() < until:
        if sensor.poke(context).is_done:
            return time.time()
        next_poke += interval
        time.sleep(max(0.0, next_poke - time.monotonic()))
    return None


def scontrol(*args: str) -> None:
    subprocess.run([*CLI, "scontrol", *args], capture_output=True, text=True, timeout=30, check=True)


def wait_ended(hook: SlurmHook, job_id: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = hook.get_job(job_id)
        if job is None or job.terminal:
            return
        time.sleep(0.25)


# ---- one repetition -------------------------------------------------------------------------------


async def run_rep(
    job_id: int, env_path: str, intervals: tuple[float, ...], release_after: float, rng: random.Random
) -> tuple[dict[str, float], float | None]:
    """Start the triggers and the poke loop, release the held job, wait for every event."""
    from airflow_provider_pathways.sensors.slurm import PathwaysClusterEnvSensor
    from airflow_provider_pathways.triggers.slurm import PathwaysClusterEnvTrigger

    deadline = time.time() + release_after + WAIT_TIMEOUT
    keys: list[str] = []
    tasks: list[Awaitable[tuple[float, dict[str, Any]]]] = []
    for transport in ("rest", "ssh"):
        for interval in intervals:
            keys.append(f"{transport} P={interval:g} s")
            trigger = PathwaysClusterEnvTrigger(
                service_job_id=job_id,
                slurm_conn_id=CONN_IDS[transport],
                cluster_env_path=env_path,
                min_slices=SLICES,
                poll_interval=interval,
                deadline=deadline,
            )
            tasks.append(first_event(trigger))
    sensor = PathwaysClusterEnvSensor(
        task_id=f"bench_poke_{job_id}",
        service_job_id=job_id,
        slurm_conn_id=CONN_IDS["rest"],
        cluster_env_path=env_path,
        min_slices=SLICES,
        poke_interval=FAST_INTERVAL,
    )
    until = time.monotonic() + release_after + WAIT_TIMEOUT
    poke = asyncio.to_thread(poke_loop, sensor, FAST_INTERVAL, rng.uniform(0, FAST_INTERVAL), until)

    async def release() -> None:
        await asyncio.sleep(release_after)
        await asyncio.to_thread(scontrol, "release", str(job_id))

    results = await asyncio.gather(*tasks, poke, release())
    events: dict[str, float] = {}
    for key, (stamp, payload) in zip(keys, results[: len(keys)], strict=True):
        if payload.get("status") != "ready":
            raise RuntimeError(f"trigger {key} for job {job_id} fired {payload!r}")
        events[key] = stamp
    return events, results[len(keys)]


def repetition(
    hook: SlurmHook,
    settings: dict[str, str],
    workdir: Path,
    index: int,
    intervals: tuple[float, ...],
    rng: random.Random,
) -> Rep:
    env_path = str(workdir / f"cluster-{index}.env")
    job_id = hook.submit_job(
        script_path=settings["SLURM_SANDBOX_START_PATHWAYS_SCRIPT"],
        job_name=f"bench-readiness-{index}",
        environment={
            "SLICE_SHAPE": "2x4",
            "MIN_SLICES": str(SLICES),
            "MAX_SLICES": str(SLICES),
            "GCS_BUCKET": "pathways-bench-bucket",
            "PATHWAYS_CLUSTER_ENV": env_path,
            "PATHWAYS_LOG_DIR": str(workdir / "logs"),
        },
        output=str(workdir / "service-%j.out"),
        working_directory=str(workdir),
        extra_options={"hold": ""},
    )
    watcher = FileWatcher(env_path, timeout=max(intervals) + WAIT_TIMEOUT + 10)
    watcher.start()
    try:
        release_after = 0.5 + rng.uniform(0, max(intervals))  # a random phase for every poll loop
        events, poke = asyncio.run(run_rep(job_id, env_path, intervals, release_after, rng))
    finally:
        watcher.stop_event.set()
        with contextlib.suppress(Exception):
            hook.cancel_job(job_id)
    watcher.join(5)
    wait_ended(hook, job_id)
    if watcher.mtime is None or watcher.seen is None:
        raise RuntimeError(f"job {job_id}: the watcher never saw {env_path}")
    return Rep(job_id, watcher.mtime, watcher.seen, events, poke)


# ---- report ---------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def report(reps: list[Rep], default_interval: float) -> None:
    print()
    print("Latency = event time - cluster.env mtime (seconds)")
    print(f"  {'trigger':<21} {'n':>2} {'median':>7} {'p90':>7} {'mean':>7} {'max':>7}   target")
    means: dict[str, float] = {}
    for key in reps[0].events:
        interval = float(key.split("P=")[1].split()[0])
        values = [r.events[key] - r.mtime for r in reps]
        mean = statistics.mean(values)
        means[key] = mean
        bound_mean = interval / 2 + OVERHEAD_ALLOWANCE
        bound_max = interval + OVERHEAD_ALLOWANCE
        ok = mean <= bound_mean and max(values) <= bound_max
        label = key + (" (default)" if interval == default_interval else "")
        median, p90 = statistics.median(values), pct(values, 0.9)
        print(
            f"  {label:<21} {len(values):>2} {median:7.2f} {p90:7.2f} {mean:7.2f} {max(values):7.2f}   "
            f"mean <= {bound_mean:g} s and max <= {bound_max:g} s   {verdict(ok)}"
        )
    print("  targets: a poller's expected mean is half its interval plus one poll, its max one interval")
    print(f"  plus one poll (allowance {OVERHEAD_ALLOWANCE:g} s for the poll and the hand-off)")
    lag = [r.seen - r.mtime for r in reps]
    print(
        f"  cross-check: the file appeared (2 ms watcher) {statistics.median(lag) * 1000:.0f} ms after its "
        f"mtime (median; max {max(lag) * 1000:.0f} ms)"
    )
    polls = ", ".join(
        f"{t} {statistics.median(POLL_SECONDS[c]) * 1000:.0f} ms (n={len(POLL_SECONDS[c])}"
        + (", triggers and pokes)" if t == "rest" else ")")
        for t, c in CONN_IDS.items()
        if POLL_SECONDS[c]
    )
    print(f"  one poll (check_pathways_service), median: {polls}")

    print()
    analytic_mean, analytic_p90 = SENSOR_INTERVAL / 2, 0.9 * SENSOR_INTERVAL
    print(
        f"Baseline: poke-mode sensor every {SENSOR_INTERVAL:.0f} s, ANALYTIC: mean {analytic_mean:.0f} s "
        f"(half the interval), median {analytic_mean:.0f} s, p90 {analytic_p90:.0f} s, plus one poll"
    )
    pokes = [r.poke - r.mtime for r in reps if r.poke is not None]
    if pokes:
        scale = SENSOR_INTERVAL / FAST_INTERVAL
        print(
            f"Baseline: PathwaysClusterEnvSensor.poke every {FAST_INTERVAL:g} s (REST, random phase), "
            f"MEASURED: median {statistics.median(pokes):.2f} s, mean {statistics.mean(pokes):.2f} s, "
            f"p90 {pct(pokes, 0.9):.2f} s (n={len(pokes)})"
        )
        print(
            f"  scaled x{scale:g} to a {SENSOR_INTERVAL:.0f} s interval (EXTRAPOLATED): "
            f"mean ~{statistics.mean(pokes) * scale:.0f} s, p90 ~{pct(pokes, 0.9) * scale:.0f} s"
        )
    print()
    print(f"Ratio baseline mean ({analytic_mean:.0f} s, analytic) / trigger mean latency:")
    for key, mean in means.items():
        interval = float(key.split("P=")[1].split()[0])
        target = analytic_mean / (interval / 2 + OVERHEAD_ALLOWANCE)
        ratio = analytic_mean / mean if mean > 0 else float("inf")
        print(
            f"  {key:<12} {ratio:6.1f}x   target >= {target:.1f}x (= {analytic_mean:.0f} s / "
            f"({interval:g}/2 + {OVERHEAD_ALLOWANCE:g}) s)   {verdict(ratio >= target)}"
        )
    if pokes:
        scaled = statistics.mean(pokes) * SENSOR_INTERVAL / FAST_INTERVAL
        slowest = max(means.values())
        print(
            f"  (against the EXTRAPOLATED poke mean ~{scaled:.0f} s instead: at least "
            f"{scaled / slowest:.1f}x for every trigger)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--version", default="22.05", help="sandbox Slurm version (22.05, 24.11, 26.05)")
    args = parser.parse_args()
    reps_wanted = min(max(args.reps, 1), 20)
    if os.geteuid() != 0:
        print("bench_slurm_readiness: needs root (scontrol release, sandbox/slurm/up.sh)")
        return 1

    started, load = time.monotonic(), os.getloadavg()
    bootstrap_airflow()
    settings = start_sandbox(args.version)
    set_connections(settings)
    install_poll_timer()
    from airflow_provider_pathways.hooks.slurm import SlurmHook
    from airflow_provider_pathways.triggers.slurm import PathwaysClusterEnvTrigger

    default_interval = float(inspect.signature(PathwaysClusterEnvTrigger).parameters["poll_interval"].default)
    intervals = tuple(dict.fromkeys((default_interval, FAST_INTERVAL)))
    print("bench_slurm_readiness: cluster.env written -> PathwaysClusterEnvTrigger event, vs 60 s poke")
    print(
        f"sandbox Slurm {settings.get('SLURM_SANDBOX_SLURM_RELEASE', args.version)} on 127.0.0.1 (REST "
        f"{settings['SLURM_SANDBOX_REST_URL']}, SSH port {settings['SLURM_SANDBOX_SSH_PORT']}); load "
        f"average at start {load[0]:.2f} on {os.cpu_count()} cores"
    )
    shown = " and ".join(f"{i:g} s" for i in intervals)
    lines = [
        f"{reps_wanted} service jobs (start_pathways.sh, MIN_SLICES = MAX_SLICES = {SLICES}), each "
        "submitted held; per job,",
        f"  {2 * len(intervals)} triggers at once: (REST, SSH) x poll_interval {shown} (the trigger's "
        f"default is {default_interval:g} s),",
        f"  min_slices={SLICES}; plus a poke loop of the sensor every {FAST_INTERVAL:g} s (REST). The job "
        "is released after",
        f"  0.5 + U(0, {max(intervals):g}) s, so the write falls at a random phase of every loop. "
        "Clock: this machine's (= the node's).",
    ]
    print("\n".join(lines))
    workdir = user_dir(settings)
    hook = SlurmHook(slurm_conn_id=CONN_IDS["rest"])
    rng = random.Random(args.seed)
    reps: list[Rep] = []
    try:
        for index in range(reps_wanted):
            reps.append(repetition(hook, settings, workdir, index, intervals, rng))
    finally:
        hook.close()
        shutil.rmtree(workdir, ignore_errors=True)
    report(reps, default_interval)
    print(f"\n(wall time of the benchmark: {time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
