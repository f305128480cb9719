"""A Kubernetes API server stand-in over HTTP (aiohttp), with bearer-token auth and watch streams.

Serves core/v1 pods (with ``/log``), events and namespaces, batch/v1 jobs, JobSets, PathwaysJobs
(validated against the bundled CRD) and Kueue workloads, plus the ``/sandbox/`` control endpoints.
The simulated controllers run in the same event loop (see ``sandbox.kube.controllers``).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import math
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from sandbox.kube import control
from sandbox.kube.controllers import ControllerManager
from sandbox.kube.errors import ApiError, bad_request, status_object, unauthorized
from sandbox.kube.google import IssuedTokens
from sandbox.kube.meta import rfc3339_nano
from sandbox.kube.resources import BY_PATH, PODS, RESOURCES, SHORT_NAMES, ResourceType, groups
from sandbox.kube.selectors import parse_field_selector, parse_label_selector
from sandbox.kube.store import DEFAULT_HISTORY_LIMIT, Store

log = logging.getLogger(__name__)
#: Mutations that end objects, logged whatever ``--log-level`` says (``kube.log``).
audit = logging.getLogger(f"{__name__}.audit")
audit.setLevel(logging.INFO)

DEFAULT_WATCH_TIMEOUT = 1800.0
DEFAULT_BOOKMARK_INTERVAL = 10.0
HEALTH_PATHS = frozenset({"/healthz", "/livez", "/readyz"})
VERSION_INFO = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-pathways-sandbox",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.22.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

STATE_KEY: web.AppKey[ServerState] = web.AppKey("sandbox_state")


class RequestCounters:
    """API requests by verb and resource (``/sandbox`` and health checks are not counted)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total = 0
        self.unauthorized = 0
        self.by_verb: Counter[str] = Counter()
        self.by_resource: Counter[str] = Counter()
        self.by_verb_resource: Counter[str] = Counter()
        self.by_endpoint: Counter[str] = Counter()

    def count(self, verb: str, resource: str) -> None:
        self.total += 1
        self.by_verb[verb] += 1
        self.by_resource[resource] += 1
        self.by_verb_resource[f"{verb} {resource}"] += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "unauthorized": self.unauthorized,
            "by_verb": dict(sorted(self.by_verb.items())),
            "by_resource": dict(sorted(self.by_resource.items())),
            "by_verb_resource": dict(sorted(self.by_verb_resource.items())),
            "by_endpoint": dict(sorted(self.by_endpoint.items())),
        }


@dataclass
class ServerState:
    """Everything one stand-in instance holds."""

    token: str
    store: Store
    manager: ControllerManager | None
    counters: RequestCounters = field(default_factory=RequestCounters)
    bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL
    open_watches: int = 0
    started_at: float = field(default_factory=time.time)
    # Injected answers for the next API requests: (HTTP status, Retry-After seconds or None, the
    # HTTP method they answer or None for any).
    faults: list[tuple[int, float | None, str | None]] = field(default_factory=list)
    # Lost answers: creates of (namespace, plural) that are carried out but whose answer never
    # reaches the client (its connection is reset), as a proxy timing out or a partition does; how
    # many are still to lose for each.
    lost_answers: dict[tuple[str, str], int] = field(default_factory=dict)
    # With --google: the access tokens the Google token endpoint issued (also accepted).
    google_tokens: IssuedTokens | None = None
    # The cluster endpoint (public/private/dns) each TLS port stands for.
    endpoint_ports: dict[int, str] = field(default_factory=dict)
    # Longest watch the server keeps open, whatever the client asks (kube-apiserver's
    # --min-request-timeout); None: as long as asked.
    max_watch_seconds: float | None = None

    def authorized(self, request: web.Request) -> bool:
        """The request carries the server's own token, or a live access token Google issued."""
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            return False
        if hmac.compare_digest(given.encode(), self.token.encode()):
            return True
        return self.google_tokens is not None and self.google_tokens.valid(given)


