"""DAGs the GKE tests run with dag.test() against the Kubernetes stand-in reached with a Google
identity (connection ``gke_google``: the cluster through the GKE API, tokens from Google)."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.providers.common.compat.sdk import DAG

from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator
from airflow_provider_pathways.sensors.pathways_job import PathwaysJobReadySensor

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


# The credentials get no new access token in the middle of the wait (the test refuses every grant
# once the program runs): the try fails for good though retries are left, and the job is handled as
# the last try's give-up policy says (``failure`` in ``delete_on``: delete it; else keep it).
REFUSED_POLICIES = {"delete": ("success", "failure", "kill"), "keep": ("success", "kill")}


def refused_namespace(mode: str, policy: str) -> str:
    return f"google-refused-{mode}-{policy}"


def _refused(mode: str, policy: str) -> DAG:
    with DAG(f"gke_google_refused_{mode}_{policy}", schedule=None, start_date=START) as dag:
        PathwaysJobOperator(
            task_id="train",
            job=PathwaysJobSpec.from_tpu_type(
                "v5litepod-16",
                num_slices=1,
                pathways_dir="gs://pathways-test-bucket/scratch",
                template={"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}},
            ),
            namespace=refused_namespace(mode, policy),
            kubernetes_conn_id=CONN,
            deferrable=mode == "deferred",
            poll_interval=1,
            retries=2,
            delete_on=REFUSED_POLICIES[policy],
            annotations={f"{KNOB}program-seconds": "300"},
        )
    return dag


refused_deferred_delete = _refused("deferred", "delete")
refused_deferred_keep = _refused("deferred", "keep")
refused_polling_delete = _refused("polling", "delete")
refused_polling_keep = _refused("polling", "keep")


# A readiness sensor whose credentials get no new access token while it waits for a job that never
# gets ready: it fails for good though retries are left, as the operators do.
def refused_sensor_namespace(mode: str) -> str:
    return f"google-refused-sensor-{mode}"


def _refused_sensor(mode: str) -> DAG:
    with DAG(f"gke_google_refused_sensor_{mode}", schedule=None, start_date=START) as dag:
        PathwaysJobReadySensor(
            task_id="ready",
            job_name="never-ready",
            namespace=refused_sensor_namespace(mode),
            kubernetes_conn_id=CONN,
            deferrable=mode == "deferred",
            poke_interval=1,
            timeout=120,
            retries=2,
            retry_delay=timedelta(seconds=1),
        )
    return dag


refused_sensor_deferred = _refused_sensor("deferred")
refused_sensor_polling = _refused_sensor("polling")
