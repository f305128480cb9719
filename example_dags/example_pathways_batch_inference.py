"""Batch inference: a headless PathwaysJob, a readiness sensor, inference tasks, and a teardown.

The headless job (no controller template) runs the Pathways head and workers only. The sensor
waits in the triggerer until the head and at least ``min_slices`` slices are ready and returns
the proxy address, which inference tasks use as ``JAX_BACKEND_TARGET``. Teardowns delete the
job whatever happened upstream, then stale compilation-cache entries under its ``pathwaysDir``.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.operators.gcs import CleanupCompilationCacheOperator
from airflow_provider_pathways.operators.pathways_job import (
    DeletePathwaysJobOperator,
    PathwaysJobOperator,
)
from airflow_provider_pathways.sensors.pathways_job import PathwaysJobReadySensor

SCRATCH = os.environ.get("PATHWAYS_EXAMPLE_SCRATCH", "gs://my-pathways-bucket/pathways-scratch/infer")

with DAG(
    dag_id="example_pathways_batch_inference",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["pathways", "gke"],
    doc_md=__doc__,
) as dag:
    # [START howto_operator_pathways_job_headless]
    start = PathwaysJobOperator(
        task_id="start_pathways",
        job=PathwaysJobSpec.from_tpu_type("v5litepod-16", num_slices=4, pathways_dir=SCRATCH),
        wait_until="created",
        delete_on=("failure", "kill"),
    )
    # [END howto_operator_pathways_job_headless]

    # [START howto_sensor_pathways_job_ready]
    ready = PathwaysJobReadySensor(
        task_id="wait_for_slices",
        job_name="{{ ti.xcom_pull(task_ids='start_pathways', key='name') }}",
        namespace="{{ ti.xcom_pull(task_ids='start_pathways', key='namespace') }}",
        min_slices=3,
        deferrable=True,
        timeout=3600,
    )
    # [END howto_sensor_pathways_job_ready]

    # [START howto_pathways_proxy_client]
    @task
    def run_inference(proxy_address: str, shard: int) -> dict[str, object]:
        """Stand-in for a client task: a real one sets JAX_BACKEND_TARGET and runs the model."""
        env = {"JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": proxy_address}
        print(f"shard {shard}: would run inference with {env}")
        return {"shard": shard, "backend": proxy_address}

    results = run_inference.partial(proxy_address=ready.output).expand(shard=[0, 1])
    # [END howto_pathways_proxy_client]

    # [START howto_operator_delete_pathways_job]
    delete = DeletePathwaysJobOperator(
        task_id="delete_pathways",
        job_name="{{ ti.xcom_pull(task_ids='start_pathways', key='name') }}",
        namespace="{{ ti.xcom_pull(task_ids='start_pathways', key='namespace') }}",
    )
    # [END howto_operator_delete_pathways_job]

    cleanup = CleanupCompilationCacheOperator(
        task_id="cleanup_compilation_cache",
        pathways_dir_from_task="start_pathways",
        older_than="7d",
    )

    # [START howto_pathways_teardowns]
    start >> ready >> results >> delete.as_teardown(setups=start) >> cleanup.as_teardown(setups=start)
    # [END howto_pathways_teardowns]