def json_response(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    headers = CIMultiDict({"Content-Type": "application/json"})
    for warning in warnings or ():
        escaped = warning.replace('"', '\\"')
        headers.add("Warning", f'299 - "{escaped}"')
    return web.Response(body=json.dumps(body, separators=(",", ":")).encode(), status=status, headers=headers)


def error_response(err: ApiError) -> web.Response:
    return json_response(err.status(), status=err.code)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("true", "1", "yes")


# -- discovery ---------------------------------------------------------------------------------------


def _api_resource_list(group: str, version: str) -> dict[str, Any]:
    resources = []
    for rt in RESOURCES:
        if rt.group != group or rt.version != version:
            continue
        entry = {
            "name": rt.plural,
            "singularName": rt.kind.lower(),
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": sorted(rt.verbs),
        }
        if rt.plural in SHORT_NAMES:
            entry["shortNames"] = SHORT_NAMES[rt.plural]
        resources.append(entry)
        if rt.status_subresource:
            verbs = ["get", "patch", "update"] if "update" in rt.verbs else ["get"]
            resources.append(
                {
                    "name": f"{rt.plural}/status",
                    "singularName": "",
                    "namespaced": True,
                    "kind": rt.kind,
                    "verbs": verbs,
                }
            )
        if rt is PODS:
            resources.append(
                {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]}
            )
    if group == "" and version == "v1":
        resources.append(
            {
                "name": "namespaces",
                "singularName": "namespace",
                "namespaced": False,
                "kind": "Namespace",
                "verbs": ["get", "list"],
            }
        )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _api_group(group: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": listed,
        "preferredVersion": listed[0],
    }


def _discovery(parts: list[str]) -> dict[str, Any] | None:
    if parts == ["version"]:
        return VERSION_INFO
    if parts == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
        }
    if parts == ["api", "v1"]:
        return _api_resource_list("", "v1")
    if parts == ["apis"]:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [_api_group(g, vs) for g, vs in sorted(groups().items())],
        }
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups():
        return _api_group(parts[1], groups()[parts[1]])
    if len(parts) == 3 and parts[0] == "apis" and parts[2] in groups().get(parts[1], []):
        return _api_resource_list(parts[1], parts[2])
    return None


def _namespace_object(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": f"namespace-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


# -- routing -----------------------------------------------------------------------------------------


@dataclass
class Route:
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


def _parse_route(parts: list[str]) -> Route | str | None:
    """A resource route, ``"namespaces"``/``"namespace:<name>"`` for namespaces, or None (unknown path)."""
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = None
    if rest[0] == "namespaces":
        if group == "" and len(rest) == 1:
            return "namespaces"
        if group == "" and len(rest) == 2:
            return f"namespace:{rest[1]}"
        if len(rest) < 3:
            return None
        namespace, rest = rest[1], rest[2:]
    rt = BY_PATH.get((group, version, rest[0]))
    if rt is None or len(rest) > 3:
        return None
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) == 3 else None
    if namespace is None and name is not None and rt.namespaced:
        return None
    return Route(rt, namespace, name, sub)


def _verb(method: str, route: Route, watch: bool) -> str:
    if method == "GET":
        if watch:
            return "watch"
        return "get" if route.name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if route.name else "deletecollection"
    return method.lower()


async def _read_json(request: web.Request, required: bool = True) -> Any:
    raw = await request.read()
    if not raw.strip():
        if required:
            raise bad_request("the request body is empty")
        return None
    try:
        return json.loads(raw)
    except ValueError as err:
        raise bad_request(f"couldn't decode the request body as JSON: {err}") from None


async def handle(request: web.Request) -> web.StreamResponse:
    """Entry point for every request."""
    state = request.app[STATE_KEY]
    path = request.path
    if path in HEALTH_PATHS:
        return web.Response(text="ok")
    if not state.authorized(request):
        state.counters.unauthorized += 1
        return error_response(unauthorized())
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    endpoint = state.endpoint_ports.get(sockname[1]) if sockname else None
    if endpoint and not path.startswith("/sandbox"):
        state.counters.by_endpoint[endpoint] += 1
    try:
        if path == "/sandbox" or path.startswith("/sandbox/"):
            return await control.handle(request, state)
        fault = _take_fault(state, request.method)
        if fault is not None:
            return _injected_fault(state, fault)
        lose = request.method == "POST" and _take_lost_answer(state, path)
        response = await _dispatch(request, state)
        if request.method == "DELETE":
            _audit(request, response.status)
        if lose:
            audit.info("LOST ANSWER %s -> %d (the connection is reset)", path, response.status)
            if request.transport is not None:
                request.transport.abort()
            raise ConnectionResetError(f"the answer to POST {path} was lost on purpose")
        return response
    except ApiError as err:
        return error_response(err)
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception as exc:
        log.exception("internal error serving %s %s", request.method, path)
        return json_response(status_object(500, f"internal error: {exc}", "InternalError"), status=500)


