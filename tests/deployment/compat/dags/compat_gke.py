"""DAGs of the smoke deployment that every Airflow the provider supports runs (the Kubernetes
stand-in, each DAG in its own namespace, its dag id with dashes; a GCS emulator over HTTP).
Programs are gated: they run until the test ends them. Written for every version: no retry policy
(3.3 only), ``retries`` and ``retry_delay`` instead."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import DAG

from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.operators.gcs import CleanupCompilationCacheOperator
from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
GATED = {"sandbox.pathways.dev/program-seconds": "3600"}
#: The bucket of the GCS emulator the deployment's processes reach (``STORAGE_EMULATOR_HOST``).
BUCKET = "pathways-compat-bucket"
TEMPLATE = {
    "spec": {"containers": [{"name": "main", "image": "python:3.12", "command": ["python", "train.py"]}]}
}


def train(dag_id: str, **kwargs: Any) -> PathwaysJobOperator:
    job = PathwaysJobSpec.from_tpu_type(
        "v5litepod-16", num_slices=1, pathways_dir=f"gs://{BUCKET}/{dag_id}", template=TEMPLATE
    )
    return PathwaysJobOperator(
        task_id="train",
        job=job,
        namespace=dag_id.replace("_", "-"),
        kubernetes_conn_id="gke_sandbox",
        retry_delay=timedelta(seconds=1),
        poll_interval=2,
        annotations=GATED,
        **kwargs,
    )


def dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None, start_date=START, catchup=False, tags=["deployment", "compat"])


# Submit, defer, resume in a worker once the program ends.
with dag("compat_deferred"):
    train("compat_deferred", deferrable=True, retries=0, log_tail_lines=5)

# The worker dies while the try polls: the retry finds the job by its owner labels and follows it.
with dag("compat_worker_killed"):
    train("compat_worker_killed", deferrable=False, retries=2)

# A slice is preempted during the deferred wait: retried (retries), with a fresh job.
with dag("compat_preempted"):
    train("compat_preempted", deferrable=True, retries=2)

# A user marks the deferred task failed: its job is deleted (before 3.3 by the trigger's cleanup).
with dag("compat_killed_deferred"):
    train("compat_killed_deferred", deferrable=True, retries=2)

# The deferred try reaches its execution_timeout while its program runs: the job is deleted (failure
# in delete_on), whether the trigger's timeout event or (Airflow 2) the scheduler's trigger timeout,
# set to the same moment, resumes the try.
with dag("compat_deferred_execution_timeout"):
    train(
        "compat_deferred_execution_timeout",
        deferrable=True,
        retries=0,
        execution_timeout=timedelta(seconds=40),
    )

# After training, the stale compilation-cache entries under the job's pathways_dir go; the rest stays.
with dag("compat_cache_cleanup"):
    train("compat_cache_cleanup", deferrable=True, retries=0) >> CleanupCompilationCacheOperator(
        task_id="cleanup_cache", pathways_dir_from_task="train", older_than="1d"
    )
