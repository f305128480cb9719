"""What metrics add to a trigger's wait: the per-status processing of ``PathwaysJobTrigger`` with
Airflow's StatsD metrics on (sent to a UDP listener on 127.0.0.1) vs off (the baseline, same run).

Per status the trigger summarizes the job's objects (``gke.status.summarize``, the hook's work once
the API answered), logs its progress line and records its milestones (``_measure``: sending the
metrics of those newly reached, off the event loop). Each simulated job goes pending, starting,
running with every slice ready, then succeeded: four statuses, three metrics sent. Rounds of
``--jobs`` jobs alternate on/off; reported: the median time per status of each, and their ratio
(target <= 1.05), and the microseconds metrics add per status. The API round trip and the JSON
decoding a real status also costs are left out of the baseline, so the ratio is an upper bound of
what metrics add to a real wait.

Run from the repository root: ``.venv/bin/python bench/bench_metrics.py [--jobs N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import statistics
import threading
import time
from typing import Any

from airflow_home import bootstrap_airflow

TARGET_RATIO = 1.05
PREFIX = "bench"


class Listener:
    """A StatsD server's socket on 127.0.0.1, counting datagrams."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sock.recv(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            self.received += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def set_metrics(on: bool, port: int) -> None:
    """Airflow's ``[metrics]`` through the environment, and its Stats built again from it."""
    os.environ["AIRFLOW__METRICS__STATSD_ON"] = str(on)
    os.environ["AIRFLOW__METRICS__STATSD_HOST"] = "127.0.0.1"
    os.environ["AIRFLOW__METRICS__STATSD_PORT"] = str(port)
    os.environ["AIRFLOW__METRICS__STATSD_PREFIX"] = PREFIX
    os.environ["AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED"] = "True"
    from airflow.sdk.configuration import conf
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    stats.initialize(
        factory=stats_utils.get_stats_factory(),
        export_legacy_names=conf.getboolean("metrics", "legacy_names_on"),
    )


def jobset(name: str, phase: str) -> dict[str, Any]:
    """The JobSet of a two-slice job at ``phase`` as the API server returns it."""
    ready = {"pending": (0, 0), "starting": (1, 0), "running": (2, 1), "succeeded": (0, 0)}[phase]
    status: dict[str, Any] = {
        "replicatedJobsStatus": [
            {"name": "worker", "ready": ready[0], "active": ready[0]},
            {"name": "pathways-head", "ready": ready[1], "active": ready[1]},
        ],
        "restarts": 0,
    }
    if phase == "succeeded":
        status["terminalState"] = "Completed"
        status["conditions"] = [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}]
    return {
        "metadata": {"name": name, "namespace": "bench", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "replicatedJobs": [{"name": "worker", "replicas": 2}, {"name": "pathways-head", "replicas": 1}]
        },
        "status": status,
    }


PHASES = ("pending", "starting", "running", "succeeded")


async def one_round(jobs: int) -> float:
    """Seconds per status over ``jobs`` jobs, each through its own trigger."""
    from airflow_provider_pathways.gke.status import summarize
    from airflow_provider_pathways.triggers.pathways_job import PathwaysJobTrigger

    objects = {phase: jobset("job", phase) for phase in PHASES}
    statuses = 0
    started = time.perf_counter()
    for index in range(jobs):
        trigger = PathwaysJobTrigger(
            name="job", namespace="bench", kind="JobSet", metric_tags={"tpu_type": "v6e-8"}, try_number=index
        )
        for phase in PHASES:
            status = summarize(
                name="job",
                namespace="bench",
                pathways_job=None,
                jobset=objects[phase],
                expect_pathways_job=False,
            )
            trigger.log.info("%s", status.progress(2))
            await trigger._measure(status)
            statuses += 1
    return (time.perf_counter() - started) / statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    bootstrap_airflow()
    logging.getLogger("airflow_provider_pathways").setLevel(logging.WARNING)
    listener = Listener()
    per_status: dict[bool, list[float]] = {False: [], True: []}
    try:
        for on in (False, True):  # warm-up: imports, the StatsD client's address, the thread pool
            set_metrics(on, listener.port)
            asyncio.run(one_round(20))
        for _ in range(args.rounds):
            for on in (False, True):
                set_metrics(on, listener.port)
                per_status[on].append(asyncio.run(one_round(args.jobs)))
        expected = 3 * (2 * 20 // 2 + args.rounds * args.jobs)  # metrics-on rounds, warm-up included
        deadline = time.monotonic() + 5
        while listener.received < expected and time.monotonic() < deadline:
            time.sleep(0.01)
        arrived = listener.received
    finally:
        listener.close()
    off, on = statistics.median(per_status[False]), statistics.median(per_status[True])
    ratio = on / off
    print(f"load average: {os.getloadavg()[0]:.2f} (2-core machine)")
    print(f"{args.rounds} rounds x {args.jobs} jobs x {len(PHASES)} statuses, 3 metrics per job")
    print(f"per status, metrics off (baseline): {off * 1e6:8.1f} us")
    print(f"per status, metrics on (StatsD):    {on * 1e6:8.1f} us")
    print(f"added per status: {(on - off) * 1e6:+.1f} us")
    verdict = "PASS" if ratio <= TARGET_RATIO else "MISS"
    print(f"ratio on/off: {ratio:.3f} (target <= {TARGET_RATIO}) {verdict}")
    print(f"check: {arrived} of {expected} datagrams sent with metrics on reached the listener")


if __name__ == "__main__":
    main()
