"""API errors rendered as Kubernetes ``Status`` objects."""

from __future__ import annotations

from typing import Any

from sandbox.kube.resources import ResourceType

_REASON_FOR_CODE = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    500: "InternalError",
}


class ApiError(Exception):
    """An error the API server answers with a ``Status`` body."""

    def __init__(self, code: int, message: str, reason: str | None = None, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASON_FOR_CODE.get(code, "Unknown")
        self.details = details

    def status(self) -> dict[str, Any]:
        """The ``Status`` object for this error."""
        return status_object(self.code, self.message, self.reason, self.details)


def status_object(code: int, message: str, reason: str, details: dict | None = None) -> dict[str, Any]:
    """A failure ``Status`` object."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def _details(rt: ResourceType, name: str, kind: str | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": kind or rt.plural}
    if rt.group:
        details["group"] = rt.group
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, f'{rt.qualified} "{name}" not found', "NotFound", _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, f'{rt.qualified} "{name}" already exists', "AlreadyExists", _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}',
        "Conflict",
        _details(rt, name),
    )


def invalid(rt: ResourceType, name: str, causes: list[dict[str, str]], prefix: str = "") -> ApiError:
    """422 ``Invalid`` naming every offending field, as the API server (or a webhook, ``prefix``) words it."""
    texts = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details = _details(rt, name, rt.kind)
    details["causes"] = causes
    return ApiError(422, f'{prefix}{rt.qualified_kind} "{name}" is invalid: {joined}', "Invalid", details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def expired(requested: int, oldest: int) -> ApiError:
    return ApiError(410, f"too old resource version: {requested} ({oldest})", "Expired")


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")
