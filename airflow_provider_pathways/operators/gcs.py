"""Operators that free stale Pathways compilation-cache entries in GCS, or set a lifecycle rule.

Parse-time cheap: importing this module loads neither ``google.cloud`` nor ``google.auth``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowSkipException,
    BaseOperator,
    TriggerRule,
)

from airflow_provider_pathways.cache.criteria import CleanupCriteria
from airflow_provider_pathways.cache.lifecycle import check_age_days
from airflow_provider_pathways.cache.location import GcsLocation, scratch_location_for_bucket
from airflow_provider_pathways.cache.values import DEFAULT_MIN_AGE, check_count
from airflow_provider_pathways.hooks.google_credentials import DEFAULT_GCP_CONN_ID
from airflow_provider_pathways.operators.template_values import unrendered

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

    from airflow_provider_pathways.hooks.gcs import CompilationCacheHook

PATHWAYS_DIR_XCOM_KEY = "pathways_dir"
# The templated criteria: at parse time one that is still a template is checked once rendered; until
# then a value that passes stands in for it, so the others are checked by the same rules as at run time.
_STAND_INS: dict[str, Any] = {"older_than": timedelta(0), "max_cache_bytes": 0, "cache_prefixes": None}


class CleanupCompilationCacheOperator(BaseOperator):
    """
    Delete stale compilation-cache entries under a Pathways scratch location and report what went.

    Where (exactly one): ``scratch_location`` (``gs://...``), ``bucket`` (the Slurm scripts'
    ``gs://BUCKET/pathways-scratch/shared``) or ``pathways_dir_from_task`` (the ``pathways_dir`` an
    upstream ``PathwaysJobOperator`` pushed). What: entries last updated more than ``older_than``
    ago, and/or the oldest ones while the cache exceeds ``max_cache_bytes``. Only cache entries are
    touched: objects in ``compilation_cache/`` and ``jax_cache/`` folders (or ``cache_prefixes``),
    JAX ``-cache``/``-atime`` files only as whole pairs, nothing inside ``checkpoints/`` or
    ``tensorboard/``; each delete is conditioned on the generation seen when planning.

    Ages and sizes are checked here for values given directly, and after rendering (before any
    request) for templated ones: ages from 0 to 100 years, sizes from 0 to 1 EiB.

    Runs as a teardown by default (``trigger_rule="all_done"``): it runs even if training failed.
    The report (a dict) is the return value (XCom ``return_value``) and also pushed under
    ``cleanup_report``; a summary table goes to the task log. The task fails if deletes failed
    (``fail_on_errors``), after logging and pushing the report.

    :param scratch_location: ``gs://bucket/path`` to clean (templated).
    :param bucket: bucket name; cleans ``gs://BUCKET/pathways-scratch/shared`` (templated).
    :param pathways_dir_from_task: task id whose ``pathways_dir`` XCom gives the location (templated).
    :param older_than: age such as ``"7d"``, ``"36h"``, seconds or a timedelta (templated).
    :param max_cache_bytes: size budget such as ``"500GiB"`` or bytes; oldest go first (templated).
    :param dry_run: plan and report only, delete nothing.
    :param cache_prefixes: cache folders relative to the location instead of the defaults (templated).
    :param jax_pairs: delete complete JAX ``<key>-cache``/``<key>-atime`` pairs in cache folders
        (``False``: keep every JAX cache file).
    :param min_age: with a budget, never delete entries updated less than this ago.
    :param allow_bucket_root: allow a bucket root as location (cleans cache folders bucket-wide).
    :param allow_any_prefix: allow ``cache_prefixes`` whose names do not say "cache".
    :param max_workers: concurrent delete requests.
    :param batch_size: objects per JSON batch request (1 to 100; 1: one request per object).
    :param max_errors: stop after this many failed deletes.
    :param fail_on_errors: fail the task when some deletes failed.
    :param skip_if_no_location: with ``pathways_dir_from_task``, skip (instead of failing) when the
        task pushed no ``pathways_dir`` (e.g. it failed before creating the job).
    :param gcp_conn_id: Airflow Google connection (used if the google provider is installed).
    :param impersonation_chain: service account(s) to impersonate (templated).
    """

    template_fields: Sequence[str] = (
        "scratch_location",
        "bucket",
        "pathways_dir_from_task",
        "older_than",
        "max_cache_bytes",
        "cache_prefixes",
        "gcp_conn_id",
        "impersonation_chain",
    )
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        scratch_location: str | None = None,
        bucket: str | None = None,
        pathways_dir_from_task: str | None = None,
        older_than: str | timedelta | float | None = None,
        max_cache_bytes: str | int | None = None,
        dry_run: bool = False,
        cache_prefixes: Sequence[str] | None = None,
        jax_pairs: bool = True,
        min_age: str | timedelta | float = DEFAULT_MIN_AGE,
        allow_bucket_root: bool = False,
        allow_any_prefix: bool = False,
        max_workers: int = 32,
        batch_size: int = 100,
        max_errors: int = 100,
        fail_on_errors: bool = True,
        skip_if_no_location: bool = True,
        gcp_conn_id: str = DEFAULT_GCP_CONN_ID,
        impersonation_chain: str | Sequence[str] | None = None,
        trigger_rule: str = TriggerRule.ALL_DONE,
        **kwargs: Any,
    ) -> None:
        super().__init__(trigger_rule=trigger_rule, **kwargs)
        given = [
            n
            for n, v in (
                ("scratch_location", scratch_location),
                ("bucket", bucket),
                ("pathways_dir_from_task", pathways_dir_from_task),
            )
            if v
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of scratch_location (gs://...), bucket (uses the Slurm convention "
                "gs://BUCKET/pathways-scratch/shared) or pathways_dir_from_task (a task id); "
                f"got {given or 'none'}"
            )
        self.scratch_location = scratch_location
        self.bucket = bucket
        self.pathways_dir_from_task = pathways_dir_from_task
        self.older_than = older_than
        self.max_cache_bytes = max_cache_bytes
        # Not ``self.dry_run``: that would hide BaseOperator.dry_run().
        self.report_only = dry_run
        self.cache_prefixes = cache_prefixes
        self.jax_pairs = jax_pairs
        self.min_age = min_age
        self.allow_bucket_root = allow_bucket_root
        self.allow_any_prefix = allow_any_prefix
        self.max_workers = max_workers
        self.batch_size = batch_size
        self.max_errors = max_errors
        self.fail_on_errors = fail_on_errors
        self.skip_if_no_location = skip_if_no_location
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self._hook: CompilationCacheHook | None = None
        self._check_arguments(parse_time=True)

    def _check_arguments(self, *, parse_time: bool) -> tuple[CleanupCriteria, str | None]:
        """The criteria and the location (None: from ``pathways_dir_from_task``), checked by the
        cache package's rules. At parse time values still templates are skipped (stand-ins take
        their place, so the criteria returned then are for checking only)."""

        def later(value: object) -> bool:
            items = value if isinstance(value, (list, tuple)) else ()
            return parse_time and (unrendered(value) or any(unrendered(item) for item in items))

        def ready(value: object) -> bool:
            return value is not None and not later(value)

        check_count(self.max_workers, param="max_workers", low=1, high=256)
        check_count(self.batch_size, param="batch_size", low=1, high=100)
        check_count(self.max_errors, param="max_errors", low=1)
        # The criteria's fields are this operator's parameters and attributes, under the same names.
        values = {field.name: getattr(self, field.name) for field in fields(CleanupCriteria)}
        pending = {name: _STAND_INS[name] for name in _STAND_INS if later(values[name])}
        criteria = CleanupCriteria(**{**values, **pending})
        location: str | None = None
        if ready(self.scratch_location):
            location = GcsLocation.parse(self.scratch_location, param="scratch_location").url
        elif ready(self.bucket):
            location = scratch_location_for_bucket(self.bucket, param="bucket")
        if location is not None:
            criteria.selector(GcsLocation.parse(location))
        return criteria, location

    def _resolve_location(self, context: Context, location: str | None) -> str:
        if location is not None:
            return location
        task_id = self.pathways_dir_from_task
        value = context["ti"].xcom_pull(task_ids=task_id, key=PATHWAYS_DIR_XCOM_KEY)
        if not value:
            message = (
                f"pathways_dir_from_task={task_id!r}: that task pushed no {PATHWAYS_DIR_XCOM_KEY!r} XCom "
                "(it did not run, failed before creating the job, or its spec has no pathways_dir)"
            )
            if self.skip_if_no_location:
                raise AirflowSkipException(message + ": nothing to clean")
            raise AirflowException(message)
        return GcsLocation.parse(value, param=f"pathways_dir pushed by {task_id!r}").url

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_pathways.hooks.gcs import CompilationCacheHook

        criteria, known = self._check_arguments(parse_time=False)
        location = self._resolve_location(context, known)
        self._hook = hook = CompilationCacheHook(
            gcp_conn_id=self.gcp_conn_id,
            impersonation_chain=self.impersonation_chain,
            max_workers=self.max_workers,
            batch_size=self.batch_size,
        )
        report = hook.cleanup(location, criteria, dry_run=self.report_only, max_errors=self.max_errors)
        result = report.to_dict()
        self.log.info("%s", report.summary_table())
        if not report.dry_run:
            from airflow_provider_pathways import metrics

            tags = metrics.task_tags(context.get("ti"))
            metrics.emit(metrics.CACHE_BYTES_FREED, report.deleted_bytes, tags)
            metrics.emit(metrics.CACHE_OBJECTS_FREED, report.deleted_objects, tags)
        context["ti"].xcom_push(key="cleanup_report", value=result)
        if report.errors and self.fail_on_errors:
            samples = "; ".join(f"{s['object']}: {s['error']}" for s in report.error_samples[:3])
            raise AirflowException(
                f"{report.errors} cache objects could not be deleted ({samples}); "
                "the report is in XCom 'cleanup_report'"
            )
        return result

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.cancel()


class EnsureCompilationCacheLifecycleOperator(BaseOperator):
    """
    Make sure a bucket has one age-based delete rule for the compilation-cache prefix (idempotent).

    The alternative to running cleanups: GCS deletes cache objects older than ``age_days`` itself.
    Needs ``storage.buckets.get`` and ``storage.buckets.update`` on the bucket. Returns
    ``"added"``, ``"updated"`` or ``"unchanged"``.

    :param bucket: bucket name (templated).
    :param prefix: cache folder inside the bucket, e.g.
        ``pathways-scratch/shared/compilation_cache/`` (templated).
    :param age_days: delete objects this many days after their creation.
    """

    template_fields: Sequence[str] = ("bucket", "prefix", "gcp_conn_id", "impersonation_chain")

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str,
        age_days: int,
        allow_bucket_root: bool = False,
        allow_any_prefix: bool = False,
        gcp_conn_id: str = DEFAULT_GCP_CONN_ID,
        impersonation_chain: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_age_days(age_days)
        self.bucket = bucket
        self.prefix = prefix
        self.age_days = age_days
        self.allow_bucket_root = allow_bucket_root
        self.allow_any_prefix = allow_any_prefix
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain

    def execute(self, context: Context) -> str:
        from airflow_provider_pathways.hooks.gcs import CompilationCacheHook

        hook = CompilationCacheHook(
            gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
        )
        return hook.ensure_lifecycle_rule(
            self.bucket,
            self.prefix,
            self.age_days,
            allow_bucket_root=self.allow_bucket_root,
            allow_any_prefix=self.allow_any_prefix,
        )
