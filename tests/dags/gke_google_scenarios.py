"""DAGs the GKE tests run with dag.test() against the Kubernetes stand-in reached with a Google
identity (connection ``gke_google``: the cluster through the GKE API, tokens from Google)."""

from __future__ import annotations

import pendulum
from airflow.providers.common.compat.sdk import DAG

from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator

CONN = "gke_google"
KNOB = "sandbox.pathways.dev/"
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def _train(mode: str) -> PathwaysJobOperator:
    return PathwaysJobOperator(
        task_id="train",
        job=PathwaysJobSpec.from_tpu_type(
            "v5litepod-16",
            num_slices=2,
            pathways_dir="gs://pathways-test-bucket/scratch",
            template={"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}},
        ),
        namespace=f"google-long-wait-{mode}",
        kubernetes_conn_id=CONN,
        deferrable=mode == "deferred",
        poll_interval=1,
        # The wait outlives several access tokens (the test's stand-in issues them for seconds).
        annotations={f"{KNOB}program-seconds": "10", f"{KNOB}program-log": "step 100: loss=0.5"},
    )


with DAG("gke_google_long_wait_deferred", schedule=None, start_date=START) as long_wait_deferred:
    _train("deferred")

with DAG("gke_google_long_wait_polling", schedule=None, start_date=START) as long_wait_polling:
    _train("polling")
