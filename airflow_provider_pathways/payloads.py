"""What a triggerer and a worker send each other, read so that different versions of this provider
understand each other: a reader takes the keys it knows and ignores those a newer version added."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any


def known_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``data`` that name fields of the dataclass ``cls``; the others, which a newer
    version may have added, are dropped."""
    known = {f.name for f in fields(cls)}
    return {key: value for key, value in data.items() if key in known}
