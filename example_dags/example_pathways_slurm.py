"""Training on a Slurm cluster (Cluster Director): Pathways service job, readiness, workload, teardown.

1. ``start_pathways`` submits ``start_pathways.sh`` as the Pathways service job with
   ``SLICE_SHAPE``, ``MIN_SLICES``, ``MAX_SLICES`` and ``GCS_BUCKET``.
2. ``wait_for_pathways`` waits in the triggerer until the service wrote a fresh ``cluster.env``
   and at least ``MIN_SLICES`` slices run; it returns the proxy address.
3. ``train`` submits the workload, which reads ``cluster.env``, and follows it to its end with its
   output in the task log. A preempted workload is retried with backoff; a failing one is not.
4. ``stop_pathways`` cancels the service job and its worker array, whatever happened upstream.
5. ``cleanup_compilation_cache`` deletes cache entries unused for a week under
   ``gs://<bucket>/pathways-scratch/shared``.

The connection and the paths on the cluster are DAG params, so one DAG serves several clusters.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_pathways.operators.gcs import CleanupCompilationCacheOperator
from airflow_provider_pathways.operators.slurm import (
    CancelSlurmJobOperator,
    PathwaysSlurmServiceOperator,
    SlurmJobOperator,
)
from airflow_provider_pathways.sensors.slurm import PathwaysClusterEnvSensor

# [START howto_slurm_service_job_id]
SERVICE_JOB_ID = "{{ ti.xcom_pull(task_ids='start_pathways', key='job_id') }}"
# [END howto_slurm_service_job_id]

with DAG(
    dag_id="example_pathways_slurm",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "slurm_conn_id": Param(
            "pathways_slurm_default",
            type="string",
            title="Slurm connection",
            description="Id of a Pathways on Slurm connection (REST or SSH) to the cluster.",
        ),
        "scripts_dir": Param(
            "/opt/pathways",
            type="string",
            title="Scripts directory",
            description="Directory on the cluster that holds start_pathways.sh and the workload script.",
        ),
        "workload_script": Param(
            "run_maxtext.sh",
            type="string",
            title="Workload script",
            description="Batch script of the training workload, in the scripts directory; it reads "
            "cluster.env.",
        ),
        "gcs_bucket": Param(
            "my-pathways-bucket",
            type="string",
            title="GCS bucket",
            description="Bucket name (without gs://) of the Pathways scratch location "
            "gs://<bucket>/pathways-scratch/shared.",
        ),
    },
    render_template_as_native_obj=True,
    tags=["pathways", "slurm"],
    doc_md=__doc__,
) as dag:
    # [START howto_operator_pathways_slurm_service]
    service = PathwaysSlurmServiceOperator(
        task_id="start_pathways",
        slurm_conn_id="{{ params.slurm_conn_id }}",
        script_path="{{ params.scripts_dir }}/start_pathways.sh",
        slice_shape="2x4",
        min_slices=2,
        max_slices=3,
        gcs_bucket="{{ params.gcs_bucket }}",
        job_name="pathways-service",
        wait_for_ready=False,
    )
    # [END howto_operator_pathways_slurm_service]

    # [START howto_sensor_pathways_cluster_env]
    ready = PathwaysClusterEnvSensor(
        task_id="wait_for_pathways",
        slurm_conn_id="{{ params.slurm_conn_id }}",
        service_job_id=SERVICE_JOB_ID,
        min_slices=2,
        deferrable=True,
        poke_interval=3,
        timeout=1800,
    )
    # [END howto_sensor_pathways_cluster_env]

    # [START howto_operator_slurm_job]
    train = SlurmJobOperator(
        task_id="train",
        slurm_conn_id="{{ params.slurm_conn_id }}",
        script_path="{{ params.scripts_dir }}/{{ params.workload_script }}",
        job_name="pathways-train",
        environment={
            "PATHWAYS_PROXY_ADDRESS": "{{ ti.xcom_pull(task_ids='wait_for_pathways')['proxy_address'] }}",
        },
        # its slices: a failure while one of them was lost is a preemption, retried; with their
        # shape, the try's TPU-hours (chips per slice x the slices' time while it ran)
        worker_array_job_id="{{ ti.xcom_pull(task_ids='wait_for_pathways')['worker_array_job_id'] }}",
        slice_shape="2x4",
        deferrable=True,
        poll_interval=2,
        retries=2,
    )
    # [END howto_operator_slurm_job]

    # [START howto_operator_cancel_slurm_job]
    stop = CancelSlurmJobOperator(
        task_id="stop_pathways",
        slurm_conn_id="{{ params.slurm_conn_id }}",
        job_ids=SERVICE_JOB_ID,
    )
    # [END howto_operator_cancel_slurm_job]

    # [START howto_operator_cleanup_compilation_cache_bucket]
    # The scripts run Pathways with --enable_gcs_olm=false: nothing else deletes old cache entries.
    cleanup = CleanupCompilationCacheOperator(
        task_id="cleanup_compilation_cache",
        bucket="{{ params.gcs_bucket }}",
        older_than="7d",
    )
    # [END howto_operator_cleanup_compilation_cache_bucket]

    # [START howto_pathways_slurm_chain]
    service >> ready >> train >> stop.as_teardown(setups=service) >> cleanup.as_teardown(setups=service)
    # [END howto_pathways_slurm_chain]
