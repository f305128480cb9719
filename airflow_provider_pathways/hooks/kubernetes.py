"""Hook for PathwaysJobs and their JobSets (async, with sync methods over it), and what only it
uses: which API errors are worth a retry, watches of a job's objects (resumed from the last
resourceVersion, re-listed on 410), and a task instance's jobs, found by owner labels, marked by the
try that follows them and deleted only under the rules of
:mod:`airflow_provider_pathways.gke.task_job`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
import yaml
from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from airflow_provider_pathways.failures import PathwaysSpecRejected
from airflow_provider_pathways.gke.objects import (
    DEFAULT_STATUS_OPTIONS,
    JOBSET,
    KUEUE_WORKLOAD,
    PATHWAYS_JOB,
    CustomResource,
    JobKind,
    StatusOptions,
    job_events,
    job_selector,
    log_pods,
    log_request,
    own_workload_name,
    owned_by_jobset,
    owner_references,
    the_job_objects,
    watched_resources,
)
from airflow_provider_pathways.gke.status import (
    FAILURE_LOG_LINES,
    PathwaysJobStatus,
    Phase,
    details_needed,
    summarize,
)
from airflow_provider_pathways.gke.task_job import (
    RELEASE_ATTEMPTS,
    TASK_LABEL,
    JobRef,
    Release,
    delete_preconditions,
    follow_mark,
    owner_selector,
    release_verdict,
)
from airflow_provider_pathways.hooks.kubernetes_google import (
    GkeTarget,
    PathwaysAsyncKubernetesHook,
    sync_api_client,
)
from airflow_provider_pathways.hooks.loop_thread import LoopShared, LoopThread, blocking
from airflow_provider_pathways.transient import (
    DEFAULT_OUTAGE_TOLERANCE,
    TRANSIENT_HTTP_STATUSES,
    CallRetry,
    OutageWindow,
    describe_error,
    parse_retry_after,
)


class CredentialsRefused(RuntimeError):
    """The API server answered 401 Unauthorized: the connection's credentials are expired or revoked."""


def credentials_refused(conn_id: str | None, gcp_conn_id: str | None) -> CredentialsRefused:
    """The error for a 401 answer, naming the connection (and never the credentials)."""
    what = (
        f"the access token of Google connection {gcp_conn_id!r} was refused (expired or revoked; "
        "check that the Google account is enabled and may use the cluster)"
        if gcp_conn_id
        else "its token or client certificate is expired or revoked (renew the kubeconfig or token)"
    )
    return CredentialsRefused(f"Kubernetes connection {conn_id!r}: 401 Unauthorized: {what}")


def is_transient(err: BaseException) -> bool:
    """A Kubernetes API error worth retrying: a status of ``TRANSIENT_HTTP_STATUSES`` (429, 5xx,
    408), or no answer at all; never another 4xx, nor a certificate the client does not trust."""
    if isinstance(err, AsyncApiException):
        return err.status in TRANSIENT_HTTP_STATUSES or not err.status
    if isinstance(err, (aiohttp.ClientConnectorCertificateError, ssl.SSLCertVerificationError)):
        return False  # the server's certificate is not trusted: asking again changes nothing
    return isinstance(err, (aiohttp.ClientError, ConnectionError, TimeoutError, OSError))


def retry_after(err: BaseException) -> float | None:
    """The ``Retry-After`` an API server sent with a 429 or 503, in seconds."""
    headers = getattr(err, "headers", None)
    return parse_retry_after(headers.get("Retry-After")) if headers else None


if TYPE_CHECKING:
    from aiohttp import ClientResponse


@dataclass
class Observed:
    """Objects last seen for one job, and the resourceVersion to watch from."""

    objects: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


#: How long after the server's own end of a watch (``timeoutSeconds``) the client gives up on it. The
#: client's default request timeout (cncf-kubernetes' ``API_TIMEOUT``, 60 s) would otherwise cut every
#: longer watch client-side: kubernetes_asyncio sends ``timeout_seconds`` as a query parameter, so
#: cncf-kubernetes' client never sees it to lengthen its own timeout.
WATCH_CLIENT_MARGIN_SECONDS = 30


class WatchExpired(Exception):
    """The server no longer has the requested resourceVersion (410 Gone)."""


