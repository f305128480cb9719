"""DAGs for Kueue queueing, JobSet-create failures and pod-less preemption on the Kubernetes stand-in.

Behaviour of the simulated cluster is set with ``sandbox.pathways.dev/*`` annotations (see
sandbox/kube/README.md); each DAG uses its own namespace and LocalQueue.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import DAG

from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator
from tests.dags.fast_retry import fast_retry

CONN = "gke_sandbox"
KNOB = "sandbox.pathways.dev/"
START = pendulum.datetime(2026, 1, 1, tz="UTC")
TEMPLATE = {
    "spec": {"containers": [{"name": "main", "image": "python:3.12", "command": ["python", "train.py"]}]}
}


def knobs(**values: Any) -> dict[str, str]:
    return {KNOB + key.replace("_", "-"): str(value) for key, value in values.items()}


def spec() -> PathwaysJobSpec:
    return PathwaysJobSpec.from_tpu_type(
        "v5litepod-16", num_slices=2, pathways_dir="gs://pathways-test-bucket/scratch", template=TEMPLATE
    )


def operator(task_id: str, namespace: str, **kwargs: Any) -> PathwaysJobOperator:
    kwargs = {**fast_retry(), **kwargs}
    kwargs.setdefault("retries", 2)
    return PathwaysJobOperator(
        task_id=task_id, job=kwargs.pop("job", spec()), namespace=namespace, kubernetes_conn_id=CONN, **kwargs
    )


for mode, deferrable in (("deferred", True), ("polling", False)):
    with DAG(f"gke_queued_then_admitted_{mode}", schedule=None, start_date=START) as queued_then_admitted:
        operator(
            "train",
            f"queued-{mode}",
            queue_name="multislice-queue",
            priority_class="high",
            deferrable=deferrable,
            poll_interval=0.1,
            annotations=knobs(kueue_admit_after_seconds=1.5),
        )
    globals()[f"queued_then_admitted_{mode}"] = queued_then_admitted

    with DAG(f"gke_queue_timeout_{mode}", schedule=None, start_date=START) as queue_timeout:
        operator(
            "train",
            f"queue-timeout-{mode}",
            queue_name="multislice-queue",
            queue_timeout=1.5,
            retries=0,
            deferrable=deferrable,
            poll_interval=0.1,
            annotations=knobs(kueue_admit_after_seconds="never"),
        )
    globals()[f"queue_timeout_{mode}"] = queue_timeout

    # Kueue 0.19's waitForPodsReady (the stand-in's timeout 1 s, backoff 1 s): admitted at once, the
    # workers never become ready, so Kueue evicts (PodsReadyTimeout) and requeues the job over and
    # over; no single stay in the queue reaches queue_timeout, the time since its first queueing does
    with DAG(f"gke_pods_ready_timeout_{mode}", schedule=None, start_date=START) as pods_ready_timeout:
        operator(
            "train",
            f"pods-ready-timeout-{mode}",
            queue_name="multislice-queue",
            queue_timeout=2.5,
            wait_timeout=60,
            retries=0,
            deferrable=deferrable,
            poll_interval=0.1,
            annotations=knobs(
                max_ready_slices=0,
                kueue_pods_ready_timeout_seconds=1,
                kueue_backoff_base_seconds=1,
                kueue_backoff_max_seconds=1,
            ),
        )
    globals()[f"pods_ready_timeout_{mode}"] = pods_ready_timeout

    # wait_timeout (not queue_timeout) ends the wait while Kueue still holds the job; delete_on
    # without "failure" would keep a job that had started
    with DAG(f"gke_wait_timeout_queued_{mode}", schedule=None, start_date=START) as wait_timeout_queued:
        operator(
            "train",
            f"wait-timeout-queued-{mode}",
            queue_name="multislice-queue",
            wait_timeout=2,
            delete_on=("success",),
            retries=0,
            deferrable=deferrable,
            poll_interval=0.1,
            annotations=knobs(kueue_admit_after_seconds="never"),
        )
    globals()[f"wait_timeout_queued_{mode}"] = wait_timeout_queued

with DAG("gke_evicted_after_running", schedule=None, start_date=START) as evicted_after_running:
    operator(
        "train",
        "evicted",
        queue_name="evicted-queue",
        deferrable=True,
        annotations=knobs(program_seconds=2, kueue_admit_after_seconds=0.5),
    )

with DAG("gke_lost_node_data_loss", schedule=None, start_date=START) as lost_node_data_loss:
    operator("train", "data-loss", retries=1, deferrable=True, annotations=knobs(program_seconds=2))

with DAG("gke_long_name_refused", schedule=None, start_date=START) as long_name_refused:
    operator("train", "long-name", name="start-pathways-29babb0b", validate_spec=False, deferrable=True)

with DAG("gke_create_refused", schedule=None, start_date=START) as create_refused:
    operator(
        "train", "create-refused", retries=1, deferrable=True, annotations=knobs(reject_jobset="quota policy")
    )
