"""DAGs the deployment tests run on GKE (the Kubernetes stand-in), one per scenario.

Each DAG works in its own namespace (its dag id with dashes). Jobs whose program is "gated" run
until the test ends the program (``complete-program`` / ``fail-program`` actions), so that a test can
act while the task waits. ``gke_sandbox`` reaches the stand-in directly; ``gke_gated`` goes through a
gate the tests can close to cut the API server off.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_provider_pathways.failures import PathwaysRetryPolicy
from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
FAST_RETRY = PathwaysRetryPolicy(base_delay=timedelta(seconds=1), max_delay=timedelta(seconds=2))
KNOB = "sandbox.pathways.dev/"
TEMPLATE = {
    "spec": {"containers": [{"name": "main", "image": "python:3.12", "command": ["python", "train.py"]}]}
}
FANOUT = 40


def knobs(**values: Any) -> dict[str, str]:
    """Annotations that steer the simulated cluster."""
    return {KNOB + key.replace("_", "-"): str(value) for key, value in values.items()}


GATED = knobs(program_seconds=3600)


def namespace(dag_id: str) -> str:
    return dag_id.replace("_", "-")


def spec() -> PathwaysJobSpec:
    return PathwaysJobSpec.from_tpu_type(
        "v5litepod-16",
        num_slices=1,
        pathways_dir="gs://pathways-test-bucket/scratch",
        template=TEMPLATE,
        max_restarts=0,
    )


def dag(dag_id: str, **kwargs: Any) -> DAG:
    return DAG(dag_id, schedule=None, start_date=START, catchup=False, tags=["deployment", "gke"], **kwargs)


def train(dag_id: str, *, conn: str = "gke_sandbox", **kwargs: Any) -> PathwaysJobOperator:
    kwargs.setdefault("retry_policy", FAST_RETRY)
    kwargs.setdefault("retry_delay", timedelta(seconds=1))
    kwargs.setdefault("poll_interval", 2)
    return PathwaysJobOperator(
        task_id="train", job=spec(), namespace=namespace(dag_id), kubernetes_conn_id=conn, **kwargs
    )


# 1. Happy path, deferrable and polling; 40 deferred tasks at once.
for mode, deferrable in (("deferrable", True), ("polling", False)):
    with dag(f"gke_happy_{mode}"):
        train(
            f"gke_happy_{mode}",
            deferrable=deferrable,
            retries=0,
            annotations=GATED,
            log_tail_lines=10,
        )

with dag("gke_fanout", max_active_tasks=64):
    PathwaysJobOperator.partial(
        task_id="train",
        job=spec(),
        namespace=namespace("gke_fanout"),
        kubernetes_conn_id="gke_sandbox",
        deferrable=True,
        retries=0,
        annotations=GATED,
        retry_policy=FAST_RETRY,
    ).expand(labels=[{"shard": str(i)} for i in range(FANOUT)])

# A cluster reached with a Google identity (Cloud Composer's way): the wait outlives several access
# tokens of 3 seconds, in the triggerer (the program is gated: the test ends it).
with dag("gke_google"):
    train(
        "gke_google",
        conn="gke_google",
        deferrable=True,
        retries=0,
        poll_interval=1,
        annotations=knobs(program_seconds=3600, program_log="step 100: loss=0.5"),
    )

# 2. A triggerer dies during the deferred wait.
with dag("gke_failover"):
    train("gke_failover", deferrable=True, retries=0, annotations=GATED)

# 2b. The triggerer stalls during the deferred wait until the other one took the trigger over, then
#     goes on.
with dag("gke_stalled_triggerer"):
    train("gke_stalled_triggerer", deferrable=True, retries=0, annotations=GATED)

# 3. The worker dies during a polling wait; the retry reattaches; then the job succeeds, fails or
#    is preempted. Or the worker is cut off (frozen) until a retry has reattached, then comes back
#    ("superseded").
for outcome in ("success", "fail", "preempt", "superseded"):
    with dag(f"gke_crash_{outcome}"):
        train(f"gke_crash_{outcome}", deferrable=False, retries=2, annotations=GATED)

# 4. The program fails while no worker is alive.
with dag("gke_crash_fails_meanwhile"):
    train("gke_crash_fails_meanwhile", deferrable=False, retries=2, annotations=GATED)

# 5. Preemption when the DAG sets no retries (the operator's preemption retries apply), and when it
#    sets retries=0 explicitly (that wins).
with dag("gke_preempt_no_retries"):
    train("gke_preempt_no_retries", deferrable=True, annotations=GATED)

with dag("gke_preempt_retries_zero"):
    train("gke_preempt_retries_zero", deferrable=True, retries=0, annotations=GATED)

# 6. A user marks the task failed while it polls and while it is deferred.
for mode, deferrable in (("polling", False), ("deferred", True)):
    with dag(f"gke_mark_failed_{mode}"):
        train(f"gke_mark_failed_{mode}", deferrable=deferrable, retries=2, annotations=GATED)

# 7. The API server is unreachable for a while during the wait.
for mode, deferrable in (("deferrable", True), ("polling", False)):
    with dag(f"gke_outage_{mode}"):
        train(f"gke_outage_{mode}", conn="gke_gated", deferrable=deferrable, retries=0, annotations=GATED)

# A finished task cleared by its user: the success an earlier try reported is reported again
# without running the program again; a failed job kept for debugging (``delete_on`` without
# ``failure``) never blocks the cleared try, which runs a fresh job. The programs are gated: the
# test ends them once the task is deferred (a trigger that fires before Airflow has taken in the
# deferral races the executor's report of the deferring process).
with dag("gke_clear_success"):
    train("gke_clear_success", deferrable=True, retries=0, annotations=GATED)
with dag("gke_clear_kept_failure"):
    train(
        "gke_clear_kept_failure", deferrable=True, retries=0, delete_on=("success", "kill"), annotations=GATED
    )

# A task cleared while its job runs (deferred and polling): the try is killed, its job deleted
# (``kill`` is in the default ``delete_on``), and the cleared try runs a fresh job.
for mode, deferrable in (("deferred", True), ("polling", False)):
    with dag(f"gke_clear_running_{mode}"):
        train(f"gke_clear_running_{mode}", deferrable=deferrable, retries=0, annotations=GATED)

# A mapped task of 3 indexes, deferred and polling: each index follows and reports its own job.
MAPPED = 3
for mode, deferrable in (("deferred", True), ("polling", False)):
    with dag(f"gke_mapped_{mode}"):
        PathwaysJobOperator.partial(
            task_id="train",
            job=spec(),
            namespace=namespace(f"gke_mapped_{mode}"),
            kubernetes_conn_id="gke_sandbox",
            deferrable=deferrable,
            retries=0,
            poll_interval=2,
            annotations=GATED,
            retry_policy=FAST_RETRY,
        ).expand(labels=[{"shard": str(i)} for i in range(MAPPED)])

# A task whose wait succeeded at "ready" and whose job serves on, then cleared: no try followed the
# job when it was cleared, so the cleared try follows it (reports it ready again), not restarts it.
# Its slices come up 30 s apart: a trigger that fires before the scheduler has processed the
# deferral's exit gets the task failed by Airflow 3.3 (apache/airflow#72716). The cleared try finds
# the job ready and does not defer.
with dag("gke_clear_serving"):
    train(
        "gke_clear_serving",
        deferrable=True,
        retries=0,
        wait_until="ready",
        annotations={**GATED, **knobs(slice_delay_seconds=30, head_delay_seconds=30)},
    )

# Mapped tasks get the unmapped task's preemption budget and retry policy: with no ``retries`` a
# preempted index is retried; with ``retries=2`` and no ``retry_policy`` a failing program is not.
with dag("gke_mapped_budget"):
    PathwaysJobOperator.partial(
        task_id="train",
        job=spec(),
        namespace=namespace("gke_mapped_budget"),
        kubernetes_conn_id="gke_sandbox",
        deferrable=True,
        annotations=GATED,
        retry_policy=PathwaysRetryPolicy(
            base_delay=timedelta(seconds=1), max_delay=timedelta(seconds=2), retry_unclassified=False
        ),
    ).expand(labels=[{"shard": str(i)} for i in range(2)])
with dag("gke_mapped_retries"):
    PathwaysJobOperator.partial(
        task_id="train",
        job=spec(),
        namespace=namespace("gke_mapped_retries"),
        kubernetes_conn_id="gke_sandbox",
        deferrable=False,
        poll_interval=2,
        retries=2,
        retry_delay=timedelta(seconds=1),
        annotations=GATED,
    ).expand(labels=[{"shard": str(i)} for i in range(2)])

# One fixed job name (``name=``) for every run of the DAG: a run never follows, deletes or reports
# the job another run made under that name.
with dag("gke_fixed_name"):
    train("gke_fixed_name", name="shared-train", deferrable=True, retries=0, annotations=GATED)
