"""Async Kubernetes API clients shared by the hooks of one event loop, per connection."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from dataclasses import dataclass
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from kubernetes_asyncio import client as async_client


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
