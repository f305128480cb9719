"""In-memory object store: one global resourceVersion counter, bounded event history, watchers, GC.

Every change (from the HTTP API or from a simulated controller) goes through this store, so every
change is visible to watches. Store methods are synchronous and run on the event loop thread, which
makes each call atomic with respect to other requests and controllers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from sandbox.kube.errors import ApiError, already_exists, bad_request, conflict, expired, invalid, not_found
from sandbox.kube.meta import clone, random_suffix, rfc3339
from sandbox.kube.patch import json_patch, merge_patch
from sandbox.kube.resources import BY_PLURAL, RESOURCES, ResourceType
from sandbox.kube.selectors import Requirement, matches
from sandbox.kube.validation import admit

log = logging.getLogger(__name__)

Key = tuple[str, str]
Listener = Callable[["WatchEvent"], None]

DEFAULT_HISTORY_LIMIT = 20000
DEFAULT_WATCH_QUEUE_LIMIT = 20000

_MERGE_PATCH = "application/merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
_STRATEGIC_PATCH = "application/strategic-merge-patch+json"


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class WatchEvent:
    """One change: resourceVersion, resource plural, type, new object and (for MODIFIED) the old one."""

    __slots__ = ("_lines", "obj", "old", "resource", "rv", "type")

    def __init__(self, rv: int, resource: str, type_: str, obj: dict[str, Any], old: dict[str, Any] | None):
        self.rv = rv
        self.resource = resource
        self.type = type_
        self.obj = obj
        self.old = old
        self._lines: dict[str, bytes] = {}

    @property
    def namespace(self) -> str:
        return (self.obj.get("metadata") or {}).get("namespace", "")

    def line(self, type_: str | None = None) -> bytes:
        """The newline-terminated JSON line a watch stream sends for this event (cached)."""
        kind = type_ or self.type
        cached = self._lines.get(kind)
        if cached is None:
            cached = self._lines[kind] = _dumps({"type": kind, "object": self.obj}) + b"\n"
        return cached


class Watcher:
    """One open watch: its filter and a queue of encoded lines waiting to be written."""

    def __init__(
        self,
        rt: ResourceType,
        namespace: str | None,
        label_reqs: tuple[Requirement, ...],
        field_reqs: tuple[Requirement, ...],
        queue_limit: int = DEFAULT_WATCH_QUEUE_LIMIT,
    ):
        self.rt = rt
        self.namespace = namespace
        self.label_reqs = label_reqs
        self.field_reqs = field_reqs
        self.queue_limit = queue_limit
        self.lines: deque[bytes] = deque()
        self.closed: str | None = None
        self._wake = asyncio.Event()

    def _matches(self, obj: dict[str, Any] | None) -> bool:
        return obj is not None and matches(obj, self.label_reqs, self.field_reqs)

    def offer(self, event: WatchEvent) -> None:
        """Queue ``event`` if it concerns this watch; selector transitions become ADDED/DELETED."""
        if self.closed or (self.namespace and event.namespace != self.namespace):
            return
        if not (self.label_reqs or self.field_reqs):
            self.push(event.line())
            return
        now = self._matches(event.obj)
        if event.type == "MODIFIED":
            before = self._matches(event.old)
            if now and before:
                self.push(event.line())
            elif now:
                self.push(event.line("ADDED"))
            elif before:
                self.push(event.line("DELETED"))
        elif now:
            self.push(event.line())

    def push(self, line: bytes) -> None:
        if self.closed:
            return
        if len(self.lines) >= self.queue_limit:
            self.close("overflow")
            return
        self.lines.append(line)
        self._wake.set()

    def close(self, reason: str) -> None:
        """Stop the watch; the stream writer sees ``closed`` and ends (``dropped`` ends abruptly, before
        the chunked body's end; ``reset`` with an RST)."""
        if not self.closed:
            self.closed = reason
        self._wake.set()

    async def wait(self, timeout: float) -> None:
        """Wait until lines are queued, the watch is closed, or ``timeout`` passes."""
        if self.lines or self.closed:
            return
        self._wake.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)


