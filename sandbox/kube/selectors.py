"""Label and field selectors, parsed from query strings as the API server accepts them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sandbox.kube.errors import bad_request

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"[-A-Za-z0-9_.]*"
_SET_RE = re.compile(rf"^(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQ_RE = re.compile(rf"^(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})$")
_EXISTS_RE = re.compile(rf"^(?P<not>!)?\s*(?P<key>{_KEY})$")
_FIELD_RE = re.compile(r"^(?P<path>[A-Za-z0-9_.\-\[\]]+)\s*(?P<op>==|=|!=)\s*(?P<value>.*)$")


@dataclass(frozen=True)
class Requirement:
    """One selector term ``key op values``; op: ``=``, ``!=``, ``in``, ``notin``, ``exists`` or ``!``."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, value: str | None) -> bool:
        if self.op == "exists":
            return value is not None
        if self.op == "!":
            return value is None
        if self.op == "=":
            return value == self.values[0]
        if self.op == "!=":
            return value != self.values[0]
        if self.op == "in":
            return value is not None and value in self.values
        if self.op == "notin":
            return value is None or value not in self.values
        return False


def _split_terms(text: str) -> list[str]:
    terms, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    terms.append("".join(current).strip())
    return [t for t in terms if t]


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    """Parse ``a=b,c!=d,e in (x,y),f notin (z),g,!h``; raise a 400 ``ApiError`` on bad syntax."""
    if not text:
        return ()
    out = []
    for term in _split_terms(text):
        if m := _SET_RE.match(term):
            values = tuple(v.strip() for v in m["values"].split(",") if v.strip())
            out.append(Requirement(m["key"], m["op"], values))
        elif m := _EQ_RE.match(term):
            out.append(Requirement(m["key"], "!=" if m["op"] == "!=" else "=", (m["value"],)))
        elif m := _EXISTS_RE.match(term):
            out.append(Requirement(m["key"], "!" if m["not"] else "exists"))
        else:
            raise bad_request(f"unable to parse requirement: {term!r}")
    return tuple(out)


def parse_field_selector(text: str | None) -> tuple[Requirement, ...]:
    """Parse ``metadata.name=x,status.phase!=Failed``; raise a 400 ``ApiError`` on bad syntax."""
    if not text:
        return ()
    out = []
    for term in _split_terms(text):
        m = _FIELD_RE.match(term)
        if not m:
            raise bad_request(f"invalid field selector: {term!r}")
        out.append(Requirement(m["path"], "!=" if m["op"] == "!=" else "=", (m["value"],)))
    return tuple(out)


def field_value(obj: dict[str, Any], path: str) -> str:
    """Value at a dotted path as a string (``""`` when absent), as field selectors compare it."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, dict):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def matches(
    obj: dict[str, Any], label_reqs: tuple[Requirement, ...], field_reqs: tuple[Requirement, ...]
) -> bool:
    """True when ``obj`` satisfies every label and field requirement."""
    if label_reqs:
        obj_labels = (obj.get("metadata") or {}).get("labels") or {}
        if not all(req.matches(obj_labels.get(req.key)) for req in label_reqs):
            return False
    return all(req.matches(field_value(obj, req.key)) for req in field_reqs)
