"""Hook for PathwaysJobs and their JobSets, with ``a_*`` async twins for triggers."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
import urllib3
import yaml
from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
from kubernetes.client import ApiException
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from airflow_provider_pathways.gke.resources import (
    JOBSET,
    KUEUE_WORKLOAD,
    CustomResource,
    JobKind,
    kueue_workload_name,
)
from airflow_provider_pathways.gke.status import (
    HEAD_REPLICATED_JOB,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
    WORKER_REPLICATED_JOB,
    PathwaysJobStatus,
    Phase,
    summarize,
)
from airflow_provider_pathways.transient import (
    DEFAULT_OUTAGE_TOLERANCE,
    TRANSIENT_HTTP_STATUSES,
    CallRetry,
    OutageWindow,
    describe_error,
    parse_retry_after,
)

if TYPE_CHECKING:
    from aiohttp import ClientResponse

# Server-side timeout of one watch request; a healthy wait costs one request per period.
DEFAULT_WATCH_TIMEOUT_SECONDS = 900
T = TypeVar("T")


def is_transient(err: BaseException) -> bool:
    """A Kubernetes API error worth retrying: 429, a 5xx, or no answer at all; never a 4xx."""
    if isinstance(err, (ApiException, AsyncApiException)):
        return err.status in TRANSIENT_HTTP_STATUSES or not err.status
    return isinstance(
        err, (urllib3.exceptions.HTTPError, aiohttp.ClientError, ConnectionError, TimeoutError, OSError)
    )


def retry_after(err: BaseException) -> float | None:
    """The ``Retry-After`` an API server sent with a 429 or 503, in seconds."""
    headers = getattr(err, "headers", None)
    return parse_retry_after(headers.get("Retry-After")) if headers else None


@dataclass(frozen=True)
class StatusOptions:
    """How to read a job's status: its kind and the names inside its JobSet."""

    kind: JobKind = JobKind.PATHWAYS_JOB
    worker_replicated_job: str = WORKER_REPLICATED_JOB
    head_replicated_job: str = HEAD_REPLICATED_JOB
    main_container: str = "main"


@dataclass
class _Observed:
    """Objects last seen for one job, and the resourceVersion to watch from."""

    objects: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


def _selector(name: str, replicated_job: str | None = None) -> str:
    selector = f"{JOBSET_NAME_LABEL}={name}"
    return f"{selector},{REPLICATED_JOB_LABEL}={replicated_job}" if replicated_job else selector


def _owned_by(obj: Mapping[str, Any], name: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("name") == name and ref.get("kind") == JOBSET.kind for ref in refs)


def _needs_detail(status: PathwaysJobStatus) -> bool:
    return status.phase in (Phase.FAILED, Phase.SUSPENDED, Phase.QUEUED)


