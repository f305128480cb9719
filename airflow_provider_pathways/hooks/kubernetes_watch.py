"""Watching a Pathways job's objects: streams resumed from the last resourceVersion, re-listed on 410."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from airflow_provider_pathways.gke.resources import (
    JOBSET,
    CustomResource,
)

if TYPE_CHECKING:
    from aiohttp import ClientResponse

    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
from airflow_provider_pathways.gke.job_objects import StatusOptions, watched_resources


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


class WatchStream:
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