def _audit(request: web.Request, status: int) -> None:
    """One line per delete, as kube-apiserver's audit log keeps one (user agent and source)."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    source = f"{peer[0]}:{peer[1]}" if peer else "?"
    agent = request.headers.get("User-Agent", "")
    audit.info("DELETE %s?%s -> %d from %s (%s)", request.path, request.query_string, status, source, agent)


def _take_lost_answer(state: ServerState, path: str) -> bool:
    """Whether the answer to this create (``.../namespaces/<ns>/<plural>``) is to be lost."""
    parts = [p for p in path.split("/") if p]
    if len(parts) < 3 or parts[-3] != "namespaces":
        return False
    key = (parts[-2], parts[-1])
    left = state.lost_answers.get(key, 0)
    if left <= 0:
        return False
    state.lost_answers[key] = left - 1
    return True


def _take_fault(state: ServerState, method: str) -> tuple[int, float | None] | None:
    """The first injected answer for a request with ``method``, removed from the queue."""
    for index, (code, retry_after, only) in enumerate(state.faults):
        if only is None or only == method:
            del state.faults[index]
            return code, retry_after
    return None


def _injected_fault(state: ServerState, fault: tuple[int, float | None]) -> web.Response:
    """The answer an overloaded or failing API server gives: 429 with ``Retry-After`` (API priority
    and fairness), a 5xx ``Status``, or a 403 (a role without the verb)."""
    code, retry_after = fault
    state.counters.count("fault", str(code))
    reason = {429: "TooManyRequests", 403: "Forbidden", 500: "InternalError", 503: "ServiceUnavailable"}.get(
        code, "InternalError"
    )
    message = {
        429: "Too many requests, please try again later.",
        403: "the request is forbidden by the cluster's policy",
    }.get(code, "the server is unavailable")
    response = json_response(status_object(code, message, reason), status=code)
    if retry_after is not None:
        response.headers["Retry-After"] = str(math.ceil(retry_after))  # delay-seconds: an integer
    return response


async def _dispatch(request: web.Request, state: ServerState) -> web.StreamResponse:
    parts = [p for p in request.path.split("/") if p]
    discovery = _discovery(parts)
    if discovery is not None:
        state.counters.count("get", "/" + "/".join(parts))
        if request.method != "GET":
            raise ApiError(405, "the server does not allow this method on the requested resource")
        return json_response(discovery)
    route = _parse_route(parts)
    if route is None:
        state.counters.count(request.method.lower(), "unknown")
        raise ApiError(404, "the server could not find the requested resource", "NotFound", {})
    if isinstance(route, str):
        return _namespaces(request, state, route)
    query = request.query
    watch = _truthy(query.get("watch"))
    if (
        route.subresource not in (None, "status", "log")
        or (route.subresource == "log" and route.rt is not PODS)
        or (route.subresource == "status" and not route.rt.status_subresource)
    ):
        raise ApiError(404, "the server could not find the requested resource", "NotFound", {})
    verb = _verb(request.method, route, watch)
    resource = f"{route.rt.plural}/{route.subresource}" if route.subresource else route.rt.plural
    state.counters.count(verb, resource)
    if route.subresource == "log":
        if request.method != "GET":
            raise ApiError(405, "the server does not allow this method on the requested resource")
        return _pod_log(request, state, route)
    allowed = route.rt.verbs
    if route.subresource == "status":
        allowed = frozenset({"get"}) | (
            frozenset({"update", "patch"}) if "update" in route.rt.verbs else frozenset()
        )
    if verb not in allowed:
        raise ApiError(
            405, "the server does not allow this method on the requested resource", "MethodNotAllowed"
        )
    if route.rt.namespaced and route.namespace is None and verb not in ("list", "watch"):
        raise ApiError(404, "the server could not find the requested resource", "NotFound", {})
    store = state.store
    rt, ns = route.rt, route.namespace or ""
    dry_run = bool(query.getall("dryRun", []))
    strict = query.get("fieldValidation", "") == "Strict"
    warnings: list[str] = []
    if verb == "watch":
        field_selector = query.get("fieldSelector")
        if route.name:
            field_selector = ",".join(filter(None, [field_selector, f"metadata.name={route.name}"]))
        return await _watch(request, state, rt, route.namespace, query.get("labelSelector"), field_selector)
    if verb == "list":
        return _list(request, state, rt, route.namespace)
    if verb == "get":
        return json_response(store.get(rt, ns, route.name or ""))
    if verb == "create":
        if route.name:
            raise ApiError(405, "the server does not allow this method on the requested resource")
        body = await _read_json(request)
        created = store.create(rt, body, namespace=ns, dry_run=dry_run, strict=strict, warnings=warnings)
        return json_response(created, status=201, warnings=warnings)
    if verb == "update":
        body = await _read_json(request)
        updated = store.update(
            rt,
            ns,
            route.name or "",
            body,
            subresource=route.subresource,
            dry_run=dry_run,
            strict=strict,
            warnings=warnings,
        )
        return json_response(updated, warnings=warnings)
    if verb == "patch":
        body = await _read_json(request)
        patched = store.patch(
            rt,
            ns,
            route.name or "",
            body,
            request.headers.get("Content-Type", ""),
            subresource=route.subresource,
            dry_run=dry_run,
            strict=strict,
            warnings=warnings,
        )
        return json_response(patched, warnings=warnings)
    if verb in ("delete", "deletecollection"):
        options = await _read_json(request, required=False) or {}
        if not isinstance(options, dict):
            raise bad_request("DeleteOptions must be a JSON object")
        policy = query.get("propagationPolicy") or options.get("propagationPolicy")
        orphan = query.get("orphanDependents") or options.get("orphanDependents")
        if policy is None and orphan is not None:
            policy = "Orphan" if _truthy(str(orphan)) else "Background"
        if verb == "delete":
            deleted = store.delete(
                rt,
                ns,
                route.name or "",
                propagation=policy,
                preconditions=options.get("preconditions"),
                dry_run=dry_run,
            )
            return json_response(deleted)
        items = store.delete_collection(
            rt,
            route.namespace,
            parse_label_selector(query.get("labelSelector")),
            parse_field_selector(query.get("fieldSelector")),
            propagation=policy,
        )
        return json_response(
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": store.resource_version},
                "items": items,
            }
        )
    raise ApiError(405, "the server does not allow this method on the requested resource")


def _namespaces(request: web.Request, state: ServerState, route: str) -> web.Response:
    if request.method != "GET":
        state.counters.count(request.method.lower(), "namespaces")
        raise ApiError(405, "the server does not allow this method on the requested resource")
    if route == "namespaces":
        state.counters.count("list", "namespaces")
        return json_response(
            {
                "kind": "NamespaceList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": state.store.resource_version},
                "items": [_namespace_object(n) for n in state.store.namespaces()],
            }
        )
    state.counters.count("get", "namespaces")
    return json_response(_namespace_object(route.split(":", 1)[1]))


def _list(request: web.Request, state: ServerState, rt: ResourceType, namespace: str | None) -> web.Response:
    query = request.query
    items = state.store.list(
        rt,
        namespace,
        parse_label_selector(query.get("labelSelector")),
        parse_field_selector(query.get("fieldSelector")),
    )
    metadata: dict[str, Any] = {"resourceVersion": state.store.resource_version}
    token = query.get("continue")
    if token:
        try:
            after = json.loads(base64.urlsafe_b64decode(token.encode()).decode())
        except ValueError:
            raise ApiError(
                410, "the provided continue parameter is too old or malformed", "Expired"
            ) from None
        key = (after.get("ns", ""), after.get("name", ""))
        items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > key]
    limit = int(query.get("limit") or 0)
    if limit > 0 and len(items) > limit:
        last = items[limit - 1]["metadata"]
        payload = json.dumps({"ns": last.get("namespace", ""), "name": last["name"]}).encode()
        metadata["continue"] = base64.urlsafe_b64encode(payload).decode()
        metadata["remainingItemCount"] = len(items) - limit
        items = items[:limit]
    return json_response(
        {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": metadata, "items": items}
    )


def _pod_log(request: web.Request, state: ServerState, route: Route) -> web.Response:
    query = request.query
    pod = state.store.get(PODS, route.namespace or "", route.name or "")
    name = pod["metadata"]["name"]
    spec = pod.get("spec") or {}
    containers = [c.get("name") for c in spec.get("containers") or []]
    init_containers = [c.get("name") for c in spec.get("initContainers") or []]
    container = query.get("container")
    if not container:
        if len(containers) != 1:
            message = (
                f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
            )
            if init_containers:
                message += f" or one of the init containers: [{' '.join(init_containers)}]"
            raise bad_request(message)
        container = containers[0]
    if container not in containers and container not in init_containers:
        raise bad_request(f"container {container} is not valid for pod {name}")
    statuses = (pod.get("status") or {}).get("containerStatuses", []) + (pod.get("status") or {}).get(
        "initContainerStatuses", []
    )
    if not any(s.get("name") == container for s in statuses):
        reason = (
            "ContainerCreating" if (pod.get("status") or {}).get("phase") == "Pending" else "PodInitializing"
        )
        raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
    lines = state.manager.sim.logs.read(pod["metadata"]["uid"], container) if state.manager else []
    if query.get("sinceSeconds"):
        cutoff = time.time() - float(query["sinceSeconds"])
        lines = [(ts, text) for ts, text in lines if ts >= cutoff]
    if query.get("tailLines"):
        tail = int(query["tailLines"])
        lines = lines[-tail:] if tail > 0 else []
    with_stamps = _truthy(query.get("timestamps"))
    text = "".join(f"{rfc3339_nano(ts)} {line}\n" if with_stamps else f"{line}\n" for ts, line in lines)
    body = text.encode()
    if query.get("limitBytes"):
        body = body[: int(query["limitBytes"])]
    return web.Response(body=body, content_type="text/plain", charset="utf-8")


async def _watch(
    request: web.Request,
    state: ServerState,
    rt: ResourceType,
    namespace: str | None,
    label_selector: str | None,
    field_selector: str | None,
) -> web.StreamResponse:
    query = request.query
    label_reqs, field_reqs = parse_label_selector(label_selector), parse_field_selector(field_selector)
    timeout = float(query.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT)
    if state.max_watch_seconds is not None:
        timeout = min(timeout, state.max_watch_seconds)
    bookmarks = _truthy(query.get("allowWatchBookmarks"))
    watcher = state.store.open_watch(rt, namespace, label_reqs, field_reqs, query.get("resourceVersion"))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, timeout)
    next_bookmark = loop.time() + state.bookmark_interval
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    state.open_watches += 1
    try:
        await response.prepare(request)
        while True:
            if watcher.lines:
                chunk = b"".join(watcher.lines)
                watcher.lines.clear()
                await response.write(chunk)
            if watcher.closed in ("dropped", "reset", "shutdown"):
                transport = request.transport
                if transport is not None:
                    sock = transport.get_extra_info("socket")
                    if watcher.closed == "reset" and sock is not None:  # SO_LINGER 0: close sends an RST
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    transport.abort()
                return response
            if watcher.closed:
                break
            now = loop.time()
            if now >= deadline:
                break
            if bookmarks and now >= next_bookmark:
                bookmark = {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": rt.kind,
                        "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": state.store.resource_version},
                    },
                }
                await response.write(json.dumps(bookmark, separators=(",", ":")).encode() + b"\n")
                next_bookmark = now + state.bookmark_interval
            wait = deadline - now
            if bookmarks:
                wait = min(wait, max(0.0, next_bookmark - now))
            await watcher.wait(wait)
        await response.write_eof()
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        state.open_watches -= 1
        state.store.close_watch(watcher)
    return response


def create_app(
    token: str,
    *,
    controllers: bool = True,
    history_limit: int = DEFAULT_HISTORY_LIMIT,
    bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL,
    google_tokens: IssuedTokens | None = None,
    max_watch_seconds: float | None = None,
) -> web.Application:
    """The stand-in as an aiohttp application (controllers start with the app)."""
    if not token:
        raise ValueError("a bearer token is required")
    store = Store(history_limit=history_limit)
    manager = ControllerManager(store) if controllers else None
    state = ServerState(
        token=token,
        store=store,
        manager=manager,
        bookmark_interval=bookmark_interval,
        google_tokens=google_tokens,
        max_watch_seconds=max_watch_seconds,
    )
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[STATE_KEY] = state
    app.router.add_route("*", "/{tail:.*}", handle)

    async def on_startup(_: web.Application) -> None:
        if manager is not None:
            manager.start()

    async def on_shutdown(_: web.Application) -> None:
        store.drop_watches("shutdown")
        if manager is not None:
            await manager.stop()

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    return app


__all__ = ["STATE_KEY", "ServerState", "create_app"]
