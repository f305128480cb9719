"""Memory and idle CPU of many concurrent PathwaysJobTriggers in one asyncio loop (one triggerer).

Creates N (default 500) headless one-slice jobs (v6e-4: one worker pod + one head pod each) with
``max-ready-slices=0`` so they never become ready, then runs N ``PathwaysJobTrigger(wait_until=
"ready")`` concurrently in this process. Measures, for this (client) process only: RSS before and
after the triggers are established (every one has listed and holds its watch), CPU time while
they idle-wait, API requests made while idle, and the clean-up after cancelling them all. The
stand-in runs in its own process; its CPU is shown separately, for information.

Run from the repository root: ``.venv/bin/python bench/bench_gke_triggers.py [--triggers N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_home import bootstrap_airflow

REPO_ROOT = Path(__file__).resolve().parent.parent
CONN_ID = "kube_bench"
NAMESPACE = "bench-triggers"
KNOB = "sandbox.pathways.dev/"
TPU_TYPE = "v6e-4"  # 2x2, one VM per slice: one worker pod per job

if TYPE_CHECKING:
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
    from sandbox.kube.launcher import KubeStandin


def rss_mib() -> float:
    """Resident set size of this process (VmRSS), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def standin_cpu(pid: int) -> float:
    """User + system CPU seconds of the stand-in process (from /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


ssl_contexts: list[float] = []


def count_ssl_contexts() -> None:
    """Count ``ssl.create_default_context`` calls (kubernetes_asyncio makes one per ApiClient)."""
    original = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        ssl_contexts.append(time.monotonic())
        return original(*args, **kwargs)

    ssl.create_default_context = counting  # type: ignore[assignment]


def ssl_context_cost(samples: int = 100) -> tuple[float, float]:
    """(KiB RSS, ms CPU) of one ``ssl.create_default_context()``, measured in a fresh interpreter."""
    code = (
        "import gc, ssl, time\n"
        "rss = lambda: int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1])\n"
        "ssl.create_default_context(); gc.collect(); r0, c0 = rss(), time.process_time()\n"
        f"keep = [ssl.create_default_context() for _ in range({samples})]\n"
        "c1 = time.process_time(); gc.collect()\n"
        f"print((rss() - r0) / {samples}, (c1 - c0) / {samples} * 1000)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    kib, ms = out.stdout.split()
    return float(kib), float(ms)


LEAK_TYPES = ("ClientSession", "TCPConnector", "ApiClient", "SSLContext", "_JobWatch", "PathwaysJobHook")


def live_objects() -> dict[str, int]:
    """Live instances of the client-side types a trigger creates (after gc.collect)."""
    found = dict.fromkeys(LEAK_TYPES, 0)
    for obj in gc.get_objects():
        name = type(obj).__name__
        if name in found:
            found[name] += 1
    return found


def malloc_trim() -> bool:
    """Return freed heap pages to the OS (glibc), so RSS shows what is really still in use."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def create_jobs(standin: KubeStandin, hook: PathwaysJobHook, count: int) -> list[str]:
    """Create ``count`` never-ready headless jobs; wait until the controllers made their pods."""
    from airflow_provider_pathways.gke.spec import PathwaysJobSpec

    names = []
    for _ in range(count):
        spec = PathwaysJobSpec.from_tpu_type(
            TPU_TYPE,
            num_slices=1,
            name=f"idle-{uuid.uuid4().hex[:8]}",
            namespace=NAMESPACE,
            pathways_dir="gs://pathways-bench-bucket/scratch",
            template=None,
            annotations={KNOB + "max-ready-slices": "0"},
        )
        hook.create_job(spec.to_pathwaysjob(), NAMESPACE)
        names.append(spec.name)
    deadline = time.monotonic() + 90
    while True:
        objects = standin.control("state")["objects"]
        if objects.get("jobsets", 0) >= count and objects.get("pods", 0) >= 2 * count:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"the stand-in did not create every JobSet and pod: {objects}")
        time.sleep(0.2)
    time.sleep(1.0)  # let the last status writes settle
    return names


async def state(standin: KubeStandin) -> dict[str, Any]:
    return await asyncio.to_thread(standin.control, "state")


async def requests(standin: KubeStandin) -> dict[str, Any]:
    return await asyncio.to_thread(standin.control, "requests")


