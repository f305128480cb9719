"""DAGs the deployment tests run on the sandbox Slurm cluster, over slurmrestd and over SSH.

Run conf (params): ``tag`` (suffix of every job name, so a run's jobs can be found), ``workdir`` (a
directory of the cluster user shared with the tests) and ``scripts`` (the installed Pathways
scripts). A gated workload appends a line to ``<workdir>/<dag_id>.runs`` each time it starts, then
waits for ``<workdir>/<dag_id>.release`` and exits with the code written there. The jobs run in
``high``, whose tier nothing preempts, except those that the preemption scenarios preempt
(``preemptible``, a lower tier).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_provider_pathways.failures import PathwaysRetryPolicy
from airflow_provider_pathways.operators.slurm import (
    CancelSlurmJobOperator,
    PathwaysSlurmServiceOperator,
    SlurmJobOperator,
)

START = pendulum.datetime(2026, 1, 1, tz="UTC")
FAST_RETRY = PathwaysRetryPolicy(base_delay=timedelta(seconds=1), max_delay=timedelta(seconds=2))
TRANSPORTS = ("rest", "ssh")
PARAMS = {"tag": "untagged", "workdir": "/nonexistent", "scripts": "/nonexistent"}
JOB_NAME = "{{ ti.dag_id }}-{{ params.tag }}"
FILES = "{{ params.workdir }}/{{ ti.dag_id }}"
SERVICE_ID = "{{ ti.xcom_pull(task_ids='service', key='job_id') }}"

GATED_WORKLOAD = """#!/bin/bash
echo "program start job=$SLURM_JOB_ID restart=${SLURM_RESTART_COUNT:-0}" >> "$RUNS"
echo "step 1/3: loss=0.91"
while [ ! -e "$RELEASE" ]; do sleep 0.2; done
code=$(cat "$RELEASE")
echo "step 2/3: loss=0.52"
if [ "$code" != 0 ]; then
    echo "ValueError: bad batch" >&2
    echo "the program failed with exit code $code"
    exit "$code"
fi
echo "step 3/3: loss=0.23"
echo "Program finished successfully"
"""


def dag(dag_id: str) -> DAG:
    return DAG(
        dag_id, schedule=None, start_date=START, catchup=False, params=PARAMS, tags=["deployment", "slurm"]
    )


def workload(transport: str, *, gate: bool = False, **kwargs: Any) -> SlurmJobOperator:
    kwargs.setdefault("retry_policy", FAST_RETRY)
    kwargs.setdefault("retry_delay", timedelta(seconds=1))
    kwargs.setdefault("poll_interval", 2)
    kwargs.setdefault("partition", "high")
    return SlurmJobOperator(
        task_id="train",
        slurm_conn_id=f"slurm_{transport}" + ("_gated" if gate else ""),
        script=GATED_WORKLOAD,
        job_name=JOB_NAME,
        working_directory="{{ params.workdir }}",
        environment={"RELEASE": f"{FILES}.release", "RUNS": f"{FILES}.runs"},
        log_tail_lines=10,
        **kwargs,
    )


def service(transport: str, **kwargs: Any) -> PathwaysSlurmServiceOperator:
    """The Pathways service. It writes ``cluster.env`` to ``<dag_id>.written.env``; the task waits
    for ``<dag_id>.env``, which the test puts in place (a copy) when the service may become ready."""
    kwargs.setdefault("poll_interval", 2)
    return PathwaysSlurmServiceOperator(
        task_id="service",
        slurm_conn_id=f"slurm_{transport}",
        script_path="{{ params.scripts }}/start_pathways.sh",
        slice_shape="2x4",
        min_slices=1,
        max_slices=1,
        gcs_bucket="pathways-test-bucket",
        environment={
            "PATHWAYS_CLUSTER_ENV": f"{FILES}.written.env",
            "PATHWAYS_LOG_DIR": "{{ params.workdir }}",
            "PATHWAYS_POLL_SECONDS": "0.5",
        },
        cluster_env_path=f"{FILES}.env",
        job_name=JOB_NAME,
        partition="high",
        **kwargs,
    )


def stop_service(transport: str) -> CancelSlurmJobOperator:
    """The service's teardown: cancels the service job named in its ``cluster.env``."""
    return CancelSlurmJobOperator(
        task_id="stop",
        slurm_conn_id=f"slurm_{transport}",
        job_ids=SERVICE_ID,
        cluster_env_path=f"{FILES}.env",
    )


