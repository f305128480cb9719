"""The soak's Slurm DAGs (``tests/soak``): one DAG per shape that Airflow fixes at parse time, the
rest of a run's shape in its conf.

The DAG processor parses this one file (a fixed set of DAGs, not one per run). What a DAG fixes: the
transport (slurmrestd or SSH, always through the gated connection the soak closes for its outages),
deferrable or polling, ``retries`` (unset: the operator's preemption budget; or 2), mapped (2
indexes, plain variant only) or not, and a variant: plain, jobs left to themselves when the task is
killed or times out (``cancel_on_kill=False``), or an ``execution_timeout``. What a run's conf sets
(``params``): how long the program runs (``program_seconds``), how it exits (``exit_code``), where
its files go (``workdir``, a directory of the cluster user) and the suffix of its job names
(``tag``, the soak's, so that everything the soak submitted is found and cancelled at its end).

The program appends ``start job=<id> restart=<n>`` to ``<workdir>/<run id>.runs`` each time it starts,
then runs ``program_seconds`` and exits ``exit_code``, unless the soak asks it to fail first: a file
``<workdir>/fail-<job id>.<restart count>`` holding an exit code, or ``TERM`` (the program then
kills itself with SIGTERM, as a program ended by a signal).
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
from airflow_provider_pathways.operators.sweep import SlurmJobSweepOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
FAST_RETRY = PathwaysRetryPolicy(base_delay=timedelta(seconds=1), max_delay=timedelta(seconds=2))
PARAMS = {
    "program_seconds": 20,
    "exit_code": 0,
    "workdir": "/nonexistent",
    "tag": "untagged",
    "scripts": "/nonexistent",
}
#: ends with the soak's tag (``SlurmCluster.cleanup`` cancels the jobs named ``*-<tag>``)
JOB_NAME = "{{ ti.dag_id }}-{{ run_id }}-{{ params.tag }}"
#: SLURM_RESTART_COUNT: set by slurmd in a requeued batch job (sbatch(1), OUTPUT ENVIRONMENT VARIABLES)
PROGRAM = """#!/bin/bash
restart=${SLURM_RESTART_COUNT:-0}
echo "start job=$SLURM_JOB_ID restart=$restart" >> "$RUNS"
fail="$FAILDIR/fail-$SLURM_JOB_ID.$restart"
end=$((SECONDS + PROGRAM_SECONDS))
echo "step 1: loss=0.91"
while [ "$SECONDS" -lt "$end" ]; do
    if [ -e "$fail" ]; then
        how=$(cat "$fail")
        echo "the program fails: $how" >&2
        if [ "$how" = TERM ]; then kill -TERM $$; fi
        exit "$how"
    fi
    sleep 0.2
done
if [ "$EXIT_CODE" != 0 ]; then
    echo "ValueError: bad batch" >&2
    exit "$EXIT_CODE"
