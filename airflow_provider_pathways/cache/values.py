"""Ages, sizes and counts given by users: parsed and range-checked, with errors naming the parameter."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from decimal import Decimal

DEFAULT_MIN_AGE = timedelta(hours=1)
MAX_AGE = timedelta(days=36500)
MAX_AGE_TEXT = "100 years (36500d)"
MAX_CACHE_BYTES = 2**60
MAX_CACHE_BYTES_TEXT = "1 EiB (2**60 bytes)"
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(w|d|h|m|s)", re.IGNORECASE)
_DURATION_UNITS = {"w": 604800.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtpe]i?b|b)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
    "eb": 10**18,
    "eib": 2**60,
}


def _age_error(param: str, value: object, problem: str) -> ValueError:
    return ValueError(
        f"{param}={value!r} {problem}: give an age from 0 to {MAX_AGE_TEXT}, such as '7d', '36h', "
        "a number of seconds or a timedelta"
    )


def check_age(value: timedelta, *, param: str) -> timedelta:
    """Return ``value`` if it is an age from 0 to :data:`MAX_AGE`; else ``ValueError`` naming ``param``."""
    if value < timedelta(0):
        raise _age_error(param, value, "is negative")
    if value > MAX_AGE:
        raise _age_error(param, value, "is too long")
    return value


def parse_duration(value: object, *, param: str) -> timedelta:
    """An age from 0 to :data:`MAX_AGE` (100 years) from a timedelta, seconds, or text such as ``'7d'``.

    Text is a number of seconds or parts with units ``w d h m s`` (``'36h'``, ``'1d12h'``).
    Anything else (NaN, infinity, negative, longer than 100 years, not a duration) raises
    ``ValueError`` naming ``param`` and the allowed range.
    """
    if isinstance(value, timedelta):
        return check_age(value, param=param)
    if isinstance(value, bool):
        raise _age_error(param, value, "is not a duration")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"-?\d+(\.\d+)?", text):
            seconds = float(text)
        else:
            negative = text.startswith("-")
            body = text[1:] if negative else text
            parts = _DURATION_PART.findall(body)
            if not parts or _DURATION_PART.sub("", body).strip():
                raise _age_error(param, value, "is not a duration")
            seconds = sum(float(num) * _DURATION_UNITS[unit.lower()] for num, unit in parts)
            seconds = -seconds if negative else seconds
    else:
        raise _age_error(param, value, "is not a duration")
    if not math.isfinite(seconds):
        raise _age_error(param, value, "is not a finite duration")
    if seconds < 0:
        raise _age_error(param, value, "is negative")
    if seconds > MAX_AGE.total_seconds():
        raise _age_error(param, value, "is too long")
    return timedelta(seconds=seconds)


def _size_error(param: str, value: object, problem: str) -> ValueError:
    return ValueError(
        f"{param}={value!r} {problem}: give a whole number of bytes from 0 to {MAX_CACHE_BYTES_TEXT}, "
        "or text such as '500GiB' or '2TB'"
    )


def parse_size(value: object, *, param: str) -> int:
    """A byte count from 0 to :data:`MAX_CACHE_BYTES` from an int or text such as ``'500GiB'``, ``'1.5TB'``.

    Anything else (NaN, infinity, fractions of a byte, negative, more than 1 EiB, not a size)
    raises ``ValueError`` naming ``param`` and the allowed range.
    """
    if isinstance(value, bool):
        raise _size_error(param, value, "is not a size")
    if isinstance(value, int):
        result = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _size_error(param, value, "is not a finite size")
        if not value.is_integer():
            raise _size_error(param, value, "is not a whole number of bytes")
        result = int(value)
    elif isinstance(value, str):
        text = value.strip()
        if text.startswith("-"):
            raise _size_error(param, value, "is negative")
        match = _SIZE.match(text)
        if not match:
            raise _size_error(param, value, "is not a size")
        number, unit = match.groups()
        amount = Decimal(number) * _SIZE_UNITS[(unit or "b").lower()]
        if amount > MAX_CACHE_BYTES:
            raise _size_error(param, value, "is too large")
        if amount != amount.to_integral_value():
            raise _size_error(param, value, "is not a whole number of bytes")
        result = int(amount)
    else:
        raise _size_error(param, value, "is not a size")
    if result < 0:
        raise _size_error(param, value, "is negative")
    if result > MAX_CACHE_BYTES:
        raise _size_error(param, value, "is too large")
    return result


def check_count(value: object, *, param: str, low: int, high: int | None = None) -> int:
    """``value`` if it is a whole number from ``low`` to ``high``, else ``ValueError`` naming ``param``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        allowed = f"from {low} to {high}" if high is not None else f"of {low} or more"
        raise ValueError(f"{param}={value!r} must be a whole number {allowed}")
    return value


def format_bytes(size: int) -> str:
    """Human-readable binary size, e.g. ``1.5 GiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover
