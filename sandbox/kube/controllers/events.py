"""Core v1 Events recorded by the simulated controllers (listable, watchable, field-selectable)."""

from __future__ import annotations

import uuid
from collections import deque
from typing import Any

from sandbox.kube.meta import rfc3339
from sandbox.kube.resources import EVENTS
from sandbox.kube.store import Store

MAX_EVENTS = 2000


class EventRecorder:
    """Creates Event objects about other objects; keeps at most ``MAX_EVENTS`` of them."""

    def __init__(self, store: Store):
        self.store = store
        self._recent: deque[tuple[str, str]] = deque()

    def record(self, obj: dict[str, Any], type_: str, reason: str, message: str, component: str) -> None:
        md = obj.get("metadata") or {}
        namespace = md.get("namespace") or "default"
        stamp = rfc3339()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{md.get('name', 'object')}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", ""),
                "kind": obj.get("kind", ""),
                "name": md.get("name", ""),
                "namespace": namespace,
                "uid": md.get("uid", ""),
                "resourceVersion": md.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": "sandbox",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        created = self.store.create(EVENTS, event, namespace=namespace, from_api=False)
        self._recent.append((namespace, created["metadata"]["name"]))
        while len(self._recent) > MAX_EVENTS:
            old_ns, old_name = self._recent.popleft()
            if self.store.find(EVENTS, old_ns, old_name) is not None:
                self.store.delete(EVENTS, old_ns, old_name)

    def clear(self) -> None:
        self._recent.clear()
