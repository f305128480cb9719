"""Airflow hook that frees stale Pathways/JAX compilation-cache entries in GCS, safely and concurrently.

The Airflow face only: credentials (Airflow connection or Application Default Credentials),
argument checks and logging. What is cache, plans, deletes and accounting live in
:mod:`airflow_provider_pathways.cache`. Google client libraries are imported inside methods only,
so importing this module (e.g. at DAG parse time through the operator) loads neither
``google.cloud`` nor ``google.auth``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseHook

from airflow_provider_pathways import __version__
from airflow_provider_pathways.cache.criteria import CleanupCriteria
from airflow_provider_pathways.cache.lifecycle import apply_age_rule, check_rule_arguments, ensure_age_rule
from airflow_provider_pathways.cache.location import GcsLocation
from airflow_provider_pathways.cache.plan import CleanupPlan, PlanBuilder, encode_entry
from airflow_provider_pathways.cache.report import CleanupReport
from airflow_provider_pathways.cache.selection import CacheEntry
from airflow_provider_pathways.cache.storage import EMULATOR_ENV, CacheCleanupError
from airflow_provider_pathways.cache.values import check_count
from airflow_provider_pathways.hooks.google_credentials import (
    ADC_SOURCES,
    DEFAULT_GCP_CONN_ID,
    NoDefaultCredentials,
    application_default_credentials,
)
from airflow_provider_pathways.transient import CallRetry

if TYPE_CHECKING:
    from google.auth.credentials import Credentials
    from google.cloud.storage import Client

    from airflow_provider_pathways.cache.report import Tally
    from airflow_provider_pathways.cache.storage import StorageApi

__all__ = ["DEFAULT_GCP_CONN_ID", "CompilationCacheHook", "ensure_age_rule"]

STORAGE_SCOPE = "https://www.googleapis.com/auth/devstorage.full_control"
MAX_WORKERS = 256
MAX_LIST_WORKERS = 32
_USER_AGENT = f"airflow-provider-pathways/{__version__} compilation-cache-cleanup"


class CompilationCacheHook(BaseHook):
    """
    Plan and delete stale compilation-cache entries under a GCS scratch location.

    Credentials: with ``apache-airflow-providers-google`` installed, from the Airflow Google
    connection ``gcp_conn_id`` (with ``impersonation_chain``); otherwise, or when the default
    connection does not exist, Application Default Credentials (impersonating the last account of
    ``impersonation_chain`` if given). With ``STORAGE_EMULATOR_HOST`` set and no connection, anonymous
    credentials against that emulator.

    :param gcp_conn_id: Airflow connection of type ``google_cloud_platform``.
    :param impersonation_chain: service account (or chain, last one impersonated) to act as.
    :param project_id: project for the client (listing and deleting do not need one).
    :param user_project: project billed for requester-pays buckets.
    :param max_workers: concurrent requests (GCS starts a bucket at about 1000 writes/s).
    :param batch_size: objects per JSON batch request (1 to 100; 1: one request per object). If
        the server takes no batches, the hook falls back to one request per object.
    :param list_page_size: objects asked per listing page (``maxResults``); by default none is
        asked and the server answers its own page size (GCS: 1000, its maximum). Answers are read
        as they arrive and handed on 1000 objects at a time, so memory does not grow with the page.
    :param list_workers: listings at once: each cache prefix is listed apart, and a listing that
        takes more than one page is split by folder (the folders further on, named by one listing
        with the ``/`` delimiter, are listed apart); see :mod:`airflow_provider_pathways.cache.listing`.
    :param timeout: seconds to connect, and to wait for each answer.
    :param max_attempts: attempts per request on a connection error or a status worth a retry
        (:data:`airflow_provider_pathways.transient.TRANSIENT_HTTP_STATUSES`).
    :param retry_initial_delay: first backoff delay in seconds (doubles, with jitter: each delay is
        drawn between 0 and that).
    :param retry_max_delay: longest backoff delay in seconds.
    :param progress_every: log progress every this many processed objects.
    """

    conn_name_attr = "gcp_conn_id"
    default_conn_name = DEFAULT_GCP_CONN_ID
    conn_type = "google_cloud_platform"
    hook_name = "Pathways compilation cache (GCS)"

    def __init__(
        self,
        gcp_conn_id: str = DEFAULT_GCP_CONN_ID,
        impersonation_chain: str | Sequence[str] | None = None,
        *,
        project_id: str | None = None,
        user_project: str | None = None,
        max_workers: int = 32,
        batch_size: int = 100,
        list_page_size: int | None = None,
        list_workers: int = 4,
        timeout: float = 60.0,
        max_attempts: int = 6,
        retry_initial_delay: float = 0.5,
        retry_max_delay: float = 16.0,
        progress_every: int = 5000,
    ) -> None:
        super().__init__()
        check_count(max_workers, param="max_workers", low=1, high=MAX_WORKERS)
        check_count(batch_size, param="batch_size", low=1, high=100)
        if list_page_size is not None:
            check_count(list_page_size, param="list_page_size", low=1)
        check_count(list_workers, param="list_workers", low=1, high=MAX_LIST_WORKERS)
        check_count(max_attempts, param="max_attempts", low=1)
        check_count(progress_every, param="progress_every", low=1)
        if not timeout > 0 or not retry_initial_delay >= 0 or not retry_max_delay >= 0:
            raise ValueError("timeout must be positive and retry delays zero or more")
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.project_id = project_id
        self.user_project = user_project
        self.max_workers = max_workers
        self.batch_size = batch_size
        self.list_page_size = list_page_size
        self.list_workers = list_workers
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.retry_initial_delay = retry_initial_delay
        self.retry_max_delay = retry_max_delay
        self.progress_every = progress_every
        self._client: Client | None = None
        self._credentials: tuple[Credentials, str | None] | None = None
        self._cancel = threading.Event()

    # ----------------------------------------------------------------------------------------
    # Credentials and clients
    # ----------------------------------------------------------------------------------------

    def get_credentials_and_project(self) -> tuple[Credentials, str | None]:
        """Credentials and project, from the Airflow connection, the emulator or ADC (cached)."""
        if self._credentials is None:
            self._credentials = self._find_credentials()
        return self._credentials

    def _find_credentials(self) -> tuple[Credentials, str | None]:
        base = self._google_base_hook()
        if base is not None:
            credentials, project = base.get_credentials_and_project_id()
            return credentials, self.project_id or project
        if os.environ.get(EMULATOR_ENV):
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials(), self.project_id
        try:
            credentials, project = application_default_credentials(STORAGE_SCOPE, self.impersonation_chain)
        except NoDefaultCredentials:
            raise CacheCleanupError(
                "no Google credentials: install apache-airflow-providers-google and create the "
                f"connection {self.gcp_conn_id!r}, or set up Application Default Credentials ({ADC_SOURCES})"
            ) from None
        return credentials, self.project_id or project

    def _google_base_hook(self) -> Any | None:
        """A ``GoogleBaseHook`` for ``gcp_conn_id`` if the google provider is installed, else None."""
        try:
            from airflow.providers.google.common.hooks.base_google import GoogleBaseHook
        except ImportError:
            return None
        from airflow.providers.common.compat.sdk import AirflowNotFoundException

        try:
            return GoogleBaseHook(gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain)
        except AirflowNotFoundException:
            if self.gcp_conn_id == DEFAULT_GCP_CONN_ID:
                self.log.info("No connection %r: using Application Default Credentials", self.gcp_conn_id)
                return None
            raise CacheCleanupError(
                f"gcp_conn_id={self.gcp_conn_id!r}: no such Airflow connection; create it, or leave "
                f"gcp_conn_id at {DEFAULT_GCP_CONN_ID!r} to fall back to Application Default Credentials"
            ) from None

    def get_conn(self) -> Client:
        """The ``google.cloud.storage.Client`` (cached; used for bucket lifecycle rules)."""
        if self._client is None:
            from google.cloud import storage

            credentials, project = self.get_credentials_and_project()
            self._client = storage.Client(project=project, credentials=credentials)
        return self._client

    def _call_retry(self) -> CallRetry:
        """How each GCS request is retried (the package's rule, with this hook's attempts and delays)."""
        return CallRetry(
            attempts=self.max_attempts, base=self.retry_initial_delay, cap=self.retry_max_delay, jitter=True
        )

    def storage_api(
        self, pool_size: int | None = None, on_retry: Callable[[], None] | None = None
    ) -> StorageApi:
        """A JSON API client for listing and deleting (google-auth's pooled urllib3 transport)."""
        from airflow_provider_pathways.cache.storage import RetryPolicy, StorageApi, storage_endpoint

        credentials, _ = self.get_credentials_and_project()
        policy = RetryPolicy(
            self._call_retry(),
            cancelled=self._cancel.is_set,
            on_retry=on_retry or (lambda: None),
        )
        return StorageApi(
            credentials,
            endpoint=storage_endpoint(),
            pool_size=pool_size or self.max_workers + self.list_workers + 1,
            timeout=self.timeout,
            user_project=self.user_project,
            user_agent=_USER_AGENT,
            policy=policy,
        )

    # ----------------------------------------------------------------------------------------
    # Planning
    # ----------------------------------------------------------------------------------------

    def plan(self, location: str, criteria: CleanupCriteria) -> CleanupPlan:
        """
        List the location (split by folder when long, ``list_workers`` listings at once) and plan
        which cache entries go by the ``criteria``
        (:class:`~airflow_provider_pathways.cache.criteria.CleanupCriteria`); deletes nothing.

        Only cache entries count (see :class:`~airflow_provider_pathways.cache.selection.CacheSelector`):
        objects inside a ``compilation_cache/`` or ``jax_cache/`` folder (at any depth) or, with
        ``cache_prefixes``, inside those folders (relative to the location); never inside
        ``checkpoints/``, ``tensorboard/`` and the like; JAX ``<key>-cache``/``<key>-atime`` files
        only as complete pairs. An entry goes if it was last updated more than ``older_than`` ago,
        and then, while the cache exceeds ``max_cache_bytes``, oldest first (never one updated
        less than ``min_age`` ago). The plan keeps each object's generation and lives on disk: use
        it as a context manager (or ``close()`` it).

        :raises ValueError: a bad location, or a cache prefix that breaks a safety rule there, before
            any request.
        :raises BucketNotFoundError: the bucket does not exist (or is not visible).
        """
        builder = PlanBuilder(GcsLocation.parse(location, param="location"), criteria)
        started = time.monotonic()
        api = self.storage_api(pool_size=self.list_workers + 1)
        workdir = Path(tempfile.mkdtemp(prefix="pathways-cache-plan-"))
        spill = workdir / "plan.jsonl"
        try:
            with open(spill, "w", encoding="utf-8") as out:
                for entry in self._select(api, builder):
                    out.write(encode_entry(entry))
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        finally:
            api.close()
        summary = builder.summary
        self.log.info(
            "Planned %s: %d of %d listed objects are cache (%d bytes); %d objects (%d bytes) to delete; "
            "listing took %.1fs",
            summary.location,
            summary.cache_objects,
            summary.listed_objects,
            summary.cache_bytes,
            summary.planned_objects,
            summary.planned_bytes,
            time.monotonic() - started,
        )
        return CleanupPlan(builder.selector.location, summary, spill, workdir)

    def _select(self, api: StorageApi, builder: PlanBuilder) -> Iterator[CacheEntry]:
        """The entries to delete, as the listings (``list_workers`` at once) find them."""
        from airflow_provider_pathways.cache.listing import LocationListing

        listing = LocationListing(
            api, builder.selector, page_size=self.list_page_size, workers=self.list_workers
        )
        return builder.select_entries(listing.entries(), listing.stats)

    # ----------------------------------------------------------------------------------------
    # Deleting
    # ----------------------------------------------------------------------------------------

    def cleanup(
        self, location: str, criteria: CleanupCriteria, *, dry_run: bool = False, max_errors: int = 100
    ) -> CleanupReport:
        """
        Plan and delete in one pass: deletes start while the listing goes on (same selection as
        :meth:`plan`, each delete conditioned on the generation just listed). ``dry_run`` lists and
        reports the plan but deletes nothing.
        """
        builder = PlanBuilder(GcsLocation.parse(location, param="location"), criteria)
        check_count(max_errors, param="max_errors", low=1)
        report = CleanupReport(plan=builder.summary, dry_run=dry_run)
        tally = self._tally(report, max_errors)
        api = self.storage_api(on_retry=tally.retried)
        entries = self._select(api, builder)
        if dry_run:
            started = time.monotonic()
            try:
                for _ in entries:
                    pass
            finally:
                api.close()
            report.duration_seconds = round(time.monotonic() - started, 3)
            self._log_dry_run(report)
            return report
        self._run_deletes(api, builder.selector.location, entries, tally)
        return report

    def cancel(self) -> None:
        """Stop a running delete after the requests in flight (e.g. from ``on_kill``)."""
        self._cancel.set()

    def delete(self, plan: CleanupPlan, *, dry_run: bool = False, max_errors: int = 100) -> CleanupReport:
        """
        Delete a plan's entries with ``max_workers`` concurrent conditional requests.

        Each delete carries ``ifGenerationMatch`` with the generation seen when planning, so an
        object rewritten since survives (counted as changed). A 404 counts as already gone, unless
        an earlier attempt of this run was sent and left unanswered (then it counts as deleted).
        JAX pairs go ``-atime`` first: if it changed, the pair is kept; if the ``-cache`` object
        then cannot go, the ``-atime`` is written back so the pair stays whole. Connection errors
        and the statuses of ``TRANSIENT_HTTP_STATUSES`` are retried with exponential backoff.
        Stops after ``max_errors`` failed objects. ``dry_run`` sends no request and reports the
        plan.
        """
        check_count(max_errors, param="max_errors", low=1)
        report = CleanupReport(plan=plan.summary, dry_run=dry_run)
        if dry_run:
            self._log_dry_run(report)
            return report
        tally = self._tally(report, max_errors)
        self._run_deletes(self.storage_api(on_retry=tally.retried), plan.location, plan.entries(), tally)
        return report

    def _log_dry_run(self, report: CleanupReport) -> None:
        summary = report.plan
        self.log.info(
            "Dry run: would delete %d objects (%d bytes) in %d entries; first: %s",
            summary.planned_objects,
            summary.planned_bytes,
            summary.planned_entries,
            ", ".join(summary.planned_sample) or "-",
        )

    def _tally(self, report: CleanupReport, max_errors: int) -> Tally:
        from airflow_provider_pathways.cache.report import Tally

        return Tally(report, max_errors=max_errors, progress_every=self.progress_every, log=self.log)

    def _run_deletes(
        self, api: StorageApi, location: GcsLocation, entries: Iterator[CacheEntry], tally: Tally
    ) -> None:
        from airflow_provider_pathways.cache.deleter import DeleteRun

        DeleteRun(
            api,
            location,
            entries,
            tally,
            workers=self.max_workers,
            batch_size=self.batch_size,
            cancelled=self._cancel.is_set,
            log=self.log,
        ).execute()

    def ensure_lifecycle_rule(
        self,
        bucket: str,
        prefix: str,
        age_days: int,
        *,
        allow_bucket_root: bool = False,
        allow_any_prefix: bool = False,
    ) -> str:
        """
        Make sure ``bucket`` has one age-based ``Delete`` rule for ``prefix``; idempotent.

        Returns ``"added"``, ``"updated"`` (the age changed; duplicates collapse into one) or
        ``"unchanged"``. Other rules are kept. The update is conditioned on the bucket's
        metageneration and re-read to confirm. The prefix must be a cache folder, as for :meth:`plan`.
        """
        name, clean = check_rule_arguments(
            bucket, prefix, age_days, allow_bucket_root=allow_bucket_root, allow_any_prefix=allow_any_prefix
        )
        return apply_age_rule(
            self.get_conn(),
            name,
            clean,
            age_days,
            timeout=self.timeout,
            retry=self._call_retry(),
            log=self.log,
        )