#: A watch stream cut by its peer this soon after it opened, before it delivered any event, is not
#: reopened at once: the reopened watch did not really work (client-go's reflector calls that a "very
#: short watch" and backs off: ``tools/cache/reflector.go``, ``watchHandler``).
VERY_SHORT_WATCH_SECONDS = 1.0


def is_cut(err: BaseException) -> bool:
    """A watch stream cut by its peer mid-stream: the connection reset, or closed (EOF) before the
    chunked body's end (a load balancer or proxy cutting a long request, an API server instance
    going away). Reopening the watch is the answer, not an outage."""
    return isinstance(
        err,
        (
            aiohttp.ClientPayloadError,
            aiohttp.ServerDisconnectedError,
            ConnectionResetError,
            asyncio.IncompleteReadError,
        ),
    )


class WatchStream:
    """One open watch request on one custom resource, filtered to one object name."""

    def __init__(self, response: ClientResponse) -> None:
        self.response = response
        self.opened = time.monotonic()
        self.events = 0

    def very_short(self) -> bool:
        """Whether it ended less than :data:`VERY_SHORT_WATCH_SECONDS` after it opened, with no event."""
        return self.events == 0 and time.monotonic() - self.opened < VERY_SHORT_WATCH_SECONDS

    async def next_event(self) -> dict[str, Any] | None:
        """The next event, or None when the server closed the stream."""
        while True:
            line = await self.response.content.readline()
            if not line:
                return None
            if line.strip():
                self.events += 1
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    code = (event.get("object") or {}).get("code")
                    if code == 410:
                        raise WatchExpired
                    raise AsyncApiException(
                        status=code or 500, reason=str((event.get("object") or {}).get("message"))
                    )
                return event

    def close(self) -> None:
        self.response.close()