class Fleet:
    """N triggers as tasks; records the events they fire (none expected)."""

    def __init__(self, names: list[str]) -> None:
        from airflow_provider_pathways.triggers.pathways_job import PathwaysJobTrigger

        self.triggers = [
            PathwaysJobTrigger(
                name=name, namespace=NAMESPACE, kubernetes_conn_id=CONN_ID, wait_until="ready", min_slices=1
            )
            for name in names
        ]
        self.events: list[dict[str, Any]] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def _consume(self, trigger: Any) -> None:
        async for event in trigger.run():
            self.events.append(event.payload)

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self._consume(t)) for t in self.triggers]

    async def cancel(self) -> list[BaseException]:
        for task in self.tasks:
            task.cancel()
        results = await asyncio.gather(*self.tasks, return_exceptions=True)
        return [
            r for r in results if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)
        ]


async def wait_established(standin: KubeStandin, fleet: Fleet, count: int, timeout: float) -> float:
    """Seconds until the stand-in holds ``count`` open watches (every trigger listed and watches)."""
    started = time.monotonic()
    while True:
        snap = await state(standin)
        if snap["openWatches"] >= count:
            return time.monotonic() - started
        if fleet.events:
            raise RuntimeError(f"a trigger fired while establishing: {fleet.events[:3]!r}")
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"only {snap['openWatches']} of {count} watches open after {timeout}s")
        await asyncio.sleep(0.2)


async def warm_up(standin: KubeStandin, name: str) -> None:
    """One trigger established then cancelled: one-time imports and lazy setup are not per trigger."""
    fleet = Fleet([name])
    fleet.start()
    await wait_established(standin, fleet, 1, 30)
    await fleet.cancel()
    for _ in range(50):
        if (await state(standin))["openWatches"] == 0:
            return
        await asyncio.sleep(0.1)


