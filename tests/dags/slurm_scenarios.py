"""DAGs the Slurm tests run with dag.test() on the sandbox Slurm cluster.

The connection (``slurm_rest`` or ``slurm_ssh``) and the paths on the cluster come in through the
run conf (``params``), so every DAG runs over both transports.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import DAG

from airflow_provider_pathways.operators.slurm import (
    CancelSlurmJobOperator,
    PathwaysSlurmServiceOperator,
    SlurmJobOperator,
)
from airflow_provider_pathways.operators.sweep import SlurmJobSweepOperator
from airflow_provider_pathways.sensors.slurm import PathwaysClusterEnvSensor
from tests.dags.fast_retry import fast_retry

START = pendulum.datetime(2026, 1, 1, tz="UTC")
PARAMS = {
    "conn": "slurm_ssh",
    "steps": "3",
    "workdir": "/tmp",
    "scripts": "/nonexistent",
    "marker": "/tmp/none",
    "cluster_env": "~/x.env",
    "job_name": "pathways-test",
}
CONN = "{{ params.conn }}"
SERVICE_ID = "{{ ti.xcom_pull(task_ids='service', key='job_id') }}"

FAILING_WORKLOAD = """#!/bin/bash
echo "step 1/2 loss=0.9"
echo "ValueError: bad batch" >&2
exit 3
"""

# First run: leaves a marker and runs long enough to be preempted; the retry finds it and finishes.
PREEMPTIBLE_WORKLOAD = """#!/bin/bash
if [ -e "$MARKER" ]; then echo "second run: finishing"; exit 0; fi
touch "$MARKER"
echo "first run: working"
sleep 120
"""


def dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None, start_date=START, params=PARAMS, render_template_as_native_obj=True)


with dag("slurm_workload_fails") as workload_fails:
    SlurmJobOperator(
        task_id="train",
        slurm_conn_id=CONN,
        script=FAILING_WORKLOAD,
        deferrable=True,
        poll_interval=0.5,
        retries=3,
        **fast_retry(),
    )

with dag("slurm_workload_preempted") as workload_preempted:
    SlurmJobOperator(
        task_id="train",
        slurm_conn_id=CONN,
        script=PREEMPTIBLE_WORKLOAD,
        partition="preemptible",
        environment={"MARKER": "{{ params.marker }}"},
        deferrable=True,
        poll_interval=0.5,
        retries=2,
        **fast_retry(),
    )

with dag("slurm_kill_on_timeout") as kill_on_timeout:
    SlurmJobOperator(
        task_id="train",
        slurm_conn_id=CONN,
        script="#!/bin/bash\nsleep 300\n",
        deferrable=False,
        poll_interval=0.2,
        execution_timeout=timedelta(seconds=3),
    )

with dag("slurm_bad_input") as bad_input:
    common = {"slurm_conn_id": CONN, "wait_for_ready": False, "retries": 2, **fast_retry()}
    good = {"slice_shape": "2x4", "min_slices": 1, "max_slices": 2, "gcs_bucket": "my-bucket"}
    PathwaysSlurmServiceOperator(
        task_id="bad_shape",
        script_path="{{ params.scripts }}/start_pathways.sh",
        **{**good, "slice_shape": "2x"},
        **common,
    )
    PathwaysSlurmServiceOperator(
        task_id="min_over_max",
        script_path="{{ params.scripts }}/start_pathways.sh",
        **{**good, "min_slices": 3},
        **common,
    )
    PathwaysSlurmServiceOperator(
        task_id="bad_bucket",
        script_path="{{ params.scripts }}/start_pathways.sh",
        **{**good, "gcs_bucket": "gs://Bad_Bucket"},
        **common,
    )
    PathwaysSlurmServiceOperator(
        task_id="missing_script", script_path="/nonexistent/start_pathways.sh", **good, **common
    )


def service_ending(dag_id: str, exit_code: int) -> DAG:
    """A service job that exits with ``exit_code`` at once, and its readiness sensor."""
    with dag(dag_id) as ending:
        service = PathwaysSlurmServiceOperator(
            task_id="service",
            slurm_conn_id=CONN,
            script=f"#!/bin/bash\necho 'starting the resource manager'\nexit {exit_code}\n",
            slice_shape="2x4",
            min_slices=1,
            max_slices=2,
            gcs_bucket="my-bucket",
            wait_for_ready=False,
        )
        service >> PathwaysClusterEnvSensor(  # retries the DAG allows are not spent on an ended job
            task_id="ready",
            slurm_conn_id=CONN,
            service_job_id=SERVICE_ID,
            cluster_env_path="{{ params.cluster_env }}",
            deferrable=True,
            poke_interval=0.5,
            timeout=300,
            retries=2,
            **fast_retry(),
        )
    return ending


service_dies = service_ending("slurm_service_dies", 7)
service_ends = service_ending("slurm_service_ends", 0)  # a service that ends cannot serve

with dag("slurm_stale_cluster_env") as stale_cluster_env:
    service = PathwaysSlurmServiceOperator(
        task_id="service",
        slurm_conn_id=CONN,
        script="#!/bin/bash\necho 'never ready'\nsleep 120\n",
        slice_shape="2x4",
        min_slices=1,
        max_slices=2,
        gcs_bucket="my-bucket",
        wait_for_ready=False,
    )
    ready = PathwaysClusterEnvSensor(
        task_id="ready",
        slurm_conn_id=CONN,
        service_job_id=SERVICE_ID,
        cluster_env_path="{{ params.cluster_env }}",
        deferrable=True,
        poke_interval=0.5,
        timeout=4,
    )
    stop = CancelSlurmJobOperator(
        task_id="stop", slurm_conn_id=CONN, job_ids=SERVICE_ID, cluster_env_path=None
    )
    service >> ready >> stop.as_teardown(setups=service)

WAIT_FOR_MARKER = """#!/bin/bash
echo "waiting for $MARKER"
while [ ! -e "$MARKER" ]; do sleep 0.2; done
echo "marker seen: finishing"
sleep 3
echo "done"
"""


def create_marker(context: dict) -> None:
    """on_retry_callback: lets the still-running job finish during the retry."""
    from pathlib import Path

    Path(context["params"]["marker"]).touch()


with dag("slurm_reattach") as reattach:
    SlurmJobOperator(
        task_id="train",
        slurm_conn_id=CONN,
        script=WAIT_FOR_MARKER,
        job_name="{{ params.job_name }}",
        environment={"MARKER": "{{ params.marker }}"},
        deferrable=True,
        poll_interval=0.3,
        wait_timeout=3,
        cancel_on_kill=False,
        retries=1,
        retry_delay=timedelta(seconds=1),
        on_retry_callback=create_marker,
    )

with dag("slurm_reattach_finished") as reattach_finished:
    SlurmJobOperator(
        task_id="train",
        slurm_conn_id=CONN,
        script='#!/bin/bash\nwhile [ ! -e "$MARKER" ]; do sleep 0.2; done\necho done\n',
        job_name="{{ params.job_name }}",
        environment={"MARKER": "{{ params.marker }}"},
        deferrable=True,
        poll_interval=0.3,
        wait_timeout=2,
        cancel_on_kill=False,
        retries=1,
        retry_delay=timedelta(seconds=2),
        on_retry_callback=create_marker,
    )


with dag("slurm_native_templates") as native_templates:
    # render_template_as_native_obj turns "{{ params.steps }}" into the int 3 and the work
    # directory into a path that must reach Slurm rendered.
    SlurmJobOperator(
        task_id="train",
        slurm_conn_id=CONN,
        script='#!/bin/bash\necho "STEPS=$STEPS VERBOSE=$VERBOSE PWD=$PWD"\n',
        environment={"STEPS": "{{ params.steps }}", "VERBOSE": True},
        working_directory="{{ params.workdir }}",
        deferrable=False,
        poll_interval=0.5,
        retries=0,
    )


SHARDS = 3

with dag("slurm_mapped") as mapped:
    # one job per map index, each printing its shard, followed in the triggerer and by polling
    for mode, deferrable in (("deferred", True), ("polling", False)):
        SlurmJobOperator.partial(
            task_id=f"train_{mode}",
            slurm_conn_id=CONN,
            script='#!/bin/bash\necho "shard $SHARD done"\n',
            deferrable=deferrable,
            poll_interval=0.3,
            retries=0,
        ).expand(environment=[{"SHARD": str(i)} for i in range(SHARDS)])


#: The sandbox's Pathways service: its start_pathways.sh, 2x4 slices, a bucket it never reads.
SANDBOX_SERVICE: dict[str, Any] = {
    "slurm_conn_id": CONN,
    "script_path": "{{ params.scripts }}/start_pathways.sh",
    "slice_shape": "2x4",
    "gcs_bucket": "my-bucket",
}

with dag("slurm_service_ready") as service_ready:
    for mode, deferrable in (("deferred", True), ("polling", False)):
        service = PathwaysSlurmServiceOperator(
            task_id=f"service_{mode}",
            **SANDBOX_SERVICE,
            min_slices=2,
            max_slices=2,
            environment={"PATHWAYS_CLUSTER_ENV": f"{{{{ params.cluster_env }}}}.{mode}"},
            cluster_env_path=f"{{{{ params.cluster_env }}}}.{mode}",
            deferrable=deferrable,
            poll_interval=0.5,
            retries=0,
        )
        stop = CancelSlurmJobOperator(
            task_id=f"stop_{mode}",
            slurm_conn_id=CONN,
            job_ids=f"{{{{ ti.xcom_pull(task_ids='service_{mode}', key='job_id') }}}}",
            cluster_env_path=f"{{{{ params.cluster_env }}}}.{mode}",
        )
        service >> stop.as_teardown(setups=service)


def serving(dag_id: str) -> DAG:
    """A service that serves on once ready: no teardown."""
    with dag(dag_id) as serves:
        PathwaysSlurmServiceOperator(
            task_id="service",
            **SANDBOX_SERVICE,
            min_slices=1,
            max_slices=1,
            environment={"PATHWAYS_CLUSTER_ENV": "{{ params.cluster_env }}"},
            cluster_env_path="{{ params.cluster_env }}",
            deferrable=True,
            poll_interval=0.5,
            retries=0,
        )
    return serves


# the service still serves when the test clears the task
service_cleared_while_serving = serving("slurm_service_cleared_while_serving")
# the test marks it failed once it handed the service on, and a sweep cancels it
sweep_service = serving("slurm_sweep_service")

with dag("slurm_sweep_dry_run") as sweep_dry_run:
    SlurmJobSweepOperator(task_id="sweep", slurm_conn_id=CONN, dag_ids=["slurm_sweep_service"], dry_run=True)


with dag("slurm_too_many_slices") as too_many_slices:
    PathwaysSlurmServiceOperator(
        task_id="service",
        **SANDBOX_SERVICE,
        min_slices=1,
        max_slices=10000,
        wait_for_ready=False,
        retries=2,
        **fast_retry(),
    )

# The program fails on its first run and succeeds once the marker exists (a cleared task's).
FAILS_FIRST = """#!/bin/bash
if [ -e "$MARKER" ]; then echo "second run: finishing"; exit 0; fi
touch "$MARKER"
echo "ValueError: bad batch" >&2
exit 3
"""

with dag("slurm_cleared_after_failure") as cleared_after_failure:
    SlurmJobOperator(
        task_id="train",
        slurm_conn_id=CONN,
        script=FAILS_FIRST,
        job_name="{{ params.job_name }}",
        environment={"MARKER": "{{ params.marker }}"},
        poll_interval=0.3,
        retries=0,
    )

with dag("slurm_cleared_after_success") as cleared_after_success:
    SlurmJobOperator(
        task_id="train",
        slurm_conn_id=CONN,
        script="#!/bin/bash\necho done\n",
        job_name="{{ params.job_name }}",
        poll_interval=0.3,
        retries=0,
    )

# A deferred wait that reaches the task's execution_timeout (test_deferred_execution_timeout.py).
with dag("slurm_deferred_execution_timeout") as deferred_execution_timeout:
    SlurmJobOperator(
        task_id="train",
        slurm_conn_id=CONN,
        script="#!/bin/bash\nsleep 300\n",
        job_name="{{ params.job_name }}",
        deferrable=True,
        poll_interval=1,
        retries=0,
        execution_timeout=timedelta(seconds=6),
    )

# Cleared once the cluster forgot the job (no accounting, past MinJobAge): each task reports the
# success it remembered, polling and deferred.
with dag("slurm_cleared_after_forgotten_success") as cleared_after_forgotten_success:
    for mode, deferrable in (("polling", False), ("deferred", True)):
        SlurmJobOperator(
            task_id=f"train_{mode}",
            slurm_conn_id=CONN,
            script=f'#!/bin/bash\necho "{mode} done"\nexit 0\n',
            job_name=f"{{{{ params.job_name }}}}-{mode}",
            working_directory="{{ params.workdir }}",
            output_path="{{ params.workdir }}/%j.out",
            deferrable=deferrable,
            poll_interval=0.3,
            retries=0,
        )


# Two service jobs of one name running at once, as two runs of one DAG would have: each with a
# cluster.env of its own (the script takes the path), or both writing ~/pathways/cluster.env.
def two_services(dag_id: str, *, published: bool) -> DAG:
    with dag(dag_id) as pair_dag:
        pair = [
            PathwaysSlurmServiceOperator(
                task_id=task_id,
                slurm_conn_id=CONN,
                script_path="{{ params.scripts }}/start_pathways.sh",
                job_name="{{ params.job_name }}",
                output_path="{{ params.scripts }}/service-%j.out",
                slice_shape="2x4",
                min_slices=2,
                max_slices=2,
                gcs_bucket="my-bucket",
                environment={
                    "PATHWAYS_WORKER_SCRIPT": "{{ params.scripts }}/run_worker_slice.sh",
                    "PATHWAYS_LOG_DIR": "{{ params.scripts }}/logs",
                    "PATHWAYS_AS_PUBLISHED": "1" if published else "0",
                },
                cluster_env_variable=None if published else "PATHWAYS_CLUSTER_ENV",
                deferrable=True,
                poll_interval=0.5,
                wait_timeout=15 if task_id == "second" else 90,
                retries=0,
            )
            for task_id in ("first", "second")
        ]
        stop = CancelSlurmJobOperator(
            task_id="stop",
            slurm_conn_id=CONN,
            job_ids=[f"{{{{ ti.xcom_pull(task_ids='{task.task_id}', key='job_id') }}}}" for task in pair],
            cluster_env_path=None,
        )
        pair[0] >> pair[1]
        stop.as_teardown(setups=pair)
    return pair_dag


two_services_own_files = two_services("slurm_two_services_own_files", published=False)
two_services_shared_file = two_services("slurm_two_services_shared_file", published=True)


# A job that will not end by itself (StuckJobWatch in slurm/outcome.py): held from its submission, or
# requeued more often than allowed; both waits, polling and deferred.
def stuck_job(deferrable: bool, **bound: Any) -> SlurmJobOperator:
    return SlurmJobOperator(
        task_id="train",
        slurm_conn_id=CONN,
        job_name="{{ params.job_name }}",
        script="#!/bin/bash\nsleep 300\n",
        retries=0,
        preemption_retries=0,
        deferrable=deferrable,
        poll_interval=0.2,
        **bound,
    )


HELD = {"sbatch_options": {"hold": ""}, "hold_timeout": 0}
with dag("slurm_held_deferred") as held_deferred:
    stuck_job(True, **HELD)
with dag("slurm_held_polling") as held_polling:
    stuck_job(False, **HELD)
with dag("slurm_requeued_too_often_deferred") as requeued_too_often_deferred:
    stuck_job(True, requeue=True, max_requeues=0)
with dag("slurm_requeued_too_often_polling") as requeued_too_often_polling:
    stuck_job(False, requeue=True, max_requeues=0)

# The workload dies with DATA_LOSS once the test took a slice away (the marker), as a Pathways
# program does when a slice goes; its retry finds the second marker and finishes.
SLICE_LOST_WORKLOAD = """#!/bin/bash
if [ -e "$MARKER.failed" ]; then echo "second run: finishing"; exit 0; fi
echo "step 1 loss=0.9"
while [ ! -e "$MARKER" ]; do sleep 0.2; done
touch "$MARKER.failed"
echo "jax.errors.JaxRuntimeError: DATA_LOSS: lost the connection to slice 1" >&2
exit 1
"""


def slice_lost(deferrable: bool) -> None:
    service = PathwaysSlurmServiceOperator(
        task_id="service",
        slurm_conn_id=CONN,
        script_path="{{ params.scripts }}/start_pathways.sh",
        slice_shape="2x4",
        min_slices=2,
        max_slices=2,
        gcs_bucket="my-bucket",
        environment={"PATHWAYS_CLUSTER_ENV": "{{ params.cluster_env }}"},
        cluster_env_path="{{ params.cluster_env }}",
        poll_interval=0.5,
        retries=0,
    )
    workload = SlurmJobOperator(
        task_id="train",
        slurm_conn_id=CONN,
        job_name="{{ params.job_name }}",
        script=SLICE_LOST_WORKLOAD,
        environment={"MARKER": "{{ params.marker }}"},
        worker_array_job_id="{{ ti.xcom_pull(task_ids='service', key='worker_array_job_id') }}",
        retries=1,
        **fast_retry(),
        deferrable=deferrable,
        poll_interval=0.2,
    )
    stop = CancelSlurmJobOperator(
        task_id="stop",
        slurm_conn_id=CONN,
        job_ids="{{ ti.xcom_pull(task_ids='service', key='job_id') }}",
        cluster_env_path="{{ params.cluster_env }}",
    )
    service >> workload >> stop.as_teardown(setups=service)


with dag("slurm_slice_lost_deferred") as slice_lost_deferred:
    slice_lost(True)
with dag("slurm_slice_lost_polling") as slice_lost_polling:
    slice_lost(False)


# Try 1's submission reaches slurmrestd but its answer is lost (tests/support/lost_answer.py): try 1 fails
# without the job's id; try 2 must follow that job, not submit a second one. No retries in the DAG:
# the preemption budget's policy retries it (a lost answer is a lost watch, not an unclassified
# error). With retries=0 the last try cancels the job it could not name.
def lost_answer_dag(dag_id: str, **retries: Any) -> DAG:
    with dag(dag_id) as lost:
        SlurmJobOperator(
            task_id="train",
            slurm_conn_id=CONN,
            job_name="{{ params.job_name }}",
            script='#!/bin/bash\nsleep 8\necho "the one run: done"\n',
            deferrable=True,
            poll_interval=0.5,
            **fast_retry(budget=True),
            **retries,
        )
    return lost


lost_answer = lost_answer_dag("slurm_lost_answer")
lost_answer_last_try = lost_answer_dag("slurm_lost_answer_last_try", retries=0)


def superseded(dag_id: str, *, deferrable: bool, **bound: Any) -> DAG:
    """Try 1 waits for its job until it times out (polling: its execution_timeout; deferred: the
    trigger's wait_timeout, then the resumed try gives up); meanwhile try 2 (in the test: its mark
    in the job's comment) follows the job: try 1 must leave the job to try 2."""
    with dag(dag_id) as superseded_dag:
        SlurmJobOperator(
            task_id="train",
            slurm_conn_id=CONN,
            job_name="{{ params.job_name }}",
            script="#!/bin/bash\nsleep 300\n",
            retries=0,
            deferrable=deferrable,
            poll_interval=0.2,
            **bound,
        )
    return superseded_dag


superseded_try = superseded("slurm_superseded_try", deferrable=False, execution_timeout=timedelta(seconds=10))
superseded_deferred_try = superseded("slurm_superseded_deferred_try", deferrable=True, wait_timeout=10)
