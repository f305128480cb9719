"""Hook for PathwaysJobs and their JobSets, with ``a_*`` async twins for triggers."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Collection, Mapping
from functools import cached_property
from typing import Any, TypeVar

import yaml
from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
from kubernetes.client import ApiException
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from airflow_provider_pathways.gke.job_objects import (
    DEFAULT_STATUS_OPTIONS,
    FAILURE_LOG_LINES,
    StatusOptions,
    details_needed,
    job_events,
    job_selector,
    log_pods,
    log_request,
    own_workload_name,
    owned_by_jobset,
    the_job_objects,
    watched_resources,
)
from airflow_provider_pathways.gke.resources import (
    JOBSET,
    KUEUE_WORKLOAD,
    CustomResource,
    JobKind,
)
from airflow_provider_pathways.gke.status import PathwaysJobStatus
from airflow_provider_pathways.gke.summary import summarize
from airflow_provider_pathways.hooks.kubernetes_clients import (
    SHARED_CLIENTS,
    ClientPool,
    PathwaysAsyncKubernetesHook,
)
from airflow_provider_pathways.hooks.kubernetes_errors import credentials_refused, is_transient, retry_after
from airflow_provider_pathways.hooks.kubernetes_google import GkeTarget, sync_api_client
from airflow_provider_pathways.hooks.kubernetes_watch import JobWatch, Observed
from airflow_provider_pathways.transient import (
    DEFAULT_OUTAGE_TOLERANCE,
    CallRetry,
    OutageWindow,
    describe_error,
)

# Server-side timeout of one watch request; a healthy wait costs one request per period.
DEFAULT_WATCH_TIMEOUT_SECONDS = 900
_RAISE = object()
T = TypeVar("T")


def _delete_options(preconditions: Mapping[str, str] | None) -> dict[str, Any]:
    return {"body": {"preconditions": dict(preconditions)}} if preconditions else {}  # DeleteOptions


class PathwaysJobHook(KubernetesHook):
    """
    Create, follow and delete PathwaysJobs (or plain JobSets) through a Kubernetes connection.

    Uses the cncf-kubernetes connection (``kubernetes_conn_id``) unchanged, or, when it names
    ``gcp_conn_id``, reaches the GKE cluster it names with that Google identity
    (:mod:`~airflow_provider_pathways.hooks.kubernetes_google`). Sync methods serve operators and
    poke-mode sensors; each has an ``a_*`` twin for triggers that never blocks.
    """

    conn_type = "pathways_gke"
    hook_name = "Pathways on GKE"
    call_retry = CallRetry()

    def __init__(
        self,
        kubernetes_conn_id: str | None = KubernetesHook.default_conn_name,
        *,
        cluster_context: str | None = None,
        config_file: str | None = None,
        in_cluster: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            kubernetes_conn_id=kubernetes_conn_id,
            cluster_context=cluster_context,
            config_file=config_file,
            in_cluster=in_cluster,
            **kwargs,
        )

    @classmethod
    def for_task(cls, task: Any) -> PathwaysJobHook:
        """The hook for a task with ``kubernetes_conn_id``, ``cluster_context``, ``config_file``..."""
        return cls(
            kubernetes_conn_id=task.kubernetes_conn_id,
            cluster_context=task.cluster_context,
            config_file=task.config_file,
            in_cluster=task.in_cluster,
        )

    def gke_target(self) -> GkeTarget | None:
        """The GKE cluster and Google identity of the connection; None for kubeconfig or in-cluster
        (also when the task gives ``config_file`` or ``in_cluster``, which win)."""
        if self.config_file or self.in_cluster:
            return None
        return GkeTarget.from_extras(self.conn_id, self.conn_extras)

    def get_conn(self) -> Any:
        """The Kubernetes API client: through the GKE API with a Google identity, or as the
        cncf-kubernetes hook builds it."""
        target = self.gke_target()
        if target is None:
            return super().get_conn()
        self._is_in_cluster = False
        return sync_api_client(target)

    @cached_property
    def async_hook(self) -> AsyncKubernetesHook:
        """The cncf-kubernetes async hook on the same connection (with Google identity, see
        :class:`PathwaysAsyncKubernetesHook`)."""
        config_dict = None
        if self.config_file:
            # The async hook reads kubeconfig paths only from the connection, not from config_file.
            with open(self.config_file) as config:
                config_dict = yaml.safe_load(config)
        return PathwaysAsyncKubernetesHook(
            kubernetes_conn_id=self.conn_id,
            cluster_context=self.cluster_context,
            config_dict=config_dict,
            in_cluster=self.in_cluster,
        )

    def console_location(self) -> tuple[str | None, str | None, str | None]:
        """(project, cluster, location) from the connection, for console links; None when unset."""
        return self._get_field("gcp_project"), self._get_field("gke_cluster"), self._get_field("gke_location")

    def resolve_namespace(self, namespace: str | None) -> str:
        """The given namespace, else the connection's, else ``default``."""
        return namespace or self.get_namespace() or self.DEFAULT_NAMESPACE

    def _log_retry(self, err: BaseException, delay: float) -> None:
        self.log.warning("Kubernetes API error (%s); retrying in %.1fs", describe_error(err), delay)

    def _call(self, fn: Callable[[], T], *, gone: Any = _RAISE, gone_on: Collection[int] = (404,)) -> T:
        """``fn()`` retried on 429 (after ``Retry-After``), 5xx and connection errors; ``gone``
        instead of an answer with a status in ``gone_on`` (404), when given."""
        try:
            return self.call_retry.call(
                fn, is_transient=is_transient, retry_after=retry_after, on_retry=self._log_retry
            )
        except ApiException as err:
            if err.status == 401:
                raise self._refused(self.conn_extras) from None
            if gone is _RAISE or err.status not in gone_on:
                raise
            return gone  # type: ignore[no-any-return]

    def _refused(self, extras: Mapping[str, Any]) -> Exception:
        """The error for a 401 answer, naming the connection (and its Google one, if it signs in so)."""
        google = None if self.config_file or self.in_cluster else extras.get("gcp_conn_id")
        return credentials_refused(self.conn_id, google)

    async def _a_refused(self) -> Exception:
        return self._refused(await self.async_hook.get_conn_extras())

    async def _a_call(
        self, fn: Callable[[], Awaitable[T]], *, gone: Any = _RAISE, gone_on: Collection[int] = (404,)
    ) -> T:
        """Async twin of :meth:`_call`."""
        try:
            return await self.call_retry.a_call(
                fn, is_transient=is_transient, retry_after=retry_after, on_retry=self._log_retry
            )
        except AsyncApiException as err:
            if err.status == 401:
                raise await self._a_refused() from None
            if gone is _RAISE or err.status not in gone_on:
                raise
            return gone  # type: ignore[no-any-return]

    # ---- sync API -------------------------------------------------------------------------

    def _to_dict(self, obj: Any) -> Any:
        return self.api_client.sanitize_for_serialization(obj)

    def create_job(self, manifest: Mapping[str, Any], namespace: str) -> dict[str, Any]:
        """Create the PathwaysJob or JobSet ``manifest``; raises :class:`ApiException` on 409."""
        resource = JobKind(manifest["kind"]).resource
        return self._call(
            lambda: self.custom_object_client.create_namespaced_custom_object(
                **resource.coordinates(namespace), body=dict(manifest)
            )
        )

    def get_object(self, resource: CustomResource, name: str, namespace: str) -> dict[str, Any] | None:
        """The custom object, or None when it does not exist."""
        return self._call(
            lambda: self.custom_object_client.get_namespaced_custom_object(
                **resource.object_coordinates(namespace, name)
            ),
            gone=None,
        )

    def delete_job(
        self,
        name: str,
        namespace: str,
        kind: JobKind = JobKind.PATHWAYS_JOB,
        preconditions: Mapping[str, str] | None = None,
    ) -> bool:
        """Delete the job and what it owns; False when already gone. With ``preconditions`` (``uid``,
        ``resourceVersion``) the API server refuses (409) to delete any other object."""
        answer = self._call(
            lambda: self.custom_object_client.delete_namespaced_custom_object(
                **kind.resource.object_coordinates(namespace, name),
                propagation_policy="Foreground",
                **_delete_options(preconditions),
            ),
            gone=None,
        )
        return answer is not None

    def wait_until_deleted(self, name: str, namespace: str, kind: JobKind, timeout: float) -> None:
        """Block until the job object is gone (its dependents go first with foreground deletion)."""
        deadline = time.monotonic() + timeout
        while self.get_object(kind.resource, name, namespace) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{kind.value} {namespace}/{name} still exists after {timeout}s")
            time.sleep(0.5)

    def list_pods(self, name: str, namespace: str, replicated_job: str | None = None) -> list[dict[str, Any]]:
        """Pods of the job's JobSet, optionally of one replicated job."""
        pods = self._call(
            lambda: self.core_v1_client.list_namespaced_pod(
                namespace, label_selector=job_selector(name, replicated_job)
            )
        )
        return self._to_dict(pods).get("items") or []

    def list_jobs(self, name: str, namespace: str) -> list[dict[str, Any]]:
        """The batch Jobs of the job's JobSet (they outlive their pods)."""
        jobs = self._call(
            lambda: self.batch_v1_client.list_namespaced_job(namespace, label_selector=job_selector(name))
        )
        return self._to_dict(jobs).get("items") or []

    def list_workloads(
        self, name: str, namespace: str, jobset: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Kueue Workloads owned by the JobSet; empty when Kueue is not installed.

        With the JobSet, its Workload is read by the name Kueue gives it (one GET); else listed."""
        own = own_workload_name(name, jobset)
        workload = self.get_object(KUEUE_WORKLOAD, own, namespace) if own else None
        if workload is not None:
            return [workload]
        listing = self._call(
            lambda: self.custom_object_client.list_namespaced_custom_object(
                **KUEUE_WORKLOAD.coordinates(namespace)
            ),
            gone={},
        )
        return [w for w in listing.get("items") or [] if owned_by_jobset(w, name)]

    def list_events(self, name: str, namespace: str) -> list[dict[str, Any]]:
        """Events about the job, its Jobs and its pods (they outlive the pods)."""
        events = self._call(lambda: self.core_v1_client.list_namespaced_event(namespace))
        return job_events(self._to_dict(events).get("items") or [], name)

    def read_main_container_log(
        self,
        name: str,
        namespace: str,
        *,
        options: StatusOptions = DEFAULT_STATUS_OPTIONS,
        tail_lines: int = 50,
    ) -> str:
        """Last lines of the user program's log (the head pod's main container); empty if none."""
        pods = self.list_pods(name, namespace, options.head_replicated_job)
        for pod_name in log_pods(pods, options.main_container):
            response = self._call(
                functools.partial(
                    self.core_v1_client.read_namespaced_pod_log,
                    **log_request(pod_name, namespace, options.main_container, tail_lines),
                ),
                gone=None,
                gone_on=(400, 404),
            )
            if response is not None:
                return response.data.decode(errors="replace")
        return ""

    def get_status(
        self, name: str, namespace: str, options: StatusOptions = DEFAULT_STATUS_OPTIONS
    ) -> PathwaysJobStatus:
        """Read the job (and, for a failure or suspension, its pods, Jobs and workloads)."""
        pathways_job = (
            self.get_object(options.kind.resource, name, namespace)
            if options.kind is JobKind.PATHWAYS_JOB
            else None
        )
        jobset = self.get_object(JOBSET, name, namespace)
        pathways_job, jobset = the_job_objects(options, pathways_job, jobset)
        status = self._summarize(name, namespace, options, pathways_job, jobset)
        plan = details_needed(status, jobset=jobset, pathways_job=pathways_job)
        detail: dict[str, Any] = {}
        if plan.objects:
            detail["pods"] = self.list_pods(name, namespace)
            detail["jobs"] = self.list_jobs(name, namespace)
            detail["workloads"] = self.list_workloads(name, namespace, jobset)
        if plan.events:
            detail["events"] = self.list_events(name, namespace)
        if plan.log:
            detail["log_tail"] = self.read_main_container_log(
                name, namespace, options=options, tail_lines=FAILURE_LOG_LINES
            )
        return self._summarize(name, namespace, options, pathways_job, jobset, **detail) if detail else status

    @staticmethod
    def _summarize(
        name: str,
        namespace: str,
        options: StatusOptions,
        pathways_job: Mapping[str, Any] | None,
        jobset: Mapping[str, Any] | None,
        **detail: Any,
    ) -> PathwaysJobStatus:
        return summarize(
            name=name,
            namespace=namespace,
            pathways_job=pathways_job,
            jobset=jobset,
            worker_replicated_job=options.worker_replicated_job,
            head_replicated_job=options.head_replicated_job,
            main_container=options.main_container,
            expect_pathways_job=options.kind is JobKind.PATHWAYS_JOB,
            **detail,
        )

    # ---- async twins ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def a_client(self) -> AsyncIterator[async_client.ApiClient]:
        """An async API client on the hook's connection, shared by every hook of this event loop
        with the same connection settings (a triggerer runs hundreds of triggers: one client, one
        TLS context and one connection pool serve them all); closed when its last user is done."""
        loop = asyncio.get_running_loop()
        key = (self.conn_id, self.cluster_context, self.config_file, self.in_cluster)
        pool = SHARED_CLIENTS.setdefault(loop, ClientPool())
        shared = await pool.acquire(key, self.async_hook)
        try:
            yield shared.client
        finally:
            await pool.release(key, shared)

    async def a_get_object(
        self, resource: CustomResource, name: str, namespace: str, api_client: async_client.ApiClient
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`get_object`, on ``api_client``."""
        return await self._a_call(
            lambda: async_client.CustomObjectsApi(api_client).get_namespaced_custom_object(
                **resource.object_coordinates(namespace, name)
            ),
            gone=None,
        )

    async def a_delete_job(
        self,
        name: str,
        namespace: str,
        kind: JobKind = JobKind.PATHWAYS_JOB,
        preconditions: Mapping[str, str] | None = None,
    ) -> bool:
        """Async twin of :meth:`delete_job`."""
        async with self.a_client() as api_client:
            answer = await self._a_call(
                lambda: async_client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
                    **kind.resource.object_coordinates(namespace, name),
                    propagation_policy="Foreground",
                    **_delete_options(preconditions),
                ),
                gone=None,
            )
        return answer is not None

    async def _a_detail(
        self, name: str, namespace: str, api_client: async_client.ApiClient, jobset: Mapping[str, Any] | None
    ) -> dict[str, list[Any]]:
        """Async twin of the pods, Jobs and Workloads :meth:`get_status` reads."""
        core = async_client.CoreV1Api(api_client)
        batch = async_client.BatchV1Api(api_client)
        pods = await self._a_call(
            lambda: core.list_namespaced_pod(namespace, label_selector=job_selector(name))
        )
        jobs = await self._a_call(
            lambda: batch.list_namespaced_job(namespace, label_selector=job_selector(name))
        )
        own = own_workload_name(name, jobset)
        workload = await self.a_get_object(KUEUE_WORKLOAD, own, namespace, api_client) if own else None
        if workload is not None:
            workloads = [workload]
        else:
            listing = await self._a_call(
                lambda: async_client.CustomObjectsApi(api_client).list_namespaced_custom_object(
                    **KUEUE_WORKLOAD.coordinates(namespace)
                ),
                gone={},
            )
            workloads = [w for w in listing.get("items") or [] if owned_by_jobset(w, name)]
        return {
            "pods": api_client.sanitize_for_serialization(pods).get("items") or [],
            "jobs": api_client.sanitize_for_serialization(jobs).get("items") or [],
            "workloads": workloads,
        }

    async def a_get_status(
        self, name: str, namespace: str, options: StatusOptions = DEFAULT_STATUS_OPTIONS
    ) -> PathwaysJobStatus:
        """Async twin of :meth:`get_status`."""
        async with self.a_client() as api_client:
            observed = Observed()
            for resource in watched_resources(options):
                observed.objects[resource.plural] = await self.a_get_object(
                    resource, name, namespace, api_client
                )
            return await self._a_status(name, namespace, options, observed, api_client)

    async def a_read_main_container_log(
        self,
        name: str,
        namespace: str,
        *,
        options: StatusOptions = DEFAULT_STATUS_OPTIONS,
        tail_lines: int = 50,
    ) -> str:
        """Async twin of :meth:`read_main_container_log`."""
        async with self.a_client() as api_client:
            core = async_client.CoreV1Api(api_client)
            pods = await self._a_call(
                lambda: core.list_namespaced_pod(
                    namespace, label_selector=job_selector(name, options.head_replicated_job)
                )
            )
            items = api_client.sanitize_for_serialization(pods).get("items") or []
            for pod_name in log_pods(items, options.main_container):
                response = await self._a_call(
                    functools.partial(
                        core.read_namespaced_pod_log,
                        **log_request(pod_name, namespace, options.main_container, tail_lines),
                    ),
                    gone=None,
                    gone_on=(400, 404),
                )
                if response is not None:
                    raw: bytes = await response.read()  # type: ignore[attr-defined]  # _preload_content=False
                    return raw.decode(errors="replace")
        return ""

    async def _a_status(
        self,
        name: str,
        namespace: str,
        options: StatusOptions,
        observed: Observed,
        api_client: async_client.ApiClient,
    ) -> PathwaysJobStatus:
        """The status from the objects last observed, reading the details it needs."""
        pathways_job = (
            observed.objects.get(options.kind.resource.plural)
            if options.kind is JobKind.PATHWAYS_JOB
            else None
        )
        jobset = observed.objects.get(JOBSET.plural)
        pathways_job, jobset = the_job_objects(options, pathways_job, jobset)
        status = self._summarize(name, namespace, options, pathways_job, jobset)
        plan = details_needed(status, jobset=jobset, pathways_job=pathways_job)
        detail: dict[str, Any] = {}
        if plan.objects:
            detail.update(await self._a_detail(name, namespace, api_client, jobset))
        if plan.events:
            core = async_client.CoreV1Api(api_client)
            events = await self._a_call(lambda: core.list_namespaced_event(namespace))
            detail["events"] = job_events(
                api_client.sanitize_for_serialization(events).get("items") or [], name
            )
        if plan.log:
            detail["log_tail"] = await self.a_read_main_container_log(
                name, namespace, options=options, tail_lines=FAILURE_LOG_LINES
            )
        return self._summarize(name, namespace, options, pathways_job, jobset, **detail) if detail else status

    async def a_watch_status(
        self,
        name: str,
        namespace: str,
        options: StatusOptions = DEFAULT_STATUS_OPTIONS,
        *,
        watch_timeout_seconds: int = DEFAULT_WATCH_TIMEOUT_SECONDS,
        outage_tolerance: float = DEFAULT_OUTAGE_TOLERANCE,
    ) -> AsyncGenerator[PathwaysJobStatus, None]:
        """
        Yield the job's status now and every time it changes, until it is terminal.

        Watches with ``resourceVersion`` (one long request per period, not a poll), resumes a
        dropped stream from the last version seen, re-lists when the server answers 410, and
        rides out an API server outage (connection errors, 429, 5xx) of up to
        ``outage_tolerance`` seconds; then raises :class:`OutageTooLong`.
        """
        async with self.a_client() as api_client:
            host = getattr(api_client.configuration, "host", "") or self.conn_id
            outage = OutageWindow(outage_tolerance, what=f"the Kubernetes API server at {host}", base=0.5)
            watch = JobWatch(self, api_client, name, namespace, options, watch_timeout_seconds)
            last: PathwaysJobStatus | None = None
            try:
                while True:
                    try:
                        if watch.needs_list:
                            await watch.relist()
                        status = await self._a_status(name, namespace, options, watch.observed, api_client)
                        if status != last:
                            last = status
                            yield status
                        if status.terminal:
                            return
                        await watch.next_change()
                    except Exception as err:
                        if isinstance(err, AsyncApiException) and err.status == 401:
                            raise await self._a_refused() from None
                        if not is_transient(err):
                            raise
                        if watch.reconnected:  # the last error was followed by a healthy stream
                            outage.recovered()
                        watch.reconnected = False
                        delay = outage.failed(err, describe_error(err))
                        if outage.failures == 1:
                            self.log.warning(
                                "Kubernetes API error (%s); retrying for up to %gs",
                                describe_error(err),
                                outage.tolerance,
                            )
                        watch.close_streams()
                        await asyncio.sleep(delay)
                        continue
                    lasted = outage.recovered()
                    if lasted is not None:
                        self.log.info("The Kubernetes API server answers again after %.0fs", lasted)
            finally:
                watch.close_streams()
