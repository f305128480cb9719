"""The cost of a GKE sweep (``sweep_gke``, dry run) against listing the same jobs.

Runs against the Kubernetes stand-in (``sandbox.kube``, started here on 127.0.0.1 in a temp dir) and
a fresh SQLite metadata database: N PathwaysJobs (default 200) in one namespace, each naming a task
instance of a DAG this database has no run of (the sweep reads every state in one query, then
whether the DAG has runs in another, and keeps them all).

(a) the sweep: both kinds listed with the owner-label selector, each job's phase read from its
    objects, every task instance's state read in one query, each job judged.
(b) baseline: the two list calls alone, with cncf-kubernetes' sync client (what ``kubectl get
    pathwaysjobs,jobsets -l airflow.apache.org/task_id`` costs).

Rounds alternate the variants so that other load on the machine hits both alike. Target: a sweep
costs at most 3 times the listing (reading states and judging are not the expensive part), so a
maintenance DAG sweeping every few minutes weighs on the API server as a ``kubectl get`` does.
Run from the repository root: ``.venv/bin/python bench/bench_sweep.py``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from airflow_home import bootstrap_airflow

CONN_ID = "kube_bench"
NAMESPACE = "bench-sweep"
DAG_ID = "bench_sweep"
RUN_ID = "manual__2026-12-06T00:00:00+00:00"
TARGET_RATIO = 3.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    started, load = time.monotonic(), os.getloadavg()
    home = bootstrap_airflow()
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{home}/airflow.db"
    from airflow.utils.db import initdb

    initdb()
    from airflow_provider_pathways.gke.objects import JOBSET, PATHWAYS_JOB
    from airflow_provider_pathways.gke.spec import PathwaysJobSpec
    from airflow_provider_pathways.gke.task_job import TASK_LABEL, TaskIdentity, place_spec
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
    from airflow_provider_pathways.operators.sweep import sweep_gke
    from sandbox.kube.launcher import start_kube_standin

    with tempfile.TemporaryDirectory(prefix="bench-kube-") as state_dir:
        standin = start_kube_standin(Path(state_dir))
        try:
            os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = standin.airflow_connection()
            hook = PathwaysJobHook(kubernetes_conn_id=CONN_ID)
            spec = PathwaysJobSpec.from_tpu_type("v5litepod-16", num_slices=1, pathways_dir="gs://b/s")
            for index in range(args.jobs):
                task = TaskIdentity(DAG_ID, f"train_{index}", RUN_ID, -1)
                placed = place_spec(
                    spec,
                    task,
                    name=None,
                    namespace=NAMESPACE,
                    labels={},
                    annotations={"sandbox.pathways.dev/program-seconds": "3600"},
                    left_running=(),
                )
                hook.create_job(placed.to_pathwaysjob(), NAMESPACE)
            client = hook.custom_object_client
            log = logging.getLogger("bench")

            def listing() -> None:
                for resource in (PATHWAYS_JOB, JOBSET):
                    client.list_namespaced_custom_object(
                        **resource.coordinates(NAMESPACE), label_selector=TASK_LABEL
                    )

            def sweep() -> None:
                rows = sweep_gke(hook, [NAMESPACE], dry_run=True, log=log)
                assert len(rows) == args.jobs, len(rows)

            ours, base = [], []
            for _ in range(args.rounds):
                for variant, times in ((sweep, ours), (listing, base)):
                    t0 = time.perf_counter()
                    variant()
                    times.append(time.perf_counter() - t0)
            hook.close()
        finally:
            standin.stop()
    mine, baseline = statistics.median(ours), statistics.median(base)
    ratio = mine / baseline
    print(f"load average {load[0]:.1f}; {args.jobs} jobs, {args.rounds} rounds")
    print(f"sweep (dry run) {mine * 1000:.0f} ms, listing {baseline * 1000:.0f} ms (medians)")
    print(f"  ratio {ratio:.2f} (target <= {TARGET_RATIO:g})  {'PASS' if ratio <= TARGET_RATIO else 'MISS'}")
    print(f"took {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