class Store:
    """Objects of every served resource, keyed by (namespace, name)."""

    def __init__(self, *, history_limit: int = DEFAULT_HISTORY_LIMIT):
        self._objects: dict[str, dict[Key, dict[str, Any]]] = {rt.plural: {} for rt in RESOURCES}
        self._by_owner: dict[str, set[tuple[str, str, str]]] = {}
        self._rv = 0
        self._history: deque[WatchEvent] = deque()
        self._history_limit = max(1, history_limit)
        self._compacted_rv = 0
        self._watchers: dict[str, set[Watcher]] = {rt.plural: set() for rt in RESOURCES}
        self._listeners: list[Listener] = []

    # -- bookkeeping ------------------------------------------------------------------------------
    @property
    def resource_version(self) -> str:
        """Current global resourceVersion (as list responses report it)."""
        return str(self._rv)

    @property
    def compacted_resource_version(self) -> int:
        """Watches from a resourceVersion below this get 410 Expired."""
        return self._compacted_rv

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event)`` synchronously after every change (controllers only enqueue work)."""
        self._listeners.append(listener)

    def _emit(self, rt: ResourceType, type_: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        event = WatchEvent(self._rv, rt.plural, type_, obj, old)
        self._history.append(event)
        while len(self._history) > self._history_limit:
            self._compacted_rv = self._history.popleft().rv
        for watcher in list(self._watchers[rt.plural]):
            watcher.offer(event)
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                log.exception("store listener failed")

    def _index(self, plural: str, obj: dict[str, Any], add: bool) -> None:
        md = obj["metadata"]
        entry = (plural, md.get("namespace", ""), md["name"])
        for ref in md.get("ownerReferences") or []:
            uid = ref.get("uid")
            if not uid:
                continue
            if add:
                self._by_owner.setdefault(uid, set()).add(entry)
            else:
                bucket = self._by_owner.get(uid)
                if bucket:
                    bucket.discard(entry)
                    if not bucket:
                        del self._by_owner[uid]

    def _put(self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        md = obj["metadata"]
        if old is not None:
            self._index(rt.plural, old, add=False)
        self._objects[rt.plural][(md.get("namespace", ""), md["name"])] = obj
        self._index(rt.plural, obj, add=True)

    # -- reads ------------------------------------------------------------------------------------
    def find(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object or None. Callers must not modify it (use ``clone``)."""
        return self._objects[rt.plural].get((namespace if rt.namespaced else "", name))

    def get(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self.find(rt, namespace, name)
        if obj is None:
            raise not_found(rt, name)
        return obj

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_reqs: tuple[Requirement, ...] = (),
        field_reqs: tuple[Requirement, ...] = (),
    ) -> list[dict[str, Any]]:
        """Matching objects sorted by namespace and name. Callers must not modify them."""
        items = self._objects[rt.plural]
        keys = sorted(k for k in items if not namespace or k[0] == namespace)
        return [items[k] for k in keys if matches(items[k], label_reqs, field_reqs)]

    def owned(self, owner_uid: str, rt: ResourceType | None = None) -> list[dict[str, Any]]:
        """Objects with an ownerReference to ``owner_uid`` (optionally of one resource type)."""
        out = []
        for plural, namespace, name in sorted(self._by_owner.get(owner_uid, ())):
            if rt is not None and plural != rt.plural:
                continue
            obj = self._objects[plural].get((namespace, name))
            if obj is not None:
                out.append(obj)
        return out

    def namespaces(self) -> list[str]:
        """Namespaces that hold at least one object, plus ``default``."""
        seen = {"default"}
        for items in self._objects.values():
            seen.update(ns for ns, _ in items if ns)
        return sorted(seen)

    def counts(self) -> dict[str, int]:
        return {plural: len(items) for plural, items in self._objects.items()}

    # -- writes -----------------------------------------------------------------------------------
    def create(
        self,
        rt: ResourceType,
        body: dict[str, Any],
        *,
        namespace: str = "",
        from_api: bool = True,
        dry_run: bool = False,
        strict: bool = False,
        warnings: list[str] | None = None,
    ) -> dict[str, Any]:
        """Create an object; the server sets uid, resourceVersion, generation and creationTimestamp."""
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        obj = clone(body)
        self._check_type(rt, obj)
        md = obj.get("metadata")
        if not isinstance(md, dict):
            md = obj["metadata"] = {}
        if rt.namespaced:
            if md.get("namespace") and namespace and md["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            md["namespace"] = namespace or md.get("namespace") or "default"
        else:
            md.pop("namespace", None)
        if not md.get("name") and md.get("generateName"):
            md["name"] = f"{md['generateName']}{random_suffix()}"
        for server_field in (
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ):
            md.pop(server_field, None)
        if from_api and rt.status_subresource:
            obj.pop("status", None)
        admit(rt, obj, None, strict=strict, warnings=warnings)
        if self.find(rt, md.get("namespace", ""), md["name"]) is not None:
            raise already_exists(rt, md["name"])
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = rfc3339()
        md["generation"] = 1
        if dry_run:
            md["resourceVersion"] = self.resource_version
            return obj
        self._rv += 1
        md["resourceVersion"] = str(self._rv)
        self._put(rt, obj, None)
        self._emit(rt, "ADDED", obj, None)
        return obj

    def _check_type(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        if obj.get("apiVersion") and obj["apiVersion"] != rt.api_version:
            raise bad_request(
                f"the API version in the data ({obj['apiVersion']}) does not match the expected API version "
                f"({rt.api_version})"
            )
        if obj.get("kind") and obj["kind"] != rt.kind:
            raise bad_request(
                f"the kind in the data ({obj['kind']}) does not match the expected kind ({rt.kind})"
            )
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: dict[str, Any],
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        strict: bool = False,
        warnings: list[str] | None = None,
    ) -> dict[str, Any]:
        """Replace an object (PUT). With a status subresource, only ``/status`` changes ``.status``."""
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        old = self.get(rt, namespace, name)
        new = clone(body)
        self._check_type(rt, new)
        md = new.get("metadata") if isinstance(new.get("metadata"), dict) else {}
        new["metadata"] = md
        if md.get("name") and md["name"] != name:
            raise bad_request(
                f"the name of the object ({md['name']}) does not match the name on the URL ({name})"
            )
        if rt.namespaced and md.get("namespace") and md["namespace"] != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if not md.get("resourceVersion") and rt.group not in ("", "batch"):
            raise invalid(
                rt,
                name,
                [
                    {
                        "reason": "FieldValueInvalid",
                        "message": "Invalid value: 0x0: must be specified for an update",
                        "field": "metadata.resourceVersion",
                    }
                ],
            )
        if md.get("resourceVersion") and md["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise conflict(
                rt,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        return self._commit(rt, old, new, subresource, dry_run=dry_run, strict=strict, warnings=warnings)

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        strict: bool = False,
        warnings: list[str] | None = None,
    ) -> dict[str, Any]:
        """Patch an object with a merge patch or a JSON patch."""
        old = self.get(rt, namespace, name)
        kind = (content_type or "").split(";")[0].strip()
        if kind == _MERGE_PATCH:
            if not isinstance(body, dict):
                raise bad_request("a merge patch must be a JSON object")
            new = merge_patch(old, body)
        elif kind == _JSON_PATCH:
            new = json_patch(old, body)
        elif kind == _STRATEGIC_PATCH and not rt.group:
            new = merge_patch(old, body)
        else:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{_JSON_PATCH}, {_MERGE_PATCH}",
                "UnsupportedMediaType",
            )
        if not isinstance(new, dict):
            raise bad_request("the patched object is not a JSON object")
        md = new.get("metadata") if isinstance(new.get("metadata"), dict) else {}
        new["metadata"] = md
        if md.get("resourceVersion") and md["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise conflict(
                rt,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        md["name"], md["namespace"] = old["metadata"]["name"], old["metadata"].get("namespace")
        self._check_type(rt, new)
        return self._commit(rt, old, new, subresource, dry_run=dry_run, strict=strict, warnings=warnings)

    def mutate(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        change: Callable[[dict[str, Any]], None],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any] | None:
        """Internal read-modify-write: ``change`` edits a copy in place; no write if nothing changed."""
        old = self.find(rt, namespace, name)
        if old is None:
            return None
        new = clone(old)
        change(new)
        return self._commit(rt, old, new, subresource, internal=True)

    def _commit(
        self,
        rt: ResourceType,
        old: dict[str, Any],
        new: dict[str, Any],
        subresource: str | None,
        *,
        internal: bool = False,
        dry_run: bool = False,
        strict: bool = False,
        warnings: list[str] | None = None,
    ) -> dict[str, Any]:
        if subresource not in (None, "status"):
            raise not_found(rt, old["metadata"]["name"])
        if rt.status_subresource or subresource == "status":
            if subresource == "status":
                candidate = clone(old)
                if new.get("status") is None:
                    candidate.pop("status", None)
                else:
                    candidate["status"] = new["status"]
                new = candidate
            elif "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        old_md, md = old["metadata"], new["metadata"]
        for fixed in ("uid", "creationTimestamp", "generation", "namespace", "name", "deletionTimestamp"):
            if fixed in old_md:
                md[fixed] = old_md[fixed]
            else:
                md.pop(fixed, None)
        md["resourceVersion"] = old_md["resourceVersion"]
        if not internal or rt.plural in ("pathwaysjobs", "jobsets"):
            admit(rt, new, old, strict=strict, warnings=warnings)
        if new == old:
            return old
        if rt.plural != "pods" and {k: v for k, v in new.items() if k not in ("metadata", "status")} != {
            k: v for k, v in old.items() if k not in ("metadata", "status")
        }:
            md["generation"] = int(old_md.get("generation") or 0) + 1
        if dry_run:
            return new
        self._rv += 1
        md["resourceVersion"] = str(self._rv)
        self._put(rt, new, old)
        self._emit(rt, "MODIFIED", new, old)
        if md.get("deletionTimestamp") and not md.get("finalizers"):  # the last finalizer went
            final = self._remove(rt, new)
            self._delete_dependents(md["uid"], "Background")
            return final
        return new

    # -- deletion and garbage collection ----------------------------------------------------------
    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        *,
        propagation: str | None = None,
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Delete an object and cascade to its dependents (ownerReferences) per the propagation policy."""
        obj = self.get(rt, namespace, name)
        md = obj["metadata"]
        if preconditions:
            if preconditions.get("uid") and preconditions["uid"] != md["uid"]:
                raise conflict(
                    rt,
                    name,
                    f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                    f"UID in object meta: {md['uid']}",
                )
            wanted_rv = preconditions.get("resourceVersion")
            if wanted_rv and wanted_rv != md["resourceVersion"]:
                raise conflict(
                    rt,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {wanted_rv}, "
                    f"ResourceVersion in object meta: {md['resourceVersion']}",
                )
        policy = propagation or rt.default_propagation
        if policy not in ("Background", "Foreground", "Orphan"):
            raise bad_request(f"unsupported propagationPolicy {policy!r}")
        if dry_run:
            return obj
        uid = md["uid"]
        if md.get("finalizers"):
            # Graceful deletion: the object stays, with a deletionTimestamp, until its finalizers are
            # removed; foreground deletion takes its dependents first (apiserver BeforeDelete, the
            # garbage collector's foregroundDeletion).
            marked = obj if md.get("deletionTimestamp") else self._mark_deleted(rt, obj)
            if policy == "Foreground":
                self._delete_dependents(uid, "Foreground")
            return marked
        if policy == "Foreground":
            self._delete_dependents(uid, "Foreground")
            return self._remove(rt, obj)
        if policy == "Orphan":
            self._orphan_dependents(uid)
            return self._remove(rt, obj)
        final = self._remove(rt, obj)
        self._delete_dependents(uid, "Background")
        return final

    def _mark_deleted(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        marked = clone(obj)
        marked["metadata"]["deletionTimestamp"] = rfc3339()
        marked["metadata"]["deletionGracePeriodSeconds"] = 0
        self._rv += 1
        marked["metadata"]["resourceVersion"] = str(self._rv)
        self._put(rt, marked, obj)
        self._emit(rt, "MODIFIED", marked, obj)
        return marked

    def _remove(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        md = obj["metadata"]
        key = (md.get("namespace", ""), md["name"])
        current = self._objects[rt.plural].pop(key, None)
        if current is None:
            return obj
        self._index(rt.plural, current, add=False)
        self._rv += 1
        final = dict(current)
        final["metadata"] = dict(current["metadata"], resourceVersion=str(self._rv))
        self._emit(rt, "DELETED", final, None)
        return final

    def _delete_dependents(self, owner_uid: str, policy: str) -> None:
        for plural, namespace, name in sorted(self._by_owner.get(owner_uid, ())):
            dependent_rt = BY_PLURAL[plural]
            if self.find(dependent_rt, namespace, name) is not None:
                self.delete(dependent_rt, namespace, name, propagation=policy)

    def _orphan_dependents(self, owner_uid: str) -> None:
        for plural, namespace, name in sorted(self._by_owner.get(owner_uid, ())):

            def drop_ref(obj: dict[str, Any]) -> None:
                refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
                if refs:
                    obj["metadata"]["ownerReferences"] = refs
                else:
                    obj["metadata"].pop("ownerReferences", None)

            self.mutate(BY_PLURAL[plural], namespace, name, drop_ref)

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        label_reqs: tuple[Requirement, ...] = (),
        field_reqs: tuple[Requirement, ...] = (),
        *,
        propagation: str | None = None,
    ) -> list[dict[str, Any]]:
        """Delete every matching object; returns their final states."""
        out = []
        for obj in self.list(rt, namespace, label_reqs, field_reqs):
            md = obj["metadata"]
            if self.find(rt, md.get("namespace", ""), md["name"]) is not None:
                out.append(self.delete(rt, md.get("namespace", ""), md["name"], propagation=propagation))
        return out

    def wipe(self) -> int:
        """Delete every object (DELETED events are sent); returns how many were removed."""
        removed = 0
        for rt in RESOURCES:
            for obj in list(self._objects[rt.plural].values()):
                self._remove(rt, obj)
                removed += 1
        self._by_owner.clear()
        return removed

    # -- watches ----------------------------------------------------------------------------------
    def compact(self) -> int:
        """Forget the event history: any older resourceVersion now gets 410 Expired."""
        self._history.clear()
        self._compacted_rv = self._rv
        return self._compacted_rv

    def open_watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        label_reqs: tuple[Requirement, ...],
        field_reqs: tuple[Requirement, ...],
        resource_version: str | None,
        *,
        queue_limit: int = DEFAULT_WATCH_QUEUE_LIMIT,
    ) -> Watcher:
        """Register a watch. ``""``/``"0"``: synthetic ADDED for current objects; else replay from history.

        A resourceVersion older than the retained history yields a watcher holding one ERROR line
        (410 Expired) that is already closed.
        """
        watcher = Watcher(rt, namespace, label_reqs, field_reqs, queue_limit)
        if resource_version in (None, "", "0"):
            for obj in self.list(rt, namespace, label_reqs, field_reqs):
                watcher.push(_dumps({"type": "ADDED", "object": obj}) + b"\n")
        else:
            try:
                since = int(resource_version)
            except ValueError:
                raise bad_request(f"resourceVersion: Invalid value: {resource_version!r}") from None
            if since < self._compacted_rv:
                status = expired(since, self._compacted_rv).status()
                watcher.push(_dumps({"type": "ERROR", "object": status}) + b"\n")
                watcher.close("expired")
                return watcher
            for event in self._history:
                if event.rv > since and event.resource == rt.plural:
                    watcher.offer(event)
        self._watchers[rt.plural].add(watcher)
        return watcher

    def close_watch(self, watcher: Watcher) -> None:
        self._watchers[watcher.rt.plural].discard(watcher)

    def watchers(self) -> Iterable[Watcher]:
        for bucket in self._watchers.values():
            yield from list(bucket)

    def drop_watches(self, reason: str = "dropped") -> int:
        """Close every open watch; returns how many there were."""
        count = 0
        for watcher in self.watchers():
            watcher.close(reason)
            count += 1
        return count