async def run(standin: KubeStandin, names: list[str], idle_seconds: float, trace: bool) -> None:
    count = len(names)
    loop = asyncio.get_running_loop()
    loop_errors: list[str] = []
    loop.set_exception_handler(lambda _loop, ctx: loop_errors.append(str(ctx.get("message"))))

    ctx_kib, ctx_ms = await asyncio.to_thread(ssl_context_cost)
    await warm_up(standin, names[0])
    gc.collect()
    await asyncio.sleep(0.5)
    rss0, fds0, threads0 = rss_mib(), open_fds(), threading.active_count()
    baseline_objects = live_objects()
    tasks0 = len(asyncio.all_tasks())
    if trace:
        tracemalloc.start(10)
        snap0 = tracemalloc.take_snapshot()

    await asyncio.to_thread(standin.control, "requests/reset")
    fleet = Fleet(names)
    ssl_contexts.clear()
    cpu_start = time.process_time()
    fleet.start()
    establish = await wait_established(standin, fleet, count, 120)
    cpu_establish = time.process_time() - cpu_start
    setup_requests = await requests(standin)
    gc.collect()
    await asyncio.sleep(1.0)
    rss1, fds1, threads1 = rss_mib(), open_fds(), threading.active_count()
    if trace:
        snap1 = tracemalloc.take_snapshot()

    # idle wait
    await asyncio.to_thread(standin.control, "requests/reset")
    kube_cpu0 = standin_cpu(standin.pid)
    cpu0, wall0 = time.process_time(), time.monotonic()
    await asyncio.sleep(idle_seconds)
    cpu_idle, wall_idle = time.process_time() - cpu0, time.monotonic() - wall0
    kube_cpu = standin_cpu(standin.pid) - kube_cpu0
    idle_requests = await requests(standin)
    idle_state = await state(standin)

    # cancel
    cancel_start = time.monotonic()
    errors = await fleet.cancel()
    cancel_secs = time.monotonic() - cancel_start
    open_after = idle_state["openWatches"]
    for _ in range(100):
        open_after = (await state(standin))["openWatches"]
        if open_after == 0:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    gc.collect()
    await asyncio.sleep(0.2)
    rss2, fds2 = rss_mib(), open_fds()
    tasks2 = len(asyncio.all_tasks())
    fired = list(fleet.events)
    del fleet  # the triggerer drops cancelled triggers; what stays alive after that is leaked
    gc.collect()
    survivors = {k: v - baseline_objects[k] for k, v in live_objects().items()}
    rss3 = rss_mib() if malloc_trim() else None

    per_trigger_kib = (rss1 - rss0) * 1024 / count
    cpu_per_min = cpu_idle / count * 60 / wall_idle
    print()
    print(
        f"Established {count} triggers in {establish:.1f} s wall, {cpu_establish:.2f} s CPU of this process"
    )
    print(
        f"  ({cpu_establish / count * 1000:.2f} ms CPU per trigger); requests: {setup_requests['total']} "
        f"({', '.join(f'{k}={v}' for k, v in setup_requests['by_verb_resource'].items())})"
    )
    print()
    print("Memory of this process (VmRSS; after gc.collect):")
    print(f"  before triggers {rss0:8.1f} MiB   fds {fds0:5d}   threads {threads0}")
    print(f"  all established {rss1:8.1f} MiB   fds {fds1:5d}   threads {threads1}")
    print(f"  => {per_trigger_kib:.1f} KiB RSS per trigger, {(fds1 - fds0) / count:.2f} fds per trigger")
    print(
        f"  attribution: {len(ssl_contexts)} ssl.create_default_context() calls while establishing "
        f"({len(ssl_contexts) / count:.2f} per trigger: one kubernetes_asyncio ApiClient each);"
    )
    print(
        f"    one costs {ctx_kib:.0f} KiB RSS and {ctx_ms:.1f} ms CPU (measured in a fresh interpreter) "
        f"=> ~{ctx_kib * len(ssl_contexts) / count / max(per_trigger_kib, 1e-9) * 100:.0f}% of the RSS "
        "per trigger"
    )
    if trace:
        top = snap1.compare_to(snap0, "filename")
        traced = sum(stat.size_diff for stat in top)
        print(f"  tracemalloc: {traced / count / 1024:.1f} KiB of Python allocations per trigger; top files:")
        for stat in top[:6]:
            print(f"    {stat.size_diff / count / 1024:7.2f} KiB/trigger  {stat.traceback[0].filename}")
    print()
    print(f"Idle wait: {wall_idle:.1f} s with {count} triggers watching (watch timeout: 900 s default)")
    print(
        f"  CPU of this process: {cpu_idle:.3f} s => {cpu_per_min * 1000:.2f} ms CPU per trigger per minute "
        f"({cpu_idle / wall_idle * 100:.1f}% of one core for all {count})"
    )
    print(
        f"  API requests while idle: {idle_requests['total']} (expected 0: watches stay open)   "
        f"{verdict(idle_requests['total'] == 0)}"
    )
    print(
        f"  stand-in: {idle_state['openWatches']} open watches; its own CPU {kube_cpu:.2f} s "
        f"(separate process, NOT counted above; it sends a BOOKMARK per watch every 10 s, GKE ~1/min)"
    )
    print(f"  events fired while idle: {len(fired)} (expected 0)   {verdict(not fired)}")
    print()
    print(f"Cancel all: {cancel_secs * 1000:.0f} ms; errors {len(errors)}; open watches after: {open_after}")
    print(
        f"  RSS after cancel {rss2:.1f} MiB, fds {fds2} (before triggers {fds0}), "
        f"asyncio tasks {tasks2} (before {tasks0})"
    )
    if rss3 is not None:
        print(
            f"  RSS after dropping the triggers + malloc_trim(0): {rss3:.1f} MiB (before triggers {rss0:.1f})"
        )
    alive = ", ".join(f"{k}={v}" for k, v in survivors.items() if v) or "none"
    print(f"  client objects alive after dropping the triggers, beyond the baseline: {alive}")
    leaked = open_after != 0 or fds2 > fds0 + 2 or tasks2 > tasks0 or errors or any(survivors.values())
    print(f"  clean shutdown (no open watches, fds/tasks back to baseline): {verdict(not leaked)}")
    if loop_errors:
        print(f"  event-loop errors reported: {len(loop_errors)}, e.g. {loop_errors[0]!r}")
    else:
        print("  event-loop errors reported: 0 (no unclosed sessions/connectors)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=500)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--tracemalloc", action="store_true", help="also break Python allocations down")
    args = parser.parse_args()
    count = max(1, min(args.triggers, 2000))
    idle = min(max(args.idle_seconds, 1.0), 60.0)

    started, load = time.monotonic(), os.getloadavg()
    bootstrap_airflow()
    count_ssl_contexts()
    from sandbox.kube.launcher import start_kube_standin

    with tempfile.TemporaryDirectory(prefix="bench-kube-") as state_dir:
        standin = start_kube_standin(Path(state_dir))
        try:
            os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = standin.airflow_connection()
            from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

            hook = PathwaysJobHook(kubernetes_conn_id=CONN_ID)
            print(
                f"bench_gke_triggers: {count} concurrent PathwaysJobTrigger(wait_until='ready') in one loop"
            )
            print(f"stand-in {standin.url}; load average at start {load[0]:.2f} on {os.cpu_count()} cores")
            created = time.monotonic()
            names = create_jobs(standin, hook, count)
            print(
                f"jobs: {count} x PathwaysJob {TPU_TYPE} (2x2, 1 slice, headless: 1 head + 1 worker pod), "
                f"max-ready-slices=0; created in {time.monotonic() - created:.1f} s (not measured)"
            )
            asyncio.run(run(standin, names, idle, args.tracemalloc))
        finally:
            with contextlib.suppress(Exception):
                standin.stop()
    print(f"\n(wall time of the benchmark: {time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
