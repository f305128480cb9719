"""What metrics add to a trigger's wait: whole ``PathwaysJobTrigger`` waits against the Kubernetes
stand-in, with Airflow's StatsD metrics on (sent to a UDP listener on 127.0.0.1) vs off (the
baseline, measured in the same run).

Each round creates ``--jobs`` PathwaysJobs in the stand-in (``sandbox.kube``, started here), each a
program of ``--program-seconds``, and runs one trigger per job on one event loop until every
trigger fired: the watch, each status's API round trip and JSON decoding, the summary, the progress
log line and, with metrics on, the milestones sent (queue wait, time to ready, time to finish: three
per job). Each round runs both variants, in alternating order, so that other load on the machine
hits both alike. The cost that
matters is the triggerer's CPU, not the wall time (the jobs' own run dominates it): reported is the
median CPU time of this process per wait with metrics off and on, their ratio (target <= 1.05) and
the CPU time metrics add per wait.

Run from the repository root: ``.venv/bin/python bench/bench_metrics.py [--jobs N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from airflow_home import bootstrap_airflow

TARGET_RATIO = 1.05
PREFIX = "bench"
CONN_ID = "kube_bench"
NAMESPACE = "bench-metrics"
METRICS_PER_JOB = 3
#: The pod template of the job's Pathways head: its main container runs the program.
TEMPLATE = {
    "spec": {"containers": [{"name": "main", "image": "python:3.12", "command": ["python", "train.py"]}]}
}


def set_metrics(on: bool, port: int) -> None:
    """Airflow's ``[metrics]`` through the environment, and its Stats built again from it."""
    os.environ["AIRFLOW__METRICS__STATSD_ON"] = str(on)
    os.environ["AIRFLOW__METRICS__STATSD_HOST"] = "127.0.0.1"
    os.environ["AIRFLOW__METRICS__STATSD_PORT"] = str(port)
    os.environ["AIRFLOW__METRICS__STATSD_PREFIX"] = PREFIX
    os.environ["AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED"] = "True"
    from tests.support.statsd_server import reset_airflow_stats

    reset_airflow_stats()
    # A triggerer builds its StatsD client once, at its first metric: built here, outside the
    # measured waits, as in a triggerer that has run for a while (nothing is sent).
    from airflow_provider_pathways.metrics import _stats

    _stats().incr  # noqa: B018 (the attribute access builds the client)


def create_jobs(hook: Any, count: int, program_seconds: float) -> list[str]:
    """``count`` PathwaysJobs of one two-slice v6e-4 job each, running ``program_seconds``."""
    from airflow_provider_pathways.gke.spec import PathwaysJobSpec

    names = []
    for _ in range(count):
        spec = PathwaysJobSpec.from_tpu_type(
            "v6e-4",
            num_slices=2,
            name=f"bench-{uuid.uuid4().hex[:10]}",
            namespace=NAMESPACE,
            pathways_dir="gs://pathways-bench-bucket/scratch",
            template=TEMPLATE,
            annotations={"sandbox.pathways.dev/program-seconds": str(program_seconds)},
        )
        hook.create_job(spec.to_pathwaysjob(), NAMESPACE)
        names.append(spec.name or "")
    return names


async def wait_all(names: list[str]) -> list[dict[str, Any]]:
    """One trigger per job, all on this loop, each until it fired; their events."""
    from airflow_provider_pathways.triggers.pathways_job import PathwaysJobTrigger

    async def one(name: str) -> dict[str, Any]:
        trigger = PathwaysJobTrigger(
            name=name,
            namespace=NAMESPACE,
            kubernetes_conn_id=CONN_ID,
            metric_tags={"tpu_type": "v6e-4"},
            try_number=1,
        )
        async for event in trigger.run():
            return dict(event.payload)
        raise RuntimeError(f"the trigger of {name} fired nothing")

    return await asyncio.gather(*(one(name) for name in names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20, help="jobs (and triggers) per round")
    parser.add_argument("--rounds", type=int, default=14, help="rounds per variant")
    parser.add_argument("--program-seconds", type=float, default=2.0)
    args = parser.parse_args()
    bootstrap_airflow()
    logging.getLogger("airflow_provider_pathways").setLevel(logging.WARNING)
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
    from sandbox.kube.launcher import start_kube_standin
    from tests.support.statsd_server import StatsdListener

    listener = StatsdListener()
    per_wait: dict[bool, list[float]] = {False: [], True: []}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-kube-") as state_dir:
        standin = start_kube_standin(Path(state_dir))
        try:
            os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = standin.airflow_connection()
            hook = PathwaysJobHook(kubernetes_conn_id=CONN_ID)
            for round_number in range(args.rounds + 1):  # round 0 warms up both (imports, clients)
                # which variant goes first alternates: a round's second half meets the stand-in
                # still deleting the first half's jobs
                for on in (False, True) if round_number % 2 else (True, False):
                    set_metrics(on, listener.port)
                    names = create_jobs(hook, args.jobs, args.program_seconds)
                    cpu = time.process_time()
                    events = asyncio.run(wait_all(names))
                    cpu = time.process_time() - cpu
                    bad = [e for e in events if e.get("status") != "done"]
                    if bad:
                        raise RuntimeError(f"a wait did not end with the job's end: {bad[0]}")
                    if round_number:
                        per_wait[on].append(cpu / args.jobs)
                    for name in names:
                        hook.delete_job(name, NAMESPACE)
            hook.close()
        finally:
            standin.stop()
    expected = METRICS_PER_JOB * args.jobs * (args.rounds + 1)
    deadline = time.monotonic() + 5
    while len(listener.lines) < expected and time.monotonic() < deadline:
        time.sleep(0.01)
    arrived = len(listener.lines)
    listener.close()
    off, on = statistics.median(per_wait[False]), statistics.median(per_wait[True])
    ratio = on / off
    print(f"load average at start: {load:.2f} (2-core machine)")
    print(f"{args.rounds} rounds x {args.jobs} concurrent trigger waits per variant, "
          f"jobs of {args.program_seconds:g} s, {METRICS_PER_JOB} metrics per wait")  # fmt: skip
    print(f"CPU per wait, metrics off (baseline): {off * 1e3:8.2f} ms")
    print(f"CPU per wait, metrics on (StatsD):    {on * 1e3:8.2f} ms")
    print(f"added per wait: {(on - off) * 1e3:+.2f} ms")
    verdict = "PASS" if ratio <= TARGET_RATIO else "MISS"
    print(f"ratio on/off: {ratio:.3f} (target <= {TARGET_RATIO}) {verdict}")
    print(f"check: {arrived} of {expected} datagrams sent with metrics on reached the listener")


if __name__ == "__main__":
    main()
