"""The ``/sandbox/`` control endpoints (same bearer token as the API) for tests and benchmarks.

- ``POST /sandbox/watches/drop``: abruptly close every open watch connection.
- ``POST /sandbox/compact``: forget the event history (older resourceVersions get 410 Expired).
- ``GET /sandbox/requests``, ``POST /sandbox/requests/reset``: API request counters.
- ``POST /sandbox/reset``: delete every object and forget simulation state.
- ``GET /sandbox/state``: object counts, resourceVersions, open watches.
- ``POST /sandbox/namespaces/{ns}/jobsets/{name}/{action}``: scenario actions (see ``controllers.scenarios``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from sandbox.kube.errors import ApiError

if TYPE_CHECKING:
    from sandbox.kube.apiserver import ServerState


def _json(body: object, status: int = 200) -> web.Response:
    return web.json_response(body, status=status)


def _require(request: web.Request, method: str) -> None:
    if request.method != method:
        raise ApiError(405, f"use {method} for {request.path}", "MethodNotAllowed")


async def handle(request: web.Request, state: ServerState) -> web.Response:
    """Serve one ``/sandbox/...`` request."""
    parts = [p for p in request.path.split("/") if p][1:]
    store = state.store
    if parts == ["watches", "drop"]:
        _require(request, "POST")
        return _json({"dropped": store.drop_watches("dropped")})
    if parts == ["compact"]:
        _require(request, "POST")
        return _json({"compactedResourceVersion": str(store.compact())})
    if parts == ["requests"]:
        _require(request, "GET")
        return _json(state.counters.snapshot())
    if parts == ["requests", "reset"]:
        _require(request, "POST")
        state.counters.reset()
        return _json(state.counters.snapshot())
    if parts == ["reset"]:
        _require(request, "POST")
        if state.manager is not None:
            state.manager.reset()
        removed = store.wipe()
        if state.manager is not None:
            state.manager.reset()
        return _json({"deleted": removed, "resourceVersion": store.resource_version})
    if parts == ["state"]:
        _require(request, "GET")
        return _json(
            {
                "resourceVersion": store.resource_version,
                "compactedResourceVersion": str(store.compacted_resource_version),
                "objects": store.counts(),
                "openWatches": state.open_watches,
            }
        )
    if len(parts) == 5 and parts[0] == "namespaces" and parts[2] == "jobsets":
        _require(request, "POST")
        if state.manager is None:
            raise ApiError(409, "controllers are disabled on this stand-in", "Conflict")
        result = state.manager.run_action(parts[1], parts[3], parts[4], dict(request.query))
        return _json(result)
    raise ApiError(404, f"unknown sandbox endpoint {request.path}", "NotFound")
