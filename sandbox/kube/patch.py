"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902)."""

from __future__ import annotations

from typing import Any

from sandbox.kube.errors import ApiError, bad_request
from sandbox.kube.meta import clone


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply a JSON merge patch: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _decode(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [_decode(t) for t in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str], path: str) -> tuple[Any, str]:
    current = doc
    for token in tokens[:-1]:
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            raise ApiError(
                422, f"the server rejected our request due to an error in our request: path {path!r}"
            )
    return current, tokens[-1]


def _get(doc: Any, path: str) -> Any:
    current = doc
    for token in _pointer(path):
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            raise ApiError(
                422, f"the server rejected our request due to an error in our request: path {path!r}"
            )
    return current


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return clone(value)
    parent, last = _parent(doc, tokens, path)
    if isinstance(parent, dict):
        parent[last] = clone(value)
    elif isinstance(parent, list):
        index = len(parent) if last == "-" else int(last) if last.isdigit() else -1
        if not 0 <= index <= len(parent):
            raise ApiError(
                422, f"the server rejected our request due to an error in our request: path {path!r}"
            )
        parent.insert(index, clone(value))
    else:
        raise ApiError(422, f"the server rejected our request due to an error in our request: path {path!r}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    parent, last = _parent(doc, tokens, path)
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        del parent[int(last)]
    else:
        raise ApiError(422, f"the server rejected our request due to an error in our request: path {path!r}")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """Apply a JSON patch (``add``, ``remove``, ``replace``, ``move``, ``copy``, ``test``)."""
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations")
    doc = clone(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid json patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, op.get("value"))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc = _remove(doc, path) if _pointer(path) else doc
            doc = _add(doc, path, op.get("value"))
        elif kind in ("move", "copy"):
            value = clone(_get(doc, op.get("from", "")))
            if kind == "move":
                doc = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise ApiError(422, f"the server rejected our request: test operation failed at {path!r}")
        else:
            raise bad_request(f"unknown json patch operation {kind!r}")
    return doc
