"""DAGs the cleanup operator tests run with dag.test() (copied into the DAGs folder by the tests)."""

from __future__ import annotations

from datetime import datetime

from airflow.providers.common.compat.sdk import DAG, get_current_context, task

from airflow_provider_pathways.operators.gcs import (
    CleanupCompilationCacheOperator,
    EnsureCompilationCacheLifecycleOperator,
)

with DAG(
    dag_id="gcs_cleanup_after_training",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"pathways_dir": "", "fail": False, "older_than": "1d"},
) as after_training:

    @task
    def train() -> None:
        """Stands in for a PathwaysJobOperator: pushes the job's pathways_dir, may then fail."""
        context = get_current_context()
        context["ti"].xcom_push(key="pathways_dir", value=context["params"]["pathways_dir"])
        if context["params"]["fail"]:
            raise RuntimeError("training failed")

    train() >> CleanupCompilationCacheOperator(
        task_id="cleanup_cache",
        pathways_dir_from_task="train",
        older_than="{{ params.older_than }}",
    )


with DAG(
    dag_id="gcs_cleanup_nightly",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"bucket": "", "budget": "1GiB"},
) as nightly:
    CleanupCompilationCacheOperator(
        task_id="dry_run",
        bucket="{{ params.bucket }}",
        older_than="7d",
        dry_run=True,
    ) >> CleanupCompilationCacheOperator(
        task_id="keep_under_budget",
        bucket="{{ params.bucket }}",
        older_than="7d",
        max_cache_bytes="{{ params.budget }}",
    )


with DAG(
    dag_id="gcs_cache_lifecycle_rule",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"bucket": ""},
) as lifecycle:
    EnsureCompilationCacheLifecycleOperator(
        task_id="ensure_rule",
        bucket="{{ params.bucket }}",
        prefix="pathways-scratch/shared/compilation_cache/",
        age_days=14,
    )


with DAG(
    dag_id="gcs_cleanup_templated_values",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"bucket": "", "older_than": "7d", "budget": "1GiB"},
) as templated_values:
    CleanupCompilationCacheOperator(
        task_id="cleanup_cache",
        bucket="{{ params.bucket }}",
        older_than="{{ params.older_than }}",
        max_cache_bytes="{{ params.budget }}",
    )
