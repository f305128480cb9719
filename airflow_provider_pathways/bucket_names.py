"""Cloud Storage bucket names: the one check every part of the provider applies
(https://cloud.google.com/storage/docs/buckets#naming)."""

from __future__ import annotations

import ipaddress
import re

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$")


def bucket_name_error(bucket: str) -> str | None:
    """Why ``bucket`` is not a valid Cloud Storage bucket name."""
    if not bucket:
        return "is empty"
    if len(bucket) < 3 or len(bucket) > 222:
        return f"is {len(bucket)} characters; bucket names have 3 to 63 (222 with dots)"
    if not _BUCKET.fullmatch(bucket):
        return "may only contain lowercase letters, digits, '-', '_' and '.', and must start and end alnum"
    parts = bucket.split(".")
    if len(parts) == 1 and len(bucket) > 63:
        return f"is {len(bucket)} characters; names without dots have at most 63"
    if any(len(part) > 63 or not part for part in parts):
        return "has a dot-separated part that is empty or longer than 63 characters"
    try:
        ipaddress.ip_address(bucket)
    except ValueError:
        pass
    else:
        return "is an IP address"
    if bucket.startswith("goog") or "google" in bucket or "g00gle" in bucket:
        return "may not start with 'goog' or contain 'google'"
    return None
