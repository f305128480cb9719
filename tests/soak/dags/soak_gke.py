"""The soak's GKE DAGs (``tests/soak``): one DAG per shape that Airflow fixes at parse time, the rest
of a run's shape in its conf.

The DAG processor parses this one file (a fixed set of DAGs, not one per run). What a DAG fixes:
deferrable or polling, ``retries`` (unset: the operator's preemption budget; or 2), ``wait_until``,
mapped (2 indexes) or not, and a variant: plain, failed jobs kept (``delete_on`` without
``failure``), an ``execution_timeout``, or a Kueue queue with a ``queue_timeout``. What a run's conf
sets (``params``): how long the program runs (``program_seconds``), how it exits (``exit_code``), and
when Kueue admits it (``admit_after``). Every DAG reaches the stand-in through the gate the soak
closes for its outages (``gke_gated``) and works in its own namespace (its dag id with dashes).

``soak_gke_sweep`` sweeps those namespaces every ``SWEEP_SECONDS``, as a deployment's maintenance DAG
would (docs/operators/sweep_pathways_jobs.rst): through the same gate, under the same faults.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_provider_pathways.failures import PathwaysRetryPolicy
from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator
from airflow_provider_pathways.operators.sweep import PathwaysJobSweepOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
FAST_RETRY = PathwaysRetryPolicy(base_delay=timedelta(seconds=1), max_delay=timedelta(seconds=2))
KNOB = "sandbox.pathways.dev/"
TEMPLATE = {
    "spec": {"containers": [{"name": "main", "image": "python:3.12", "command": ["python", "train.py"]}]}
}
PARAMS = {"program_seconds": 20, "exit_code": 0, "admit_after": "0"}
ANNOTATIONS = {
    KNOB + "program-seconds": "{{ params.program_seconds }}",
    KNOB + "program-exit-code": "{{ params.exit_code }}",
    KNOB + "kueue-admit-after-seconds": "{{ params.admit_after }}",
    # Kueue's requeuing backoff after a PodsReadyTimeout eviction (requeuingStrategy
    # backoffBaseSeconds: 60 by default), short enough for a soak run
    KNOB + "kueue-backoff-base-seconds": "2",
}
MODES = {"deferrable": True, "polling": False}
RETRIES = {"budget": None, "retries2": 2}
WAITS = ("created", "ready", "finished")
VARIANTS = ("plain", "keep", "timeout", "kueue")
#: the ``execution_timeout`` of the ``timeout`` variant
EXECUTION_TIMEOUT = timedelta(seconds=75)
#: the ``queue_timeout`` of the ``kueue`` variant
QUEUE_TIMEOUT = 45.0
QUEUE = "soak-queue"
MAPPED = 2


def dag_id(mode: str, retries: str, wait: str, variant: str, mapped: bool) -> str:
    return f"soak_gke_{mode}_{retries}_{wait}_{variant}" + ("_mapped" if mapped else "")


def namespace(dag: str) -> str:
    return dag.replace("_", "-")


def spec() -> PathwaysJobSpec:
    return PathwaysJobSpec.from_tpu_type(
        "v5litepod-16",
        num_slices=1,
        pathways_dir="gs://pathways-test-bucket/scratch",
        template=TEMPLATE,
        max_restarts=0,
    )


def arguments(dag: str, deferrable: bool, retries: int | None, wait: str, variant: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "job": spec(),
        "namespace": namespace(dag),
        "kubernetes_conn_id": "gke_gated",
        "deferrable": deferrable,
        "poll_interval": 2,
        "wait_until": wait,
        "annotations": ANNOTATIONS,
        "retry_policy": FAST_RETRY,
        "retry_delay": timedelta(seconds=1),
        "log_tail_lines": 5,
    }
    if retries is not None:
        kwargs["retries"] = retries
    if variant == "keep":
        kwargs["delete_on"] = ("success", "kill")
    elif variant == "timeout":
        kwargs["execution_timeout"] = EXECUTION_TIMEOUT
    elif variant == "kueue":
        kwargs["queue_name"] = QUEUE
        kwargs["queue_timeout"] = QUEUE_TIMEOUT
    return kwargs


def shapes() -> list[tuple[str, str, str, str, bool]]:
    """Every (mode, retries, wait, variant, mapped) this file makes a DAG of (mapped: ``finished`` only)."""
    found = []
    for mode in MODES:
        for retries in RETRIES:
            for variant in VARIANTS:
                for wait in WAITS:
                    found.append((mode, retries, wait, variant, False))
                found.append((mode, retries, "finished", variant, True))
    return found


for _mode, _retries, _wait, _variant, _mapped in shapes():
    _id = dag_id(_mode, _retries, _wait, _variant, _mapped)
    with DAG(_id, schedule=None, start_date=START, catchup=False, params=PARAMS, tags=["soak", "gke"]):
        _kwargs = arguments(_id, MODES[_mode], RETRIES[_retries], _wait, _variant)
        if _mapped:
            PathwaysJobOperator.partial(task_id="train", **_kwargs).expand(
                labels=[{"shard": str(i)} for i in range(MAPPED)]
            )
        else:
            PathwaysJobOperator(task_id="train", **_kwargs)


#: How often the sweep runs (the soak waits at most ``SETTLE`` for an ended task's job to go).
SWEEP_SECONDS = 20
with DAG(
    "soak_gke_sweep",
    schedule=timedelta(seconds=SWEEP_SECONDS),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    tags=["soak", "gke", "maintenance"],
):
    PathwaysJobSweepOperator(
        task_id="sweep",
        namespaces=sorted({namespace(dag_id(*shape)) for shape in shapes()}),
        kubernetes_conn_id="gke_gated",
        retries=0,
    )
