"""GCS locations: bucket names (the one check every part of the provider applies,
https://cloud.google.com/storage/docs/buckets#naming), ``gs://bucket/prefix`` parsing and the Slurm
scripts' scratch-location convention."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

GCS_SCHEME = "gs://"
SLURM_SCRATCH_SUBDIR = "pathways-scratch/shared"


@dataclass(frozen=True)
class GcsLocation:
    """A ``gs://bucket/prefix`` location; ``prefix`` is ``""`` (bucket root) or ends with ``/``."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, value: object, *, param: str = "location") -> GcsLocation:
        """Parse and check a ``gs://`` location; raise ``ValueError`` naming ``param`` and the fix."""
        example = f"'gs://my-bucket/{SLURM_SCRATCH_SUBDIR}'"
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{param} must be a gs:// location such as {example}, got {value!r}")
        text = value.strip()
        if not text.startswith(GCS_SCHEME):
            raise ValueError(
                f"{param}={text!r} is not a gs:// location: the compilation cache lives in GCS; "
                f"use e.g. {example}"
            )
        bucket, _, path = text[len(GCS_SCHEME) :].partition("/")
        if error := bucket_name_error(bucket):
            raise ValueError(f"{param}={text!r}: the bucket name {bucket!r} {error}")
        return cls(bucket, normalize_prefix(path, param=param))

    @property
    def url(self) -> str:
        """The location as ``gs://bucket/prefix``."""
        return f"{GCS_SCHEME}{self.bucket}/{self.prefix}"

    @property
    def is_bucket_root(self) -> bool:
        """Whether the location is the whole bucket."""
        return self.prefix == ""

    @property
    def folder_name(self) -> str:
        """Last folder of the prefix (``""`` for the bucket root)."""
        return self.prefix.rstrip("/").rpartition("/")[2]


def normalize_prefix(path: str, *, param: str = "prefix") -> str:
    """Check a relative object prefix and return it ending with ``/`` (``""`` stays ``""``)."""
    if any(ch in path for ch in "\r\n\x00"):
        raise ValueError(f"{param}={path!r} contains a control character")
    if any(ch in path for ch in "*?[]"):
        raise ValueError(
            f"{param}={path!r} contains a wildcard: give a folder prefix, wildcards are not expanded"
        )
    stripped = path.strip("/")
    if not stripped:
        return ""
    parts = stripped.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{param}={path!r} has an empty, '.' or '..' path segment: give a plain folder path")
    return stripped + "/"


def scratch_location_for_bucket(bucket: object, *, param: str = "bucket") -> str:
    """The Slurm scripts' scratch location for a bucket: ``gs://BUCKET/pathways-scratch/shared``."""
    if not isinstance(bucket, str) or not bucket.strip():
        raise ValueError(f"{param} must be a bucket name such as 'my-bucket', got {bucket!r}")
    name = bucket.strip().removeprefix(GCS_SCHEME).strip("/")
    if "/" in name:
        raise ValueError(
            f"{param}={bucket!r} has a path: give only the bucket name, or pass the full location "
            "as scratch_location"
        )
    return GcsLocation.parse(f"{GCS_SCHEME}{name}/{SLURM_SCRATCH_SUBDIR}", param=param).url


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
