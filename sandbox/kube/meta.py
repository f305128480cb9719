"""Small helpers for object metadata, timestamps and copies of JSON-like values."""

from __future__ import annotations

import random
import time
from datetime import datetime, timezone
from typing import Any

# The alphabet Kubernetes uses for generated name suffixes (no vowels, no confusable digits).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def clone(value: Any) -> Any:
    """Deep copy of a JSON-like value (dicts, lists, scalars)."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def rfc3339(ts: float | None = None) -> str:
    """RFC 3339 timestamp with second precision, as in object metadata and conditions."""
    moment = datetime.fromtimestamp(time.time() if ts is None else ts, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_nano(ts: float) -> str:
    """RFC 3339 timestamp with nanosecond digits, as in container log lines."""
    moment = datetime.fromtimestamp(ts, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond:06d}000Z"


def random_suffix(length: int = 5) -> str:
    """Random name suffix such as the ``x7b2k`` of a generated pod name."""
    return "".join(random.choice(_SUFFIX_ALPHABET) for _ in range(length))


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` of an object (empty dict when absent)."""
    return obj.get("metadata") or {}


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return meta(obj).get("labels") or {}


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def name_of(obj: dict[str, Any]) -> str:
    return meta(obj).get("name", "")


def namespace_of(obj: dict[str, Any]) -> str:
    return meta(obj).get("namespace", "")


def uid_of(obj: dict[str, Any]) -> str:
    return meta(obj).get("uid", "")


def owner_reference(owner: dict[str, Any], *, controller: bool = True) -> dict[str, Any]:
    """An ``ownerReferences`` entry pointing at ``owner``."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": name_of(owner),
        "uid": uid_of(owner),
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def controller_owner(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The owner reference marked ``controller: true``, if any."""
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def owned_by(obj: dict[str, Any], owner_uid: str) -> bool:
    return any(ref.get("uid") == owner_uid for ref in meta(obj).get("ownerReferences") or [])