fi
echo "Program finished successfully"
"""
TRANSPORTS = ("rest", "ssh")
MODES = {"deferrable": True, "polling": False}
RETRIES = {"budget": None, "retries2": 2}
VARIANTS = ("plain", "keep", "timeout")
#: the ``execution_timeout`` of the ``timeout`` variant
EXECUTION_TIMEOUT = timedelta(seconds=75)
MAPPED = 2
#: the partition of every job: nothing preempts its tier (sandbox/slurm/README.md), so only the
#: soak's own faults requeue a job
PARTITION = "high"


def dag_id(transport: str, mode: str, retries: str, variant: str, mapped: bool) -> str:
    return f"soak_slurm_{transport}_{mode}_{retries}_{variant}" + ("_mapped" if mapped else "")


def arguments(transport: str, deferrable: bool, retries: int | None, variant: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "slurm_conn_id": f"slurm_{transport}_gated",
        "script": PROGRAM,
        "job_name": JOB_NAME,
        "working_directory": "{{ params.workdir }}",
        "environment": {
            "PROGRAM_SECONDS": "{{ params.program_seconds }}",
            "EXIT_CODE": "{{ params.exit_code }}",
            "RUNS": "{{ params.workdir }}/{{ run_id }}.runs",
            "FAILDIR": "{{ params.workdir }}",
        },
        "partition": PARTITION,
        "deferrable": deferrable,
        "poll_interval": 2,
        "retry_policy": FAST_RETRY,
        "retry_delay": timedelta(seconds=1),
        "log_tail_lines": 5,
    }
    if retries is not None:
        kwargs["retries"] = retries
    if variant == "keep":
        kwargs["cancel_on_kill"] = False
    elif variant == "timeout":
        kwargs["execution_timeout"] = EXECUTION_TIMEOUT
    return kwargs


def shapes() -> list[tuple[str, str, str, str, bool]]:
    """Every (transport, mode, retries, variant, mapped) this file makes a DAG of (mapped: plain only)."""
    found = []
    for transport in TRANSPORTS:
        for mode in MODES:
            for retries in RETRIES:
                for variant in VARIANTS:
                    found.append((transport, mode, retries, variant, False))
                found.append((transport, mode, retries, "plain", True))
    return found


# ---- two DAGs whose Pathways services share one Slurm user ---------------------------------------
#: ``perjob``: each service job writes a cluster.env of its own (``cluster_env_variable``: the
#: sandbox's start_pathways.sh takes the path in ``PATHWAYS_CLUSTER_ENV``); ``shared``: both write the
#: user's one ``~/pathways/cluster.env`` (docs/operators/pathways_slurm_service.rst, Concurrent runs).
PAIR_VARIANTS = ("perjob", "shared")
#: the transport of each mode (both are covered; deferred over slurmrestd, polling over SSH)
PAIR_MODES = {"deferrable": "rest", "polling": "ssh"}
PAIR_SIDES = ("a", "b")
#: seconds the service waits to be ready: two services of one user that write one cluster.env may
#: never be told apart (docs/sensors/cluster_env.rst, Whose file, which worker array)
PAIR_WAIT_TIMEOUT = 90.0
SERVICE_ID = "{{ ti.xcom_pull(task_ids='service', key='job_id') }}"
WORKER_ARRAY_ID = "{{ ti.xcom_pull(task_ids='service', key='worker_array_job_id') }}"
#: the service's own cluster.env with ``cluster_env_variable`` (``per_run_cluster_env_path``)
PER_JOB_ENV = "~/pathways/airflow/{{ ti.dag_id }}.service.{{ run_id }}.env"


def pair_dag_ids(variant: str, mode: str) -> list[str]:
    return [f"soak_slurm_pair_{variant}_{mode}_{side}" for side in PAIR_SIDES]


def pair_shapes() -> list[tuple[str, str]]:
    return [(variant, mode) for variant in PAIR_VARIANTS for mode in PAIR_MODES]


def pair_tasks(variant: str, mode: str) -> None:
    """service >> train >> stop (the service's teardown), in the DAG being defined."""
    transport = PAIR_MODES[mode]
    deferrable = mode == "deferrable"
    environment = {"PATHWAYS_LOG_DIR": "{{ params.workdir }}", "PATHWAYS_POLL_SECONDS": "0.5"}
    service = PathwaysSlurmServiceOperator(
        task_id="service",
        slurm_conn_id=f"slurm_{transport}_gated",
        script_path="{{ params.scripts }}/start_pathways.sh",
        slice_shape="2x4",
        min_slices=1,
        max_slices=2,
        gcs_bucket="pathways-test-bucket",
        environment=environment,
        cluster_env_variable="PATHWAYS_CLUSTER_ENV" if variant == "perjob" else None,
        job_name="{{ ti.dag_id }}-service-{{ run_id }}-{{ params.tag }}",
        working_directory="{{ params.workdir }}",
        partition=PARTITION,
        deferrable=deferrable,
        poll_interval=2,
        wait_timeout=PAIR_WAIT_TIMEOUT,
        retry_policy=FAST_RETRY,
        retry_delay=timedelta(seconds=1),
    )
    kwargs = arguments(transport, deferrable, None, "plain")
    kwargs["worker_array_job_id"] = WORKER_ARRAY_ID
    train = SlurmJobOperator(task_id="train", **kwargs)
    stop = CancelSlurmJobOperator(
        task_id="stop",
        slurm_conn_id=f"slurm_{transport}_gated",
        job_ids=SERVICE_ID,
        worker_array_job_id=WORKER_ARRAY_ID,
        cluster_env_path=PER_JOB_ENV if variant == "perjob" else "~/pathways/cluster.env",
        retries=2,
        retry_delay=timedelta(seconds=1),
    )
    service >> train >> stop.as_teardown(setups=service)


for _variant, _mode in pair_shapes():
    for _id in pair_dag_ids(_variant, _mode):
        with DAG(_id, schedule=None, start_date=START, catchup=False, params=PARAMS, tags=["soak", "slurm"]):
            pair_tasks(_variant, _mode)


for _transport, _mode, _retries, _variant, _mapped in shapes():
    _id = dag_id(_transport, _mode, _retries, _variant, _mapped)
    with DAG(_id, schedule=None, start_date=START, catchup=False, params=PARAMS, tags=["soak", "slurm"]):
        _kwargs = arguments(_transport, MODES[_mode], RETRIES[_retries], _variant)
        if _mapped:
            del _kwargs["log_tail_lines"]
            SlurmJobOperator.partial(task_id="train", **_kwargs).expand(log_tail_lines=[5, 6])
        else:
            SlurmJobOperator(task_id="train", **_kwargs)


#: How often the Slurm sweep runs (as the GKE one of ``soak_gke.py``): it cancels what no try can,
#: e.g. a ready service whose task the user marked failed as it handed the service on. The soak's
#: deployment is named (``[pathways] deployment_name``), so jobs another deployment submitted under
#: the same Slurm user (another checkout's soak) are left alone.
SWEEP_SECONDS = 20
with DAG(
    "soak_slurm_sweep",
    schedule=timedelta(seconds=SWEEP_SECONDS),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    tags=["soak", "slurm", "maintenance"],
):
    SlurmJobSweepOperator(
        task_id="sweep",
        slurm_conn_id="slurm_rest_gated",
        dag_ids=sorted(
            [dag_id(*shape) for shape in shapes()]
            + [pair for shape in pair_shapes() for pair in pair_dag_ids(*shape)]
        ),
        retries=0,
    )
