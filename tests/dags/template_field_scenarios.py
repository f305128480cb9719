"""DAGs that give every template field of every operator and sensor as an ``XComArg``: the output
of an upstream task, known only when the task runs (tests/test_template_fields.py).

``settings`` pushes each value under its own key; each operator takes ``settings["<key>"]``.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import DAG, task

from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.operators.gcs import (
    CleanupCompilationCacheOperator,
    EnsureCompilationCacheLifecycleOperator,
)
from airflow_provider_pathways.operators.pathways_job import DeletePathwaysJobOperator, PathwaysJobOperator
from airflow_provider_pathways.operators.slurm import (
    CancelSlurmJobOperator,
    PathwaysSlurmServiceOperator,
    SlurmJobOperator,
)
from airflow_provider_pathways.operators.slurm_base import SlurmJobBaseOperator
from airflow_provider_pathways.operators.sweep import PathwaysJobSweepOperator, SlurmJobSweepOperator
from airflow_provider_pathways.sensors.pathways_job import PathwaysJobReadySensor
from airflow_provider_pathways.sensors.slurm import PathwaysClusterEnvSensor

START = pendulum.datetime(2026, 1, 1, tz="UTC")
GKE_NAMESPACE = "xcomarg-fields"
GKE_LABELS = {"team": "research", "cost-center": "tpu-42"}
GKE_ANNOTATIONS = {
    "example.com/owner": "ml-platform",
    "sandbox.pathways.dev/kueue-admit-after-seconds": "0.5",
    "sandbox.pathways.dev/program-seconds": "600",  # runs until DeletePathwaysJobOperator ends it
}
CACHE_BUCKET = "xcomarg-cache"
SLURM_ENV_MARKER = "from-an-xcomarg"


def gke_job() -> dict[str, Any]:
    """The job as a manifest mapping: what an upstream task can hand over through XCom."""
    return PathwaysJobSpec.from_tpu_type(
        "v5litepod-16",
        num_slices=2,
        pathways_dir="gs://pathways-test-bucket/scratch",
        template={"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}},
    ).to_pathwaysjob()


with DAG("xcomarg_gke", schedule=None, start_date=START) as xcomarg_gke:

    @task(multiple_outputs=True)
    def settings() -> dict[str, Any]:
        return {
            "job": gke_job(),
            "name": "xcomarg-job",
            "namespace": GKE_NAMESPACE,
            "labels": GKE_LABELS,
            "annotations": GKE_ANNOTATIONS,
            "conn": "gke_sandbox",
            "min_slices": 2,
            "gcp_project": "xcom-project",
            "gke_cluster": "xcom-cluster",
            "gke_location": "europe-west4",
            "queue_name": "multislice-queue",
            "priority_class": "high",
            "checkpoint_dir": "gs://pathways-test-bucket/xcomarg/checkpoints",
            "sweep_dag_ids": ["xcomarg_gke"],
        }

    values = settings()
    job = PathwaysJobOperator(
        task_id="job",
        job=values["job"],
        name=values["name"],
        namespace=values["namespace"],
        labels=values["labels"],
        annotations=values["annotations"],
        kubernetes_conn_id=values["conn"],
        min_slices=values["min_slices"],
        gcp_project=values["gcp_project"],
        gke_cluster=values["gke_cluster"],
        gke_location=values["gke_location"],
        queue_name=values["queue_name"],
        priority_class=values["priority_class"],
        checkpoint_dir=values["checkpoint_dir"],
        wait_until="ready",
        delete_on=("failure", "kill"),
        deferrable=True,
        poll_interval=0.2,
    )
    ready = PathwaysJobReadySensor(
        task_id="ready",
        job_name=values["name"],
        namespace=values["namespace"],
        min_slices=values["min_slices"],
        kubernetes_conn_id=values["conn"],
        poke_interval=0.2,
        timeout=60,
    )

    @task
    def submitted(namespace: str, name: str) -> dict[str, Any]:
        """The job as the cluster holds it (what ``kubectl get -o yaml`` shows a user)."""
        from sandbox.kube.launcher import connect_kube_standin

        standin = connect_kube_standin(os.environ["PATHWAYS_SANDBOX_KUBE_STATE"])
        body = standin.request(
            "GET", f"/apis/pathways-job.pathways.domain/v1/namespaces/{namespace}/pathwaysjobs/{name}"
        )
        return {
            "labels": body["metadata"].get("labels", {}),
            "annotations": body["metadata"].get("annotations", {}),
        }

    # a sweep of the namespace keeps the job its task handed on once ready
    sweep = PathwaysJobSweepOperator(
        task_id="sweep",
        namespaces=values["namespace"],
        kubernetes_conn_id=values["conn"],
        dag_ids=values["sweep_dag_ids"],
    )
    delete = DeletePathwaysJobOperator(
        task_id="delete",
        job_name=values["name"],
        namespace=values["namespace"],
        kubernetes_conn_id=values["conn"],
        deletion_timeout=30,
    )
    job >> ready >> submitted(values["namespace"], values["name"]) >> sweep >> delete


def cache_values() -> dict[str, Any]:
    return {
        "scratch_location": f"gs://{CACHE_BUCKET}/pathways-scratch/by-location",
        "bucket": CACHE_BUCKET,
        "pathways_dir_from_task": "trainer",
        "older_than": "7d",
        "max_cache_bytes": "1GiB",
        "cache_prefixes": ["compilation_cache"],
        "gcp_conn_id": "google_cloud_default",
        "impersonation_chain": None,
        "prefix": "pathways-scratch/shared/compilation_cache/",
    }


with DAG("xcomarg_cache", schedule=None, start_date=START) as xcomarg_cache:

    @task
    def trainer(**context: Any) -> None:
        context["ti"].xcom_push(key="pathways_dir", value=f"gs://{CACHE_BUCKET}/pathways-scratch/by-task")

    cache = task(multiple_outputs=True, task_id="cache_settings")(cache_values)()
    common = {
        "older_than": cache["older_than"],
        "max_cache_bytes": cache["max_cache_bytes"],
        "cache_prefixes": cache["cache_prefixes"],
        "gcp_conn_id": cache["gcp_conn_id"],
        "impersonation_chain": cache["impersonation_chain"],
    }
    CleanupCompilationCacheOperator(
        task_id="by_location", scratch_location=cache["scratch_location"], **common
    )
    CleanupCompilationCacheOperator(task_id="by_bucket", bucket=cache["bucket"], **common)
    trainer() >> CleanupCompilationCacheOperator(
        task_id="by_task", pathways_dir_from_task=cache["pathways_dir_from_task"], **common
    )


# gcp-storage-emulator keeps lifecycle rules; fake-gcs-server (the cleanup's emulator) does not.
with DAG("xcomarg_cache_lifecycle", schedule=None, start_date=START) as xcomarg_cache_lifecycle:
    cache = task(multiple_outputs=True, task_id="cache_settings")(cache_values)()
    EnsureCompilationCacheLifecycleOperator(
        task_id="lifecycle",
        bucket=cache["bucket"],
        prefix=cache["prefix"],
        age_days=30,
        gcp_conn_id=cache["gcp_conn_id"],
        impersonation_chain=cache["impersonation_chain"],
    )


with DAG(
    "xcomarg_slurm",
    schedule=None,
    start_date=START,
    params={"conn": "slurm_ssh", "scripts": "/nonexistent", "cluster_env": "~/x.env", "workdir": "/tmp"},
) as xcomarg_slurm:

    @task(multiple_outputs=True)
    def slurm_settings(**context: Any) -> dict[str, Any]:
        params = context["params"]
        return {
            "conn": params["conn"],
            "service_script_path": f"{params['scripts']}/start_pathways.sh",
            "no_script": None,
            "workload_script": '#!/bin/bash\necho "workload sees $XCOM_MARKER"\n',
            "environment": {"XCOM_MARKER": SLURM_ENV_MARKER},
            "service_environment": {"PATHWAYS_CLUSTER_ENV": params["cluster_env"]},
            "cluster_env": params["cluster_env"],
            "slice_shape": "2x4",
            "min_slices": 1,
            "max_slices": 2,
            "gcs_bucket": "my-bucket",
            "job_name": "xcomarg-workload",
            "partition": "batch",
            "account": None,
            "qos": None,
            "checkpoint_dir": "gs://my-bucket/xcomarg/checkpoints",
            "time_limit": "10",
            "working_directory": params["workdir"],
            "output_path": f"{params['workdir']}/xcomarg-%j.out",
            "sbatch_options": {"cpus-per-task": "1"},
            "worker_array_job_id": None,
            "sweep_dag_ids": ["xcomarg_slurm"],
        }

    s = slurm_settings()
    # The template fields every Slurm job operator has, but the script, its environment and the
    # connection, which differ between the two operators.
    own = {"script", "script_path", "environment", "slurm_conn_id"}
    job_fields = {name: s[name] for name in SlurmJobBaseOperator.template_fields if name not in own}
    service = PathwaysSlurmServiceOperator(
        task_id="service",
        slurm_conn_id=s["conn"],
        script=s["no_script"],
        script_path=s["service_script_path"],
        environment=s["service_environment"],
        cluster_env_path=s["cluster_env"],
        slice_shape=s["slice_shape"],
        min_slices=s["min_slices"],
        max_slices=s["max_slices"],
        gcs_bucket=s["gcs_bucket"],
        **job_fields,
        poll_interval=0.5,
        deferrable=True,
    )
    sensor = PathwaysClusterEnvSensor(
        task_id="sensor",
        service_job_id=service.output["job_id"],
        cluster_env_path=s["cluster_env"],
        min_slices=s["min_slices"],
        worker_array_job_id=s["worker_array_job_id"],
        slurm_conn_id=s["conn"],
        poke_interval=0.5,
        timeout=120,
    )
    workload = SlurmJobOperator(
        task_id="workload",
        slurm_conn_id=s["conn"],
        script=s["workload_script"],
        script_path=s["no_script"],
        environment=s["environment"],
        worker_array_job_id=service.output["worker_array_job_id"],
        slice_shape=s["slice_shape"],
        checkpoint_dir=s["checkpoint_dir"],
        **job_fields,
        poll_interval=0.5,
        deferrable=True,
    )
    # a sweep of this DAG's jobs keeps the service its task handed on once ready
    sweep = SlurmJobSweepOperator(task_id="sweep", slurm_conn_id=s["conn"], dag_ids=s["sweep_dag_ids"])
    stop = CancelSlurmJobOperator(
        task_id="stop",
        job_ids=service.output["job_id"],
        worker_array_job_id=s["worker_array_job_id"],
        cluster_env_path=s["cluster_env"],
        slurm_conn_id=s["conn"],
    )
    service >> sensor >> workload >> sweep >> stop.as_teardown(setups=service)
