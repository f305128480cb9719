"""DAGs of the CeleryExecutor deployment (the Kubernetes stand-in; each DAG in its own namespace,
its dag id with dashes). Programs are gated: they run until the test ends them."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_pathways.failures import PathwaysRetryPolicy
from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
FAST_RETRY = PathwaysRetryPolicy(base_delay=timedelta(seconds=1), max_delay=timedelta(seconds=2))
GATED = {"sandbox.pathways.dev/program-seconds": "3600"}
TEMPLATE = {
    "spec": {"containers": [{"name": "main", "image": "python:3.12", "command": ["python", "train.py"]}]}
}
#: Deferred waits at once, spread over both triggerers and resumed on both workers.
FANOUT = 40


def spec() -> PathwaysJobSpec:
    return PathwaysJobSpec.from_tpu_type(
        "v5litepod-16", num_slices=1, pathways_dir="gs://pathways-test-bucket/scratch", template=TEMPLATE
    )


def dag(dag_id: str, **kwargs: object) -> DAG:
    tags = ["deployment", "celery"]
    return DAG(dag_id, schedule=None, start_date=START, catchup=False, tags=tags, **kwargs)  # type: ignore[arg-type]


# A Celery worker dies (SIGKILL, pool and tasks with it) while a try polls its job: the retry runs
# on the other worker and follows the same job.
with dag("celery_worker_lost"):
    PathwaysJobOperator(
        task_id="train",
        job=spec(),
        namespace="celery-worker-lost",
        kubernetes_conn_id="gke_sandbox",
        deferrable=False,
        poll_interval=2,
        retries=2,
        retry_delay=timedelta(seconds=1),
        retry_policy=FAST_RETRY,
        annotations=GATED,
    )

# 40 deferred waits; a triggerer is killed while they wait.
with dag("celery_fanout", max_active_tasks=64):
    PathwaysJobOperator.partial(
        task_id="train",
        job=spec(),
        namespace="celery-fanout",
        kubernetes_conn_id="gke_sandbox",
        deferrable=True,
        retries=0,
        retry_policy=FAST_RETRY,
        annotations=GATED,
    ).expand(labels=[{"shard": str(i)} for i in range(FANOUT)])