for t in TRANSPORTS:
    # 1. Happy path, deferrable and polling: a workload, and the service with its teardown.
    for mode, deferrable in (("deferrable", True), ("polling", False)):
        with dag(f"slurm_happy_{mode}_{t}"):
            workload(t, deferrable=deferrable, retries=0)
        with dag(f"service_happy_{mode}_{t}"):
            start = service(t, deferrable=deferrable, retries=0)
            stop = stop_service(t)
            start >> stop.as_teardown(setups=start)

    # 2. A triggerer dies during the deferred wait.
    with dag(f"slurm_failover_{t}"):
        workload(t, deferrable=True, retries=0)

    # 2b. The triggerer stalls during the deferred wait until the other one took the trigger over,
    #     then goes on.
    with dag(f"slurm_stalled_triggerer_{t}"):
        workload(t, deferrable=True, retries=0)

    # 3. The worker dies during a polling wait; then the job succeeds, fails or is preempted. Or it is
    #    cut off (frozen) until a retry has reattached, then comes back ("superseded").
    for outcome in ("success", "fail", "preempt", "superseded"):
        with dag(f"slurm_crash_{outcome}_{t}"):
            partition = "preemptible" if outcome == "preempt" else "high"
            workload(t, deferrable=False, retries=2, partition=partition)

    # 4. The program fails while no worker is alive.
    with dag(f"slurm_crash_fails_meanwhile_{t}"):
        workload(t, deferrable=False, retries=2)

    # 5. Preemption with no retries in the DAG, and with retries=0.
    with dag(f"slurm_preempt_no_retries_{t}"):
        workload(t, deferrable=True, partition="preemptible")
    with dag(f"slurm_preempt_retries_zero_{t}"):
        workload(t, deferrable=True, retries=0, partition="preemptible")

    # 6. A user marks the task failed while it polls and while it is deferred.
    for mode, deferrable in (("polling", False), ("deferred", True)):
        with dag(f"slurm_mark_failed_{mode}_{t}"):
            workload(t, deferrable=deferrable, retries=2)
        with dag(f"service_mark_failed_{mode}_{t}"):
            service(t, deferrable=deferrable, retries=2)

    # 7. slurmrestd / sshd unreachable for a while during the wait.
    for mode, deferrable in (("deferrable", True), ("polling", False)):
        with dag(f"slurm_outage_{mode}_{t}"):
            workload(t, gate=True, deferrable=deferrable, retries=0)

# A user marks the service task failed while its submission is on its way to slurmrestd (the
# ``slurm_rest_held`` connection's relay holds it until the killed try's next request).
with dag("service_mark_failed_submitting"):
    service("rest_held", deferrable=True, retries=2)

# A mapped task of 3 indexes, deferred and polling (over slurmrestd): each index follows and
# reports its own job (the gated program of every index waits for the same release file).
for mode, deferrable in (("deferred", True), ("polling", False)):
    with dag(f"slurm_mapped_{mode}"):
        SlurmJobOperator.partial(
            task_id="train",
            slurm_conn_id="slurm_rest",
            script=GATED_WORKLOAD,
            job_name=JOB_NAME,
            working_directory="{{ params.workdir }}",
            environment={"RELEASE": f"{FILES}.release", "RUNS": f"{FILES}.runs"},
            partition="high",
            deferrable=deferrable,
            retries=0,
            poll_interval=2,
            retry_policy=FAST_RETRY,
        ).expand(log_tail_lines=[10, 11, 12])

# A slice of the service's worker array is lost (requeued) while the workload runs; the program dies
# with DATA_LOSS, as a Pathways program does when a slice goes: a preemption, retried; the retry
# finds the marker the first run left and finishes once the test lets it (a trigger that fires before
# Airflow took in the deferral races the executor's report). Deferred over slurmrestd, polling over SSH.
SLICE_LOST_WORKLOAD = """#!/bin/bash
echo "program start job=$SLURM_JOB_ID restart=${SLURM_RESTART_COUNT:-0}" >> "$RUNS"
if [ -e "$MARKER.failed" ]; then
  while [ ! -e "$MARKER.again" ]; do sleep 0.2; done
  echo "second run: finishing"; exit 0
fi
echo "step 1/3: loss=0.91"
while [ ! -e "$MARKER" ]; do sleep 0.2; done
touch "$MARKER.failed"
echo "jax.errors.JaxRuntimeError: DATA_LOSS: lost the connection to slice 0" >&2
exit 1
"""
for mode, deferrable, t in (("deferred", True, "rest"), ("polling", False, "ssh")):
    with dag(f"slurm_slice_lost_{mode}_{t}"):
        start = service(t, deferrable=deferrable, retries=0)
        lost = SlurmJobOperator(
            task_id="train",
            slurm_conn_id=f"slurm_{t}",
            script=SLICE_LOST_WORKLOAD,
            job_name="{{ ti.dag_id }}-train-{{ params.tag }}",
            working_directory="{{ params.workdir }}",
            environment={"MARKER": f"{FILES}.marker", "RUNS": f"{FILES}.runs"},
            worker_array_job_id="{{ ti.xcom_pull(task_ids='service', key='worker_array_job_id') }}",
            partition="high",
            deferrable=deferrable,
            retries=1,
            retry_delay=timedelta(seconds=1),
            retry_policy=FAST_RETRY,
            poll_interval=2,
            log_tail_lines=10,
        )
        stop = stop_service(t)
        start >> lost >> stop.as_teardown(setups=start)
