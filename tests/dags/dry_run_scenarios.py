"""DAGs of the dry-run tests: what the operators submit (or would), as the log and XCom show it.

The GKE DAGs use the Kubernetes stand-in's connection (``gke_sandbox``) or ``gke_nowhere``; the
Slurm DAGs use ``slurm_nowhere``: connections the tests point at addresses where nothing listens.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import DAG, task

from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator
from airflow_provider_pathways.operators.slurm import PathwaysSlurmServiceOperator, SlurmJobOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
GKE = "gke_sandbox"
GKE_NOWHERE = "gke_nowhere"
SLURM_NOWHERE = "slurm_nowhere"
#: A literal secret in the spec: an env entry whose name Airflow deems sensitive.
API_KEY = "literal-api-key-1234"
#: The Variable holding the registered secret (``AIRFLOW_VAR_DB_PASSWORD``; masked when read).
DB_URL = "postgresql://trainer:{{ var.value.db_password }}@db:5432/runs"
WORKLOAD = """#!/bin/bash
#SBATCH --open-mode=truncate
python train.py --steps 3
"""


def spec(topology: str = "4x4") -> PathwaysJobSpec:
    return PathwaysJobSpec.from_tpu_type(
        "v5litepod-16",
        num_slices=2,
        pathways_dir="gs://pathways-test-bucket/scratch",
        template={
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "python:3.12",
                        "command": ["python", "train.py"],
                        "env": [{"name": "WANDB_API_KEY", "value": API_KEY}, {"name": "STEPS", "value": "3"}],
                    }
                ]
            }
        },
    )


def bad_manifest() -> dict[str, Any]:
    manifest = spec().to_pathwaysjob()
    manifest["spec"]["workers"][0]["topology"] = "3x3"
    return manifest


with DAG("gke_dry_run", schedule=None, start_date=START) as gke_dry_run:

    @task
    def team_labels() -> dict[str, str]:
        """Labels as another task's output (an ``XComArg`` in a template field)."""
        return {"team": "research"}

    PathwaysJobOperator(
        task_id="train",
        job=spec(),
        namespace="{{ 'dry' }}-run",
        labels=team_labels(),
        kubernetes_conn_id=GKE,
        dry_run=True,
    )

with DAG("gke_dry_run_nowhere", schedule=None, start_date=START) as gke_dry_run_nowhere:
    # the namespace comes from the connection, whose cluster does not answer
    PathwaysJobOperator(
        task_id="train", job=spec(), kind="JobSet", kubernetes_conn_id=GKE_NOWHERE, dry_run=True
    )

with DAG("gke_submitted_manifest", schedule=None, start_date=START) as gke_submitted_manifest:
    PathwaysJobOperator(
        task_id="train",
        job=spec(),
        namespace="submitted-manifest",
        labels={"team": "research"},
        kubernetes_conn_id=GKE,
        wait_until="created",
    )

for dry in (False, True):
    with DAG(f"gke_bad_spec{'_dry_run' if dry else ''}", schedule=None, start_date=START) as bad:
        PathwaysJobOperator(
            task_id="train", job=bad_manifest(), namespace="bad-spec", kubernetes_conn_id=GKE, dry_run=dry
        )
    globals()[bad.dag_id] = bad

with DAG("slurm_dry_run", schedule=None, start_date=START) as slurm_dry_run:
    SlurmJobOperator(
        task_id="train",
        slurm_conn_id=SLURM_NOWHERE,
        script=WORKLOAD,
        job_name="{{ dag.dag_id }}-train",
        partition="debug",
        time_limit="1:00:00",
        environment={"API_TOKEN": "literal-token-5678", "DB_URL": DB_URL, "STEPS": "3"},
        sbatch_options={"cpus-per-task": "4"},
        dry_run=True,
    )

with DAG("slurm_service_dry_run", schedule=None, start_date=START) as slurm_service_dry_run:
    PathwaysSlurmServiceOperator(
        task_id="service",
        slurm_conn_id=SLURM_NOWHERE,
        script_path="~/pathways/start_pathways.sh",
        slice_shape="2x4",
        min_slices=1,
        max_slices="{{ 1 + 1 }}",
        gcs_bucket="pathways-test-bucket",
        cluster_env_variable="PATHWAYS_CLUSTER_ENV",
        dry_run=True,
    )

for dry in (False, True):
    with DAG(f"slurm_bad_request{'_dry_run' if dry else ''}", schedule=None, start_date=START) as bad:
        SlurmJobOperator(
            task_id="train",
            slurm_conn_id=SLURM_NOWHERE,
            script=WORKLOAD,
            time_limit="soon",
            dry_run=dry,
        )
    globals()[bad.dag_id] = bad
