"""Every 10 minutes, end the Pathways jobs on GKE that no task instance follows any more.

A task's own tries delete its job when it ends, is killed or times out. What no try can see, this
DAG closes: a deferred task marked failed (or success) before a triggerer started its trigger
(Airflow then deletes the trigger without running it), a task marked failed after it handed its
job on, a worker lost after the last try, a DAG run deleted while its job ran.

The sweep lists the jobs that carry this provider's owner labels in ``namespaces`` and have not
ended, reads each one's task instance state, and deletes a job only when its task instance ended
or no longer exists and its task would not have left it running (``wait_until`` created or ready,
``delete_on``). A job whose task instance is queued, running, deferred, up for retry or cleared is
left alone: a try follows it.

Try it first from a shell: ``airflow pathways sweep-gke --namespace team-a --dry-run``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_provider_pathways.operators.sweep import PathwaysJobSweepOperator

with DAG(
    dag_id="example_pathways_sweep",
    schedule=timedelta(minutes=10),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["pathways", "maintenance"],
    params={
        "namespaces": Param(
            ["default"],
            type="array",
            items={"type": "string"},
            title="Namespaces",
            description="The namespaces whose Pathways jobs are swept.",
        ),
    },
    doc_md=__doc__,
) as dag:
    # [START howto_operator_pathways_job_sweep]
    PathwaysJobSweepOperator(
        task_id="sweep",
        namespaces="{{ params.namespaces }}",
        kubernetes_conn_id="kubernetes_default",
        execution_timeout=timedelta(minutes=5),
    )
    # [END howto_operator_pathways_job_sweep]
