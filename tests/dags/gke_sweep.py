"""DAGs of the sweep's tests (dag.test against the Kubernetes stand-in): jobs handed on by tasks
that succeed once their job is ready (their programs run on, as a served model does), and the
maintenance DAGs that sweep their namespace."""

from __future__ import annotations

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_pathways.operators.sweep import PathwaysJobSweepOperator
from tests.dags.gke_scenarios import CONN, START, knobs, operator, spec

NAMESPACE = "sweep"


def handed_on(task_id: str, **kwargs: object) -> None:
    operator(
        task_id,
        NAMESPACE,
        spec(),
        wait_until="ready",
        poll_interval=0.1,
        retries=0,
        annotations=knobs(program_seconds=600),
        **kwargs,
    )


with DAG("gke_sweep_subjects", schedule=None, start_date=START) as subjects:
    handed_on("handed_on")
    # the test marks it failed once it succeeded: nothing else would end its job
    handed_on("marked_failed_later")
    # its task keeps the job of a kill (delete_on without "kill"): marked failed, it stays
    handed_on("kept_on_kill", delete_on=("failure",))

with DAG("gke_sweep_run_deleted", schedule=None, start_date=START) as run_deleted:
    # the test deletes this DAG run once its task succeeded
    handed_on("served")

with DAG("gke_sweep_dry_run", schedule=None, start_date=START) as sweep_dry_run:
    PathwaysJobSweepOperator(task_id="sweep", namespaces=NAMESPACE, kubernetes_conn_id=CONN, dry_run=True)
