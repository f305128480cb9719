"""Scheduled training on TPUs: one PathwaysJob whose controller template runs the JAX program.

The task creates the PathwaysJob, waits for it in the triggerer (deferrable), copies the end of the
program's log into the task log, and deletes the job when it finishes, fails or is killed. A
preempted run is retried (with backoff, by the operator's default ``PathwaysRetryPolicy``, on
Airflow 3.3+); a failing program is not. A teardown then deletes stale compilation-cache entries
under the job's ``pathwaysDir``.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.operators.gcs import CleanupCompilationCacheOperator
from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator

SCRATCH = os.environ.get("PATHWAYS_EXAMPLE_SCRATCH", "gs://my-pathways-bucket/pathways-scratch/train")

# [START howto_pathways_trainer_template]
TRAINER = {
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "python:3.12",
                "command": ["bash", "-c"],
                "args": [
                    "pip install -q pathwaysutils jax && "
                    "python -c 'import pathwaysutils, jax; pathwaysutils.initialize(); "
                    'print("Number of JAX devices is", len(jax.devices()))\''
                ],
            }
        ]
    }
}
# [END howto_pathways_trainer_template]

with DAG(
    dag_id="example_pathways_training",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 3, "retry_delay": timedelta(minutes=2)},
    tags=["pathways", "gke"],
    doc_md=__doc__,
) as dag:
    # [START howto_operator_pathways_job]
    train = PathwaysJobOperator(
        task_id="train",
        job=PathwaysJobSpec.from_tpu_type(
            "v6e-16",
            num_slices=2,
            pathways_dir=SCRATCH,
            template=TRAINER,
            max_restarts=1,
        ),
        wait_until="finished",
        deferrable=True,
    )
    # [END howto_operator_pathways_job]

    # [START howto_operator_cleanup_compilation_cache_teardown]
    # Pathways runs with --enable_gcs_olm=false: drop cache entries unused for a week.
    cleanup = CleanupCompilationCacheOperator(
        task_id="cleanup_compilation_cache",
        pathways_dir_from_task="train",
        older_than="7d",
    )
    train >> cleanup.as_teardown(setups=train)
    # [END howto_operator_cleanup_compilation_cache_teardown]