def _job_events(items: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Events about the job itself or its Jobs and pods (``<name>-...``)."""
    return [
        e
        for e in items
        if (e.get("involvedObject") or {}).get("name") == name
        or str((e.get("involvedObject") or {}).get("name", "")).startswith(f"{name}-")
    ]


# Lines of the program's log read when the job failed (to see a DATA_LOSS from a lost slice).
_FAILURE_LOG_LINES = 50


class PathwaysJobHook(KubernetesHook):
    """
    Create, follow and delete PathwaysJobs (or plain JobSets) through a Kubernetes connection.

    Uses the cncf-kubernetes connection (``kubernetes_conn_id``) unchanged. Sync methods serve
    operators and poke-mode sensors; each has an ``a_*`` twin for triggers that never blocks.
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
        """The hook for an operator, sensor or trigger with ``kubernetes_conn_id``,
        ``cluster_context``, ``config_file`` and ``in_cluster`` attributes."""
        return cls(
            kubernetes_conn_id=task.kubernetes_conn_id,
            cluster_context=task.cluster_context,
            config_file=task.config_file,
            in_cluster=task.in_cluster,
        )

    @cached_property
    def async_hook(self) -> AsyncKubernetesHook:
        """The cncf-kubernetes async hook on the same connection."""
        config_dict = None
        if self.config_file:
            # The async hook reads kubeconfig paths only from the connection, not from config_file.
            with open(self.config_file) as config:
                config_dict = yaml.safe_load(config)
        return AsyncKubernetesHook(
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

    def _call(self, fn: Callable[[], T]) -> T:
        """``fn()`` retried on 429 (after ``Retry-After``), 5xx and connection errors."""
        return self.call_retry.call(
            fn, is_transient=is_transient, retry_after=retry_after, on_retry=self._log_retry
        )

    async def _a_call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Async twin of :meth:`_call`."""
        return await self.call_retry.a_call(
            fn, is_transient=is_transient, retry_after=retry_after, on_retry=self._log_retry
        )

    # ---- sync API -------------------------------------------------------------------------

    def _to_dict(self, obj: Any) -> Any:
        return self.api_client.sanitize_for_serialization(obj)

    def create_job(self, manifest: Mapping[str, Any], namespace: str) -> dict[str, Any]:
        """Create the PathwaysJob or JobSet ``manifest``; raises :class:`ApiException` on 409."""
        resource = JobKind(manifest["kind"]).resource
        return self._call(
            lambda: self.custom_object_client.create_namespaced_custom_object(
                group=resource.group,
                version=resource.version,
                namespace=namespace,
                plural=resource.plural,
                body=dict(manifest),
            )
        )

    def get_object(self, resource: CustomResource, name: str, namespace: str) -> dict[str, Any] | None:
        """The custom object, or None when it does not exist."""
        try:
            return self._call(
                lambda: self.custom_object_client.get_namespaced_custom_object(
                    group=resource.group,
                    version=resource.version,
                    namespace=namespace,
                    plural=resource.plural,
                    name=name,
                )
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def delete_job(self, name: str, namespace: str, kind: JobKind = JobKind.PATHWAYS_JOB) -> bool:
        """Delete the job and everything it owns; False when it was already gone."""
        resource = kind.resource
        try:
            self._call(
                lambda: self.custom_object_client.delete_namespaced_custom_object(
                    group=resource.group,
                    version=resource.version,
                    namespace=namespace,
                    plural=resource.plural,
                    name=name,
                    propagation_policy="Foreground",
                )
            )
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

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
                namespace, label_selector=_selector(name, replicated_job)
            )
        )
        return self._to_dict(pods).get("items") or []

    def list_jobs(self, name: str, namespace: str) -> list[dict[str, Any]]:
        """The batch Jobs of the job's JobSet (they outlive their pods)."""
        jobs = self._call(
            lambda: self.batch_v1_client.list_namespaced_job(namespace, label_selector=_selector(name))
        )
        return self._to_dict(jobs).get("items") or []

    def list_workloads(
        self, name: str, namespace: str, jobset: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Kueue Workloads owned by the JobSet; empty when Kueue is not installed.

        With the JobSet, its Workload is read by the name Kueue gives it (one GET); else listed."""
        uid = ((jobset or {}).get("metadata") or {}).get("uid")
        if uid:
            workload = self.get_object(KUEUE_WORKLOAD, kueue_workload_name(name, uid), namespace)
            if workload is not None:
                return [workload]
        try:
            listing = self._call(
                lambda: self.custom_object_client.list_namespaced_custom_object(
                    group=KUEUE_WORKLOAD.group,
                    version=KUEUE_WORKLOAD.version,
                    namespace=namespace,
                    plural=KUEUE_WORKLOAD.plural,
                )
            )
        except ApiException as err:
            if err.status == 404:
                return []
            raise
        return [w for w in listing.get("items") or [] if _owned_by(w, name)]

    def list_events(self, name: str, namespace: str) -> list[dict[str, Any]]:
        """Events about the job, its Jobs and its pods (they outlive the pods)."""
        events = self._call(lambda: self.core_v1_client.list_namespaced_event(namespace))
        return _job_events(self._to_dict(events).get("items") or [], name)

    def read_main_container_log(
        self, name: str, namespace: str, *, options: StatusOptions = StatusOptions(), tail_lines: int = 50
    ) -> str:
        """Last lines of the user program's log (the head pod's main container); empty if none."""
        pods = self.list_pods(name, namespace, options.head_replicated_job)
        for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True):
            containers = {c.get("name") for c in (pod.get("spec") or {}).get("containers") or []}
            if options.main_container not in containers:
                continue
            pod_name = pod["metadata"]["name"]
            try:
                response = self._call(
                    functools.partial(
                        self.core_v1_client.read_namespaced_pod_log,
                        name=pod_name,
                        namespace=namespace,
                        container=options.main_container,
                        tail_lines=tail_lines,
                        _preload_content=False,
                    )
                )
                return response.data.decode(errors="replace")
            except ApiException as err:
                if err.status in (400, 404):
                    continue
                raise
        return ""

    def get_status(
        self, name: str, namespace: str, options: StatusOptions = StatusOptions()
    ) -> PathwaysJobStatus:
        """Read the job (and, for a failure or suspension, its pods, Jobs and workloads)."""
        pathways_job = (
            self.get_object(options.kind.resource, name, namespace)
            if options.kind is JobKind.PATHWAYS_JOB
            else None
        )
        jobset = self.get_object(JOBSET, name, namespace)
        status = self._summarize(name, namespace, options, pathways_job, jobset)
        failed = status.phase is Phase.FAILED
        if _needs_detail(status) and jobset is not None:
            status = self._summarize(
                name,
                namespace,
                options,
                pathways_job,
                jobset,
                pods=self.list_pods(name, namespace),
                jobs=self.list_jobs(name, namespace),
                workloads=self.list_workloads(name, namespace, jobset),
                events=self.list_events(name, namespace) if failed else [],
                log_tail=self.read_main_container_log(
                    name, namespace, options=options, tail_lines=_FAILURE_LOG_LINES
                )
                if failed
                else None,
            )
        elif failed and pathways_job is not None:
            status = self._summarize(
                name, namespace, options, pathways_job, jobset, events=self.list_events(name, namespace)
            )
        return status

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
        pool = _SHARED_CLIENTS.setdefault(loop, _ClientPool())
        shared = await pool.acquire(key, self.async_hook)
        try:
            yield shared.client
        finally:
            await pool.release(key, shared)

    async def a_get_object(
        self, resource: CustomResource, name: str, namespace: str, api_client: async_client.ApiClient
    ) -> dict[str, Any] | None:
        try:
            return await self._a_call(
                lambda: async_client.CustomObjectsApi(api_client).get_namespaced_custom_object(
                    group=resource.group,
                    version=resource.version,
                    namespace=namespace,
                    plural=resource.plural,
                    name=name,
                )
            )
        except AsyncApiException as err:
            if err.status == 404:
                return None
            raise

    async def a_delete_job(self, name: str, namespace: str, kind: JobKind = JobKind.PATHWAYS_JOB) -> bool:
        """Async twin of :meth:`delete_job`."""
        resource = kind.resource
        async with self.a_client() as api_client:
            try:
                await self._a_call(
                    lambda: async_client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
                        group=resource.group,
                        version=resource.version,
                        namespace=namespace,
                        plural=resource.plural,
                        name=name,
                        propagation_policy="Foreground",
                    )
                )
            except AsyncApiException as err:
                if err.status == 404:
                    return False
                raise
        return True

    async def _a_detail(
        self,
        name: str,
        namespace: str,
        api_client: async_client.ApiClient,
        jobset: Mapping[str, Any] | None = None,
    ) -> dict[str, list[Any]]:
        core = async_client.CoreV1Api(api_client)
        batch = async_client.BatchV1Api(api_client)
        pods = await self._a_call(lambda: core.list_namespaced_pod(namespace, label_selector=_selector(name)))
        jobs = await self._a_call(
            lambda: batch.list_namespaced_job(namespace, label_selector=_selector(name))
        )
        uid = ((jobset or {}).get("metadata") or {}).get("uid")
        own = (
            await self.a_get_object(KUEUE_WORKLOAD, kueue_workload_name(name, uid), namespace, api_client)
            if uid
            else None
        )
        try:
            listing = (
                {"items": [own]}
                if own is not None
                else await self._a_call(
                    lambda: async_client.CustomObjectsApi(api_client).list_namespaced_custom_object(
                        group=KUEUE_WORKLOAD.group,
                        version=KUEUE_WORKLOAD.version,
                        namespace=namespace,
                        plural=KUEUE_WORKLOAD.plural,
                    )
                )
            )
            workloads = [w for w in listing.get("items") or [] if _owned_by(w, name)]
        except AsyncApiException as err:
            if err.status != 404:
                raise
            workloads = []
        return {
            "pods": api_client.sanitize_for_serialization(pods).get("items") or [],
            "jobs": api_client.sanitize_for_serialization(jobs).get("items") or [],
            "workloads": workloads,
        }

    async def a_get_status(
        self, name: str, namespace: str, options: StatusOptions = StatusOptions()
    ) -> PathwaysJobStatus:
        """Async twin of :meth:`get_status`."""
        async with self.a_client() as api_client:
            observed = _Observed()
            for resource in self._watched(options):
                observed.objects[resource.plural] = await self.a_get_object(
                    resource, name, namespace, api_client
                )
            return await self._a_status(name, namespace, options, observed, api_client)

    async def a_read_main_container_log(
        self, name: str, namespace: str, *, options: StatusOptions = StatusOptions(), tail_lines: int = 50
    ) -> str:
        """Async twin of :meth:`read_main_container_log`."""
        async with self.a_client() as api_client:
            core = async_client.CoreV1Api(api_client)
            pods = await self._a_call(
                lambda: core.list_namespaced_pod(
                    namespace, label_selector=_selector(name, options.head_replicated_job)
                )
            )
            for pod in sorted(pods.items, key=lambda p: p.metadata.creation_timestamp or 0, reverse=True):
                if options.main_container not in {c.name for c in pod.spec.containers or []}:
                    continue
                pod_name = pod.metadata.name
                try:
                    response = await self._a_call(
                        functools.partial(
                            core.read_namespaced_pod_log,
                            name=pod_name,
                            namespace=namespace,
                            container=options.main_container,
                            tail_lines=tail_lines,
                            _preload_content=False,
                        )
                    )
                    raw: bytes = await response.read()  # type: ignore[attr-defined]  # _preload_content=False
                    return raw.decode(errors="replace")
                except AsyncApiException as err:
                    if err.status not in (400, 404):
                        raise
        return ""

    @staticmethod
    def _watched(options: StatusOptions) -> list[CustomResource]:
        if options.kind is JobKind.PATHWAYS_JOB:
            return [options.kind.resource, JOBSET]
        return [JOBSET]

    async def _a_status(
        self,
        name: str,
        namespace: str,
        options: StatusOptions,
        observed: _Observed,
        api_client: async_client.ApiClient,
    ) -> PathwaysJobStatus:
        pathways_job = (
            observed.objects.get(options.kind.resource.plural)
            if options.kind is JobKind.PATHWAYS_JOB
            else None
        )
        jobset = observed.objects.get(JOBSET.plural)
        status = self._summarize(name, namespace, options, pathways_job, jobset)
        failed = status.phase is Phase.FAILED
        if _needs_detail(status) and jobset is not None:
            detail: dict[str, Any] = await self._a_detail(name, namespace, api_client, jobset)
            if failed:
                detail["events"] = await self._a_events(name, namespace, api_client)
                detail["log_tail"] = await self.a_read_main_container_log(
                    name, namespace, options=options, tail_lines=_FAILURE_LOG_LINES
                )
            status = self._summarize(name, namespace, options, pathways_job, jobset, **detail)
        elif failed and pathways_job is not None:
            events = await self._a_events(name, namespace, api_client)
            status = self._summarize(name, namespace, options, pathways_job, jobset, events=events)
        return status

    async def _a_events(
        self, name: str, namespace: str, api_client: async_client.ApiClient
    ) -> list[dict[str, Any]]:
        core = async_client.CoreV1Api(api_client)
        events = await self._a_call(lambda: core.list_namespaced_event(namespace))
        return _job_events(api_client.sanitize_for_serialization(events).get("items") or [], name)

    async def a_watch_status(
        self,
        name: str,
        namespace: str,
        options: StatusOptions = StatusOptions(),
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
            watch = _JobWatch(self, api_client, name, namespace, options, watch_timeout_seconds)
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


@dataclass
class _SharedClient:
    client: async_client.ApiClient
    closer: contextlib.AsyncExitStack
    users: int = 0


class _ClientPool:
    """The shared async API clients of one event loop, by connection settings, counted by users."""

    def __init__(self) -> None:
        self.clients: dict[tuple[Any, ...], _SharedClient] = {}
        self.lock = asyncio.Lock()

    async def acquire(self, key: tuple[Any, ...], hook: AsyncKubernetesHook) -> _SharedClient:
        async with self.lock:
            shared = self.clients.get(key)
            if shared is None:
                if hook.client_configuration is None:
                    hook.client_configuration = async_client.Configuration()
                # Every trigger holds a watch open: the shared pool must not cap connections.
                hook.client_configuration.connection_pool_maxsize = 0
                closer = contextlib.AsyncExitStack()
                client = await closer.enter_async_context(hook.get_conn())
                shared = self.clients[key] = _SharedClient(client, closer)
            shared.users += 1
            return shared

    async def release(self, key: tuple[Any, ...], shared: _SharedClient) -> None:
        async with self.lock:
            shared.users -= 1
            if shared.users > 0 or self.clients.get(key) is not shared:
                return
            del self.clients[key]
        await shared.closer.aclose()


_SHARED_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _ClientPool] = (
    weakref.WeakKeyDictionary()
)


class _WatchExpired(Exception):
    """The server no longer has the requested resourceVersion (410 Gone)."""


class _WatchStream:
    """One open watch request on one custom resource, filtered to one object name."""

    def __init__(self, response: ClientResponse) -> None:
        self.response = response

    async def next_event(self) -> dict[str, Any] | None:
        """The next event, or None when the server closed the stream."""
        while True:
            line = await self.response.content.readline()
            if not line:
                return None
            if line.strip():
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    code = (event.get("object") or {}).get("code")
                    if code == 410:
                        raise _WatchExpired
                    raise AsyncApiException(
                        status=code or 500, reason=str((event.get("object") or {}).get("message"))
                    )
                return event

    def close(self) -> None:
        self.response.close()


class _JobWatch:
    """The watch state of one job: last objects, resource versions, and open streams."""

    def __init__(
        self,
        hook: PathwaysJobHook,
        api_client: async_client.ApiClient,
        name: str,
        namespace: str,
        options: StatusOptions,
        timeout_seconds: int,
    ) -> None:
        self.hook = hook
        self.api = async_client.CustomObjectsApi(api_client)
        self.name = name
        self.namespace = namespace
        self.options = options
        self.timeout_seconds = timeout_seconds
        self.observed = _Observed()
        self.needs_list = True
        self.streams: dict[str, _WatchStream] = {}
        # Set when a watch request was opened again; clears the error count of the caller.
        self.reconnected = False
        self.pending: dict[str, asyncio.Task[dict[str, Any] | None]] = {}

    def _resources(self) -> list[CustomResource]:
        resources = PathwaysJobHook._watched(self.options)
        # Once the JobSet exists it carries every state change; the PathwaysJob matters only
        # before that (a spec the controller rejects never gets a JobSet).
        if len(resources) > 1 and self.observed.objects.get(JOBSET.plural) is not None:
            return [JOBSET]
        return resources

    async def relist(self) -> None:
        self.close_streams()
        for resource in PathwaysJobHook._watched(self.options):
            listing = await self.api.list_namespaced_custom_object(
                group=resource.group,
                version=resource.version,
                namespace=self.namespace,
                plural=resource.plural,
                field_selector=f"metadata.name={self.name}",
            )
            items = listing.get("items") or []
            self.observed.objects[resource.plural] = items[0] if items else None
            self.observed.versions[resource.plural] = (listing.get("metadata") or {}).get(
                "resourceVersion", ""
            )
        self.needs_list = False

    async def _open(self, resource: CustomResource) -> _WatchStream:
        options: dict[str, Any] = {
            "group": resource.group,
            "version": resource.version,
            "namespace": self.namespace,
            "plural": resource.plural,
            "field_selector": f"metadata.name={self.name}",
            "allow_watch_bookmarks": True,
            "timeout_seconds": self.timeout_seconds,
            "watch": True,
            "_preload_content": False,
        }
        if version := self.observed.versions.get(resource.plural):
            options["resource_version"] = version
        response = await self.api.list_namespaced_custom_object(**options)
        if response.status != 200:  # the client checks the status only when it reads the body
            body = await response.read()
            response.close()
            error = AsyncApiException(status=response.status, reason=response.reason)
            error.headers, error.body = response.headers, body
            raise error
        return _WatchStream(response)

    async def next_change(self) -> None:
        """Wait until an event changes what is observed (or the watch must be re-listed)."""
        while True:
            wanted = {r.plural: r for r in self._resources()}
            for plural in list(self.streams):
                if plural not in wanted:
                    self._close(plural)
            for plural, resource in wanted.items():
                if plural not in self.streams:
                    try:
                        self.streams[plural] = await self._open(resource)
                        self.reconnected = True
                    except AsyncApiException as err:
                        if err.status != 410:
                            raise
                        self.needs_list = True
                        return
                if plural not in self.pending:
                    self.pending[plural] = asyncio.ensure_future(self.streams[plural].next_event())
            done, _ = await asyncio.wait(self.pending.values(), return_when=asyncio.FIRST_COMPLETED)
            changed = False
            for plural in [p for p, task in self.pending.items() if task in done]:
                task = self.pending.pop(plural)
                try:
                    event = task.result()
                except _WatchExpired:
                    self.needs_list = True
                    return
                except Exception:
                    self._close(plural)
                    raise
                if event is None:  # server timeout or dropped connection: resume from the last version
                    self._close(plural)
                    continue
                obj = event.get("object") or {}
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if version:
                    self.observed.versions[plural] = version
                if event.get("type") == "BOOKMARK":
                    continue
                self.observed.objects[plural] = None if event.get("type") == "DELETED" else obj
                changed = True
            if changed:
                return

    def _close(self, plural: str) -> None:
        task = self.pending.pop(plural, None)
        if task is not None and not task.done():
            task.cancel()
        stream = self.streams.pop(plural, None)
        if stream is not None:
            stream.close()

    def close_streams(self) -> None:
        for plural in list(set(self.streams) | set(self.pending)):
            self._close(plural)
