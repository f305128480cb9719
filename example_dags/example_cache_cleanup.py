"""Nightly maintenance of Pathways compilation caches in a team bucket.

Pathways with ``--enable_gcs_olm=false`` (the Slurm scripts' setting) never deletes old
compilation-cache entries. This DAG, every night:

1. reports what a cleanup of every scratch location under ``scratch_root`` would free (dry run);
2. deletes cache entries not used for ``older_than``, then the oldest ones while the caches
   exceed ``max_cache_bytes`` (newest kept). Only ``compilation_cache/`` and ``jax_cache/``
   folders are cleaned (JAX cache files only as whole ``-cache``/``-atime`` pairs); run outputs,
   checkpoints and TensorBoard logs that share the scratch locations are never touched.

The alternative without a cleanup task is a bucket lifecycle rule: ``example_cache_lifecycle_rule``
(run by hand; it needs permission to change the bucket's configuration).
For a single training run, put ``CleanupCompilationCacheOperator(pathways_dir_from_task="train", ...)``
after the ``PathwaysJobOperator`` as a teardown instead.

Trigger it by hand with a smaller ``older_than`` or another ``scratch_root`` to clean one location now.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param

from airflow_provider_pathways.operators.gcs import (
    CleanupCompilationCacheOperator,
    EnsureCompilationCacheLifecycleOperator,
)

with DAG(
    dag_id="example_cache_cleanup",
    schedule="0 3 * * *",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["pathways", "maintenance"],
    params={
        "scratch_root": Param(
            "gs://pathways-team-bucket/pathways-scratch",
            type="string",
            title="Scratch root",
            description="gs:// location whose compilation_cache/ and jax_cache/ folders are cleaned, "
            "at any depth (the Pathways scratch locations of the team).",
        ),
        "older_than": Param(
            "14d",
            type="string",
            title="Delete entries unused for",
            description="Age of the newest object of an entry, e.g. 14d or 12h.",
        ),
        "max_cache_bytes": Param(
            "2TiB",
            type="string",
            title="Cache budget",
            description="Then delete the oldest entries while the caches are larger than this, "
            "e.g. 2TiB (the newest are kept).",
        ),
    },
    doc_md=__doc__,
) as dag:
    # [START howto_operator_cleanup_compilation_cache_nightly]
    report = CleanupCompilationCacheOperator(
        task_id="report_stale_cache",
        scratch_location="{{ params.scratch_root }}",
        older_than="{{ params.older_than }}",
        max_cache_bytes="{{ params.max_cache_bytes }}",
        dry_run=True,
    )
    cleanup = CleanupCompilationCacheOperator(
        task_id="cleanup_stale_cache",
        scratch_location="{{ params.scratch_root }}",
        older_than="{{ params.older_than }}",
        max_cache_bytes="{{ params.max_cache_bytes }}",
    )
    report >> cleanup
    # [END howto_operator_cleanup_compilation_cache_nightly]

LIFECYCLE_DOC = """Keep a GCS lifecycle rule that deletes compilation-cache objects older than 30 days.

The rule Pathways creates itself with ``--enable_gcs_olm=true``: one ``Delete`` rule for the
``cache_prefix`` of ``bucket``. Idempotent: later runs leave the bucket as it is. It needs
``storage.buckets.get`` and ``storage.buckets.update`` on the bucket.

A rule counts age from when an object was created, not from when it was last used: use it for
Pathways' write-once ``compilation_cache/``, and ``example_cache_cleanup`` for JAX cache folders.
"""

with DAG(
    dag_id="example_cache_lifecycle_rule",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["pathways", "maintenance"],
    params={
        "bucket": Param(
            "pathways-team-bucket",
            type="string",
            title="Bucket",
            description="Name of the bucket (without gs://) that gets the lifecycle rule.",
        ),
        "cache_prefix": Param(
            "pathways-scratch/shared/compilation_cache/",
            type="string",
            title="Cache prefix",
            description="Object prefix the rule applies to: the compilation_cache/ folder of a "
            "scratch location.",
        ),
    },
    doc_md=LIFECYCLE_DOC,
) as lifecycle_dag:
    # [START howto_operator_ensure_compilation_cache_lifecycle]
    # Idempotent: run it as often as you like, the bucket keeps one rule for the prefix.
    EnsureCompilationCacheLifecycleOperator(
        task_id="ensure_lifecycle_rule",
        bucket="{{ params.bucket }}",
        prefix="{{ params.cache_prefix }}",
        age_days=30,
    )
    # [END howto_operator_ensure_compilation_cache_lifecycle]
