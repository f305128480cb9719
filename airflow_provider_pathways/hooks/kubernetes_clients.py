"""Kubernetes API clients: the async hook that also signs in with a Google identity, and the async
clients shared by the hooks of one event loop, per connection."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from dataclasses import dataclass
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from airflow.providers.common.compat.sdk import AirflowNotFoundException
from asgiref.sync import sync_to_async
from kubernetes_asyncio import client as async_client

from airflow_provider_pathways.hooks.kubernetes_google import GkeTarget, configure_async


class PathwaysAsyncKubernetesHook(AsyncKubernetesHook):
    """The cncf-kubernetes async hook, reaching the cluster through the GKE API with a Google
    identity when the connection names ``gcp_conn_id`` (and the task gives no kubeconfig)."""

    async def _load_config(self) -> None:
        if self._config_loaded:
            return
        target = None
        if not (self.config_dict or self.in_cluster):
            target = GkeTarget.from_extras(self.conn_id, await self.get_conn_extras())
        if target is None:
            await super()._load_config()
            return
        if self.client_configuration is None:
            self.client_configuration = async_client.Configuration()
        await configure_async(self.client_configuration, target)
        self._is_in_cluster = False
        self._config_loaded = True

    async def get_conn_extras(self) -> dict[str, Any]:
        """The connection's extras, read in a worker thread: reading them masks their secrets, and
        Airflow 3.0's triggerer refuses to send that mask from its event loop ("You cannot use
        AsyncToSync in the same thread as an async event loop")."""
        if self._extras is None:
            self._extras = await sync_to_async(self._read_extras)()
        return self._extras

    def _read_extras(self) -> dict[str, Any]:
        if not self.conn_id:
            return {}
        try:
            return dict(self.get_connection(self.conn_id).extra_dejson)
        except AirflowNotFoundException:
            if self.conn_id == self.default_conn_name:
                return {}
            raise


@dataclass
class SharedClient:
    client: async_client.ApiClient
    closer: contextlib.AsyncExitStack
    users: int = 0


class ClientPool:
    """The shared async API clients of one event loop, by connection settings, counted by users."""

    def __init__(self) -> None:
        self.clients: dict[tuple[Any, ...], SharedClient] = {}
        self.lock = asyncio.Lock()

    async def acquire(self, key: tuple[Any, ...], hook: AsyncKubernetesHook) -> SharedClient:
        async with self.lock:
            shared = self.clients.get(key)
            if shared is None:
                if hook.client_configuration is None:
                    hook.client_configuration = async_client.Configuration()
                # Every trigger holds a watch open: the shared pool must not cap connections.
                hook.client_configuration.connection_pool_maxsize = 0
                closer = contextlib.AsyncExitStack()
                client = await closer.enter_async_context(hook.get_conn())
                shared = self.clients[key] = SharedClient(client, closer)
            shared.users += 1
            return shared

    async def release(self, key: tuple[Any, ...], shared: SharedClient) -> None:
        async with self.lock:
            shared.users -= 1
            if shared.users > 0 or self.clients.get(key) is not shared:
                return
            del self.clients[key]
        await shared.closer.aclose()


SHARED_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ClientPool] = weakref.WeakKeyDictionary()
