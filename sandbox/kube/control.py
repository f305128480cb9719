"""The ``/sandbox/`` control endpoints (same bearer token as the API) for tests and benchmarks.

- ``POST /sandbox/watches/drop[?how=eof|reset]``: cut every open watch connection mid-stream, as a
  load balancer or proxy cutting a long request does: closed before the chunked body's end (``eof``,
  the default), or reset (``reset``: an RST).
- ``POST /sandbox/faults?status=503&count=1[&retry_after=S][&verb=GET][&clear=1]``: answer the next
  ``count`` API requests (with ``verb``: of that HTTP method only) with ``status``.
- ``POST /sandbox/lose-answers?namespace=NS&resource=PLURAL&count=1``: carry out the next ``count``
  creates of ``PLURAL`` in ``NS`` but lose their answers (the client's connection is reset; the
  audit log says ``LOST ANSWER``).
- ``POST /sandbox/compact``: forget the event history (older resourceVersions get 410 Expired).
- ``GET /sandbox/requests``, ``POST /sandbox/requests/reset``: API request counters.
- ``POST /sandbox/reset``: delete every object and forget simulation state.
- ``GET /sandbox/state``: object counts, resourceVersions, open watches.
- ``GET /sandbox/kueue``: the simulated Kueue's quotas and Workloads; ``POST
  /sandbox/kueue?queue=Q&quota_chips=N`` sets the TPU chips the admitted Workloads of LocalQueue ``Q``
  may hold together (``none``: unlimited).
- ``POST /sandbox/namespaces/{ns}/jobsets/{name}/{action}``: scenario actions (see ``controllers.scenarios``).
- With ``--google``: ``GET /sandbox/google`` (the access tokens issued, valid, revoked, rejected),
  ``POST /sandbox/google/revoke`` (revoke every access token issued so far), ``POST
  /sandbox/google/refuse?on=true|false`` (the token endpoint refuses every grant, as for a disabled
  service account, or grants again).
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
        how = request.query.get("how", "eof")
        if how not in ("eof", "reset"):
            raise ApiError(400, "how must be eof or reset", "BadRequest")
        return _json({"dropped": store.drop_watches("dropped" if how == "eof" else "reset")})
    if parts == ["faults"]:
        _require(request, "POST")
        try:
            code = int(request.query.get("status", "503"))
            count = int(request.query.get("count", "1"))
            raw = request.query.get("retry_after")
            retry_after = float(raw) if raw not in (None, "") else None
        except ValueError:
            raise ApiError(400, "status, count and retry_after must be numbers", "BadRequest") from None
        if request.query.get("clear"):
            state.faults.clear()
        only = (request.query.get("verb") or "").upper() or None
        state.faults.extend([(code, retry_after, only)] * max(count, 0))
        return _json({"pending": len(state.faults)})
    if parts == ["lose-answers"]:
        _require(request, "POST")
        key = (request.query.get("namespace", ""), request.query.get("resource", ""))
        try:
            count = int(request.query.get("count", "1"))
        except ValueError:
            raise ApiError(400, "count must be a number", "BadRequest") from None
        state.lost_answers[key] = state.lost_answers.get(key, 0) + max(count, 0)
        return _json({"pending": state.lost_answers[key]})
    if parts and parts[0] == "google":
        return _google(request, state, parts[1:])
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
                "jobsetCreateFailures": state.manager.pathways.create_failures() if state.manager else {},
            }
        )
    if parts == ["kueue"]:
        if state.manager is None:
            raise ApiError(409, "controllers are disabled on this stand-in", "Conflict")
        kueue = state.manager.kueue
        if request.method == "POST":
            queue = request.query.get("queue", "")
            raw = request.query.get("quota_chips", "none")
            try:
                if raw == "none":
                    kueue.quotas.pop(queue, None)
                else:
                    kueue.quotas[queue] = max(0, int(raw))
            except ValueError:
                raise ApiError(
                    400, f"quota_chips must be an integer or 'none', got {raw!r}", "BadRequest"
                ) from None
            kueue.enqueue(("schedule",))
        else:
            _require(request, "GET")
        return _json(kueue.state())
    if len(parts) == 5 and parts[0] == "namespaces" and parts[2] == "jobsets":
        _require(request, "POST")
        if state.manager is None:
            raise ApiError(409, "controllers are disabled on this stand-in", "Conflict")
        result = state.manager.run_action(parts[1], parts[3], parts[4], dict(request.query))
        return _json(result)
    raise ApiError(404, f"unknown sandbox endpoint {request.path}", "NotFound")


def _google(request: web.Request, state: ServerState, parts: list[str]) -> web.Response:
    tokens = state.google_tokens
    if tokens is None:
        raise ApiError(409, "this stand-in runs without --google", "Conflict")
    if parts == []:
        _require(request, "GET")
    elif parts == ["revoke"]:
        _require(request, "POST")
        tokens.revoke()
    elif parts == ["refuse"]:
        _require(request, "POST")
        tokens.refusing = request.query.get("on", "true").lower() in ("true", "1", "yes")
    elif parts == ["fail-cluster"]:
        _require(request, "POST")
        tokens.cluster_faults += [int(request.query.get("status", "500"))] * int(
            request.query.get("count", "1")
        )
    else:
        raise ApiError(404, f"unknown sandbox endpoint {request.path}", "NotFound")
    return _json(tokens.snapshot())