class JobWatch:
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
        self.observed = Observed()
        self.needs_list = True
        self.streams: dict[str, WatchStream] = {}
        # Set when a watch request was opened again; clears the error count of the caller.
        self.reconnected = False
        self.pending: dict[str, asyncio.Task[dict[str, Any] | None]] = {}

    def _resources(self) -> list[CustomResource]:
        resources = watched_resources(self.options)
        # Once the JobSet exists it carries every state change; the PathwaysJob matters only
        # before that (a spec the controller rejects never gets a JobSet).
        if len(resources) > 1 and self.observed.objects.get(JOBSET.plural) is not None:
            return [JOBSET]
        return resources

    async def relist(self) -> None:
        self.close_streams()
        for resource in watched_resources(self.options):
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

    async def _open(self, resource: CustomResource) -> WatchStream:
        options: dict[str, Any] = {
            "group": resource.group,
            "version": resource.version,
            "namespace": self.namespace,
            "plural": resource.plural,
            "field_selector": f"metadata.name={self.name}",
            "allow_watch_bookmarks": True,
            "timeout_seconds": self.timeout_seconds,
            "_request_timeout": self.timeout_seconds + WATCH_CLIENT_MARGIN_SECONDS,
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
        return WatchStream(response)

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
                except WatchExpired:
                    self.needs_list = True
                    return
                except Exception as err:
                    stream = self.streams.get(plural)
                    self._close(plural)
                    if is_cut(err) and stream is not None and not stream.very_short():
                        continue  # cut by its peer: reopened at once from the last version, no outage
                    raise
                if event is None:  # the server ended it (timeoutSeconds): resume from the last version
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


# Server-side timeout of one watch request; a healthy wait costs one request per period.
DEFAULT_WATCH_TIMEOUT_SECONDS = 900
#: How often :meth:`PathwaysJobHook.a_wait_until_deleted` looks whether the job is gone.
DELETION_POLL_SECONDS = 0.5
MERGE_PATCH = "application/merge-patch+json"
_CONFLICT = 409
_UNPROCESSABLE = 422


class JobNameTaken(RuntimeError):
    """Creating a job found an object of its kind and name already there (409 Conflict): another
    one, or this very job when an earlier attempt of the request was answered late."""

    def __init__(self, ref: JobRef) -> None:
        super().__init__(f"{ref} already exists")
        self.ref = ref


_RAISE = object()
T = TypeVar("T")


def _delete_options(preconditions: Mapping[str, str] | None) -> dict[str, Any]:
    return {"body": {"preconditions": dict(preconditions)}} if preconditions else {}  # DeleteOptions


def _owned_by_pathways_job(obj: Mapping[str, Any]) -> bool:
    return any(ref.get("kind") == PATHWAYS_JOB.kind for ref in owner_references(obj))


def _changed_on_every_delete(ref: JobRef, verdict: Release) -> RuntimeError:
    """A job that changed before each delete could run (409 on its preconditions) was not deleted:
    the caller must not forget it. (``verdict`` is the last decision: only a delete loops.)"""
    assert verdict is Release.DELETE
    return RuntimeError(
        f"{ref} changed before each of {RELEASE_ATTEMPTS} deletes (409 Conflict on the UID and "
        "resourceVersion preconditions); it was not deleted"
    )


@dataclass(frozen=True)
class SharedClient:
    """An async API client shared on one event loop, and what closes it."""

    client: async_client.ApiClient
    closer: contextlib.AsyncExitStack


#: The async API clients of each event loop, by connection settings: one client, TLS context and
#: connection pool for all the triggers of a triggerer that use one connection.
SHARED_CLIENTS: LoopShared[SharedClient] = LoopShared(lambda shared: shared.closer.aclose())


@dataclass(frozen=True)
class ProviderJob:
    """A job this provider made, as listed: its object, which job it is, and its phase then."""

    obj: dict[str, Any]
    ref: JobRef
    phase: Phase


class PathwaysJobHook(KubernetesHook):
    """
    Create, follow and delete PathwaysJobs (or plain JobSets) through a Kubernetes connection.

    Uses the cncf-kubernetes connection (``kubernetes_conn_id``) unchanged, or, when it names
    ``gcp_conn_id``, reaches the GKE cluster it names with that Google identity
    (:mod:`~airflow_provider_pathways.hooks.kubernetes_google`). The ``a_*`` methods
    (kubernetes_asyncio) are the only implementation and serve triggers; each sync method, for
    operators and poke-mode sensors, runs its ``a_*`` method on the hook's private event loop
    (:mod:`~airflow_provider_pathways.hooks.loop_thread`), where one API client serves every sync call.
    API errors are ``kubernetes_asyncio``'s :class:`~kubernetes_asyncio.client.exceptions.ApiException`.
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
        self.runner = LoopThread("kubernetes-hook-loop")
        self._kept_client: tuple[asyncio.AbstractEventLoop, async_client.ApiClient] | None = None
        self._finalizer = weakref.finalize(self, self.runner.stop)

    @classmethod
    def for_task(cls, task: Any) -> PathwaysJobHook:
        """The hook for a task with ``kubernetes_conn_id``, ``cluster_context``, ``config_file``..."""
        return cls(
            kubernetes_conn_id=task.kubernetes_conn_id,
            cluster_context=task.cluster_context,
            config_file=task.config_file,
            in_cluster=task.in_cluster,
        )

    def close(self) -> None:
        """Close the sync methods' API client and stop the private event loop (also done when the
        hook is garbage-collected)."""
        self._finalizer()

    def gke_target(self) -> GkeTarget | None:
        """The GKE cluster and Google identity of the connection; None for kubeconfig or in-cluster
        (also when the task gives ``config_file`` or ``in_cluster``, which win)."""
        if self.config_file or self.in_cluster:
            return None
        return GkeTarget.from_extras(self.conn_id, self.conn_extras)

    def get_conn(self) -> Any:
        """The synchronous ``kubernetes`` API client of cncf-kubernetes' hook (``test_connection``,
        ``custom_object_client``...): through the GKE API with a Google identity, or as the
        cncf-kubernetes hook builds it. The hook's own methods do not use it."""
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

    async def _refused(self) -> Exception:
        """The error for a 401 answer, naming the connection (and its Google one, if it signs in so)."""
        extras = await self.async_hook.get_conn_extras()
        google = None if self.config_file or self.in_cluster else extras.get("gcp_conn_id")
        return credentials_refused(self.conn_id, google)

    async def _call(
        self, fn: Callable[[], Awaitable[T]], *, gone: Any = _RAISE, gone_on: Collection[int] = (404,)
    ) -> T:
        """``fn()`` retried on 429 (after ``Retry-After``), 5xx and connection errors; ``gone``
        instead of an answer with a status in ``gone_on`` (404), when given."""
        try:
            return await self.call_retry.a_call(
                fn, is_transient=is_transient, retry_after=retry_after, on_retry=self._log_retry
            )
        except AsyncApiException as err:
            if err.status == 401:
                raise await self._refused() from None
            if gone is _RAISE or err.status not in gone_on:
                raise
            return gone  # type: ignore[no-any-return]

    @contextlib.asynccontextmanager
    async def a_client(self) -> AsyncIterator[async_client.ApiClient]:
        """An async API client on the hook's connection, shared by every hook of this event loop
        with the same connection settings (a triggerer runs hundreds of triggers: one client, one
        TLS context and one connection pool serve them all); closed when its last user is done.
        On the hook's private loop, the sync methods' client stays open until the hook closes."""
        loop = asyncio.get_running_loop()
        if self.runner.owns(loop):
            if self._kept_client is None or self._kept_client[0] is not loop:
                client = await self._acquire_client(loop)
                self._kept_client = (loop, client)
            yield self._kept_client[1]
            return
        key = self._client_key()
        shared = await SHARED_CLIENTS.acquire(key, self._shared_client)
        try:
            yield shared.client
        finally:
            await SHARED_CLIENTS.release(key, shared)

    async def _a_client_riding_out(
        self, stack: contextlib.AsyncExitStack, outage_tolerance: float
    ) -> async_client.ApiClient:
        """:meth:`a_client`, entered on ``stack``; an outage while signing in (a Google token
        endpoint or GKE API that answers a server error) is ridden out for up to
        ``outage_tolerance`` seconds, as the watch rides out one of the API server."""
        outage = OutageWindow(outage_tolerance, what=f"the cluster of connection {self.conn_id!r}", base=0.5)
        while True:
            try:
                return await stack.enter_async_context(self.a_client())
            except Exception as err:
                if not is_transient(err):
                    raise
                delay = outage.failed(err, describe_error(err))
                if outage.failures == 1:
                    self.log.warning(
                        "Signing in failed (%s); retrying for up to %gs",
                        describe_error(err),
                        outage.tolerance,
                    )
                await asyncio.sleep(delay)

    def _client_key(self) -> tuple[Any, ...]:
        return (self.conn_id, self.cluster_context, self.config_file, self.in_cluster)

    async def _acquire_client(self, loop: asyncio.AbstractEventLoop) -> async_client.ApiClient:
        key = self._client_key()
        shared = await SHARED_CLIENTS.acquire(key, self._shared_client)
        self.runner.at_stop(functools.partial(SHARED_CLIENTS.release, key, shared, loop))
        return shared.client

    async def _shared_client(self) -> SharedClient:
        """A new API client for :data:`SHARED_CLIENTS`."""
        hook = self.async_hook
        if hook.client_configuration is None:
            hook.client_configuration = async_client.Configuration()
        # Every trigger holds a watch open: the shared pool must not cap connections.
        hook.client_configuration.connection_pool_maxsize = 0
        closer = contextlib.AsyncExitStack()
        client = await closer.enter_async_context(hook.get_conn())
        return SharedClient(client, closer)

    @contextlib.asynccontextmanager
    async def _using(
        self, api_client: async_client.ApiClient | None
    ) -> AsyncIterator[async_client.ApiClient]:
        """``api_client`` when given (a caller reading several objects at once), else :meth:`a_client`."""
        if api_client is not None:
            yield api_client
            return
        async with self.a_client() as client:
            yield client

    # ---- the API (async; each sync method below runs the same coroutine) ------------------

    async def a_create_job(self, manifest: Mapping[str, Any], namespace: str) -> dict[str, Any]:
        """Create the PathwaysJob or JobSet ``manifest``; raises :class:`JobNameTaken` when an object
        of its kind and name exists (409, also when this request's own earlier attempt made it), and
        :class:`~airflow_provider_pathways.failures.PathwaysSpecRejected` when the API server refuses
        the object (422, with its message)."""
        resource = JobKind(manifest["kind"]).resource
        name = str((manifest.get("metadata") or {}).get("name") or "")
        async with self.a_client() as api_client:
            try:
                return await self._call(
                    lambda: async_client.CustomObjectsApi(api_client).create_namespaced_custom_object(
                        **resource.coordinates(namespace), body=dict(manifest)
                    )
                )
            except AsyncApiException as err:
                if err.status == _CONFLICT:
                    raise JobNameTaken(JobRef(name, namespace, manifest["kind"])) from err
                if err.status == _UNPROCESSABLE:
                    body = err.body.decode(errors="replace") if isinstance(err.body, bytes) else err.body
                    raise PathwaysSpecRejected(f"the API server rejected {namespace}/{name}: {body}") from err
                raise

    async def a_get_object(
        self,
        resource: CustomResource,
        name: str,
        namespace: str,
        api_client: async_client.ApiClient | None = None,
    ) -> dict[str, Any] | None:
        """The custom object, or None when it does not exist."""
        async with self._using(api_client) as client:
            api = async_client.CustomObjectsApi(client)
            return await self._call(
                lambda: api.get_namespaced_custom_object(**resource.object_coordinates(namespace, name)),
                gone=None,
            )

    async def a_delete_job(
        self,
        name: str,
        namespace: str,
        kind: JobKind = JobKind.PATHWAYS_JOB,
        preconditions: Mapping[str, str] | None = None,
    ) -> bool:
        """Delete the job and what it owns; False when already gone. With ``preconditions`` (``uid``,
        ``resourceVersion``) the API server refuses (409) to delete any other object."""
        async with self.a_client() as api_client:
            answer = await self._call(
                lambda: async_client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
                    **kind.resource.object_coordinates(namespace, name),
                    propagation_policy="Foreground",
                    **_delete_options(preconditions),
                ),
                gone=None,
            )
        return answer is not None

    async def a_wait_until_deleted(self, name: str, namespace: str, kind: JobKind, timeout: float) -> None:
        """Wait until the job object is gone (its dependents go first with foreground deletion);
        raises :class:`TimeoutError` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while await self.a_get_object(kind.resource, name, namespace) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{kind.value} {namespace}/{name} still exists after {timeout}s")
            await asyncio.sleep(DELETION_POLL_SECONDS)

    async def a_list_pods(
        self,
        name: str,
        namespace: str,
        replicated_job: str | None = None,
        api_client: async_client.ApiClient | None = None,
    ) -> list[dict[str, Any]]:
        """Pods of the job's JobSet, optionally of one replicated job."""
        async with self._using(api_client) as client:
            core = async_client.CoreV1Api(client)
            selector = job_selector(name, replicated_job)
            pods = await self._call(lambda: core.list_namespaced_pod(namespace, label_selector=selector))
            return client.sanitize_for_serialization(pods).get("items") or []

    async def a_list_jobs(
        self, name: str, namespace: str, api_client: async_client.ApiClient | None = None
    ) -> list[dict[str, Any]]:
        """The batch Jobs of the job's JobSet (they outlive their pods)."""
        async with self._using(api_client) as client:
            batch = async_client.BatchV1Api(client)
            selector = job_selector(name)
            jobs = await self._call(lambda: batch.list_namespaced_job(namespace, label_selector=selector))
            return client.sanitize_for_serialization(jobs).get("items") or []

    async def a_list_workloads(
        self,
        name: str,
        namespace: str,
        jobset: Mapping[str, Any] | None = None,
        api_client: async_client.ApiClient | None = None,
    ) -> list[dict[str, Any]]:
        """Kueue Workloads owned by the JobSet; empty when Kueue is not installed. With the JobSet,
        its Workload is read by the name Kueue gives it (one GET); else listed."""
        async with self._using(api_client) as client:
            own = own_workload_name(name, jobset)
            workload = await self.a_get_object(KUEUE_WORKLOAD, own, namespace, client) if own else None
            if workload is not None:
                return [workload]
            api = async_client.CustomObjectsApi(client)
            listing = await self._call(
                lambda: api.list_namespaced_custom_object(**KUEUE_WORKLOAD.coordinates(namespace)), gone={}
            )
            return [w for w in listing.get("items") or [] if owned_by_jobset(w, name)]

    async def a_list_events(
        self, name: str, namespace: str, api_client: async_client.ApiClient | None = None
    ) -> list[dict[str, Any]]:
        """Events about the job, its Jobs and its pods (they outlive the pods)."""
        async with self._using(api_client) as client:
            core = async_client.CoreV1Api(client)
            events = await self._call(lambda: core.list_namespaced_event(namespace))
            return job_events(client.sanitize_for_serialization(events).get("items") or [], name)

    async def a_read_main_container_log(
        self,
        name: str,
        namespace: str,
        *,
        options: StatusOptions = DEFAULT_STATUS_OPTIONS,
        tail_lines: int = 50,
    ) -> str:
        """Last lines of the user program's log (the head pod's program container:
        :func:`~airflow_provider_pathways.gke.objects.program_container`); empty if none."""
        async with self.a_client() as api_client:
            core = async_client.CoreV1Api(api_client)
            pods = await self.a_list_pods(name, namespace, options.head_replicated_job, api_client)
            for pod_name, container in log_pods(pods, options.main_container):
                response = await self._call(
                    functools.partial(
                        core.read_namespaced_pod_log,
                        **log_request(pod_name, namespace, container, tail_lines),
                    ),
                    gone=None,
                    gone_on=(400, 404),
                )
                if response is not None:
                    raw: bytes = await response.read()  # type: ignore[attr-defined]  # _preload_content=False
                    return raw.decode(errors="replace")
        return ""

    async def a_get_status(
        self, name: str, namespace: str, options: StatusOptions = DEFAULT_STATUS_OPTIONS
    ) -> PathwaysJobStatus:
        """Read the job (and, for a failure or suspension, its pods, Jobs, workloads and events)."""
        async with self.a_client() as api_client:
            observed = Observed()
            for resource in watched_resources(options):
                observed.objects[resource.plural] = await self.a_get_object(
                    resource, name, namespace, api_client
                )
            return await self._status(name, namespace, options, observed, api_client)

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

    async def _status(
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
            detail["pods"] = await self.a_list_pods(name, namespace, api_client=api_client)
            detail["jobs"] = await self.a_list_jobs(name, namespace, api_client)
            detail["workloads"] = await self.a_list_workloads(name, namespace, jobset, api_client)
        if plan.events:
            detail["events"] = await self.a_list_events(name, namespace, api_client)
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
        on_recovered: Callable[[float], Awaitable[None]] | None = None,
    ) -> AsyncGenerator[PathwaysJobStatus, None]:
        """
        Yield the job's status now and every time it changes, until it is terminal.

        Watches with ``resourceVersion`` (one long request per period, not a poll), resumes a
        dropped stream from the last version seen, re-lists when the server answers 410, and
        rides out an API server outage (connection errors, 429, 5xx) of up to
        ``outage_tolerance`` seconds; then raises :class:`OutageTooLong`. ``on_recovered`` is
        awaited with the outage's length each time the API server answers again after one.
        """
        async with contextlib.AsyncExitStack() as stack:
            api_client = await self._a_client_riding_out(stack, outage_tolerance)
            host = getattr(api_client.configuration, "host", "") or self.conn_id
            outage = OutageWindow(outage_tolerance, what=f"the Kubernetes API server at {host}", base=0.5)
            watch = JobWatch(self, api_client, name, namespace, options, watch_timeout_seconds)
            last: PathwaysJobStatus | None = None
            try:
                while True:
                    try:
                        if watch.needs_list:
                            await watch.relist()
                        status = await self._status(name, namespace, options, watch.observed, api_client)
                        if status != last:
                            last = status
                            yield status
                        if status.terminal:
                            return
                        await watch.next_change()
                    except Exception as err:
                        if isinstance(err, AsyncApiException) and err.status == 401:
                            raise await self._refused() from None
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
                        if on_recovered is not None:
                            await on_recovered(lasted)
            finally:
                watch.close_streams()

    # ---- a task instance's jobs -------------------------------------------------------------

    async def a_mark_followed(self, ref: JobRef, try_number: int) -> None:
        """Write ``try_number`` into the job's follower annotation; an older try then leaves it alone."""
        kind = JobKind(ref.kind)
        async with self.a_client() as api_client:
            api = async_client.CustomObjectsApi(api_client)
            await self._call(
                lambda: api.patch_namespaced_custom_object(
                    **kind.resource.object_coordinates(ref.namespace, ref.name),
                    body=follow_mark(try_number),
                    _content_type=MERGE_PATCH,  # type: ignore[call-arg]  # the client takes it; its stub omits it
                ),
                gone=None,
            )

    async def _a_list_both_kinds(self, namespace: str, selector: str) -> dict[JobKind, list[dict[str, Any]]]:
        """The PathwaysJobs and the JobSets in ``namespace`` that ``selector`` selects."""
        listed: dict[JobKind, list[dict[str, Any]]] = {}
        async with self.a_client() as api_client:
            api = async_client.CustomObjectsApi(api_client)
            for kind in JobKind:
                coordinates = kind.resource.coordinates(namespace)
                listing: dict[str, Any] = await self._call(
                    lambda: api.list_namespaced_custom_object(
                        **coordinates,  # noqa: B023  (called at once)
                        label_selector=selector,
                    ),
                    gone={},
                )
                listed[kind] = listing.get("items") or []
        return listed

    async def a_owned_jobs(self, namespace: str, owner: Mapping[str, str]) -> list[JobRef]:
        """The task instance's jobs in ``namespace``, of either kind, whatever their names (a
        PathwaysJob's JobSet carries its labels too, and is not a job of its own)."""
        listed = await self._a_list_both_kinds(namespace, owner_selector(owner))
        return [
            JobRef.of(obj, kind.value)
            for kind, objects in listed.items()
            for obj in objects
            if not (kind is JobKind.JOBSET and _owned_by_pathways_job(obj))
        ]

    async def a_provider_jobs(self, namespace: str) -> list[ProviderJob]:
        """Every job this provider made in ``namespace`` (its objects carry the owner labels), of
        either kind, each with the phase its own objects show (a PathwaysJob's JobSet is read with
        it, not as a job of its own)."""
        listed = await self._a_list_both_kinds(namespace, TASK_LABEL)
        jobsets = {(obj.get("metadata") or {}).get("name"): obj for obj in listed[JobKind.JOBSET]}
        found = []
        for kind, objects in listed.items():
            for obj in objects:
                if kind is JobKind.JOBSET and _owned_by_pathways_job(obj):
                    continue
                name = str((obj.get("metadata") or {}).get("name"))
                is_pathways_job = kind is JobKind.PATHWAYS_JOB
                phase = summarize(
                    name=name,
                    namespace=namespace,
                    pathways_job=obj if is_pathways_job else None,
                    jobset=jobsets.get(name) if is_pathways_job else obj,
                    expect_pathways_job=is_pathways_job,
                ).phase
                found.append(ProviderJob(obj, JobRef.of(obj, kind.value), phase))
        return found

    async def a_delete_as_read(self, job: ProviderJob) -> Release | None:
        """Delete the job only if it is still exactly as it was read (UID and resourceVersion):
        ``Release.DELETE`` when deleted, ``Release.GONE`` when already gone, None when it changed
        meanwhile (a try marked it, say) and was left alone."""
        try:
            deleted = await self.a_delete_job(
                job.ref.name,
                job.ref.namespace,
                JobKind(job.ref.kind),
                preconditions=delete_preconditions(job.obj),
            )
        except AsyncApiException as err:
            if err.status != _CONFLICT:
                raise
            return None
        return Release.DELETE if deleted else Release.GONE

    async def a_release_job(self, ref: JobRef, owner: Mapping[str, str], try_number: int | None) -> Release:
        """Delete the job if it is still this task instance's and no newer try follows it; the delete
        names the UID and resourceVersion the decision was taken on, and is decided again when the
        object changed meanwhile."""
        kind = JobKind(ref.kind)
        verdict = Release.GONE
        for _ in range(RELEASE_ATTEMPTS):
            obj = await self.a_get_object(kind.resource, ref.name, ref.namespace)
            verdict = release_verdict(obj, ref, owner, try_number)
            if verdict is not Release.DELETE:
                return verdict
            assert obj is not None
            try:
                deleted = await self.a_delete_job(
                    ref.name, ref.namespace, kind, preconditions=delete_preconditions(obj)
                )
            except AsyncApiException as err:
                if err.status != _CONFLICT:
                    raise
                continue
            return Release.DELETE if deleted else Release.GONE
        raise _changed_on_every_delete(ref, verdict)

    # ---- sync methods: the coroutines above, run on the private loop --------------------------

    create_job = blocking(a_create_job)
    get_object = blocking(a_get_object)
    delete_job = blocking(a_delete_job)
    wait_until_deleted = blocking(a_wait_until_deleted)
    list_pods = blocking(a_list_pods)
    list_jobs = blocking(a_list_jobs)
    list_workloads = blocking(a_list_workloads)
    list_events = blocking(a_list_events)
    read_main_container_log = blocking(a_read_main_container_log)
    get_status = blocking(a_get_status)
    mark_followed = blocking(a_mark_followed)
    owned_jobs = blocking(a_owned_jobs)
    provider_jobs = blocking(a_provider_jobs)
    delete_as_read = blocking(a_delete_as_read)
    release_job = blocking(a_release_job)
