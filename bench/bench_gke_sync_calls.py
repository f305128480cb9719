"""The cost of a sync PathwaysJobHook call (the async core run on the hook's private event loop)
against the same reads with the synchronous ``kubernetes`` client.

Runs against the Kubernetes stand-in (``sandbox.kube``, started here on 127.0.0.1 in a temp dir),
on one running headless job:

(a) steady state, as an operator polling its job or a poke-mode sensor in one process: one hook,
    ``get_status`` again and again (two GETs: the PathwaysJob and its JobSet). Baseline: the same
    two GETs with cncf-kubernetes' sync client (``custom_object_client``), then the same summary.
(b) cold, as a reschedule-mode sensor's poke: a new hook per call (its loop thread and API client
    started, the connection read), against a new cncf-kubernetes hook and sync client per call.

Rounds alternate the variants so that other load on the machine hits both alike. The ratio per call
is printed as measured; the target is on what a user waits for: the time a call adds against the
time between two such calls. A task keeps its hook for the whole try, so (a) is what every poll pays
(``PathwaysJobOperator``'s default ``poll_interval``: 10 s); a new hook per call is what a
reschedule-mode sensor's poke pays (a sensor's default ``poke_interval``: 60 s).
Run from the repository root: ``.venv/bin/python bench/bench_gke_sync_calls.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_home import bootstrap_airflow

CONN_ID = "kube_bench"
NAMESPACE = "bench-sync"
POLL_INTERVAL = 10.0  # s, PathwaysJobOperator's default poll_interval
POKE_INTERVAL = 60.0  # s, BaseSensorOperator's default poke_interval
TARGET_SHARE = 0.001  # added time per call / time between two calls


def timed(call: Callable[[], Any], count: int) -> list[float]:
    """Seconds per call, ``count`` calls."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def compare(name: str, ours: list[float], baseline: list[float], interval: float) -> None:
    mine, base = statistics.median(ours), statistics.median(baseline)
    share = max(mine - base, 0.0) / interval
    verdict = "PASS" if share <= TARGET_SHARE else "MISS"
    print(f"{name}: hook {mine * 1000:.2f} ms, sync client {base * 1000:.2f} ms per call (medians)")
    print(f"  ratio per call {mine / base:.2f}; added time / {interval:g} s between calls {share:.4%} "
          f"(target <= {TARGET_SHARE:.1%})  {verdict}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=40, help="steady-state calls per round and variant")
    parser.add_argument("--cold-calls", type=int, default=4, help="cold calls per round and variant")
    args = parser.parse_args()
    started, load = time.monotonic(), os.getloadavg()
    bootstrap_airflow()
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    from airflow_provider_pathways.gke.objects import JOBSET, PATHWAYS_JOB
    from airflow_provider_pathways.gke.spec import PathwaysJobSpec
    from airflow_provider_pathways.gke.status import summarize
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
    from sandbox.kube.launcher import start_kube_standin

    with tempfile.TemporaryDirectory(prefix="bench-kube-") as state_dir:
        standin = start_kube_standin(Path(state_dir))
        try:
            os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = standin.airflow_connection()
            spec = PathwaysJobSpec.from_tpu_type(
                "v6e-4",
                num_slices=1,
                name=f"bench-{uuid.uuid4().hex[:8]}",
                namespace=NAMESPACE,
                pathways_dir="gs://pathways-bench-bucket/scratch",
                template=None,
            )
            name = spec.name or ""
            hook = PathwaysJobHook(kubernetes_conn_id=CONN_ID)
            hook.create_job(spec.to_pathwaysjob(), NAMESPACE)

            def sync_client_status(client: Any) -> Any:
                job = client.get_namespaced_custom_object(**PATHWAYS_JOB.object_coordinates(NAMESPACE, name))
                jobset = client.get_namespaced_custom_object(**JOBSET.object_coordinates(NAMESPACE, name))
                return summarize(name=name, namespace=NAMESPACE, pathways_job=job, jobset=jobset)

            client = KubernetesHook(conn_id=CONN_ID).custom_object_client
            print(f"job status: {hook.get_status(name, NAMESPACE).phase.value}; "
                  f"load average at start {load[0]:.2f}")  # fmt: skip
            steady: tuple[list[float], list[float]] = ([], [])
            cold: tuple[list[float], list[float]] = ([], [])
            for _ in range(max(1, args.rounds)):
                steady[0].extend(timed(lambda: hook.get_status(name, NAMESPACE), args.calls))
                steady[1].extend(timed(lambda: sync_client_status(client), args.calls))
                cold[0].extend(
                    timed(
                        lambda: PathwaysJobHook(kubernetes_conn_id=CONN_ID).get_status(name, NAMESPACE),
                        args.cold_calls,
                    )
                )
                cold[1].extend(
                    timed(
                        lambda: sync_client_status(KubernetesHook(conn_id=CONN_ID).custom_object_client),
                        args.cold_calls,
                    )
                )
            compare("(a) steady state, one hook (every poll)", *steady, POLL_INTERVAL)
            compare("(b) cold, a new hook per call (a rescheduled poke)", *cold, POKE_INTERVAL)
            hook.delete_job(name, NAMESPACE)
            hook.close()
        finally:
            standin.stop()
    print(f"\n(wall time of the benchmark: {time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
