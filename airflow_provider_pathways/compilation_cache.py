"""Compilation-cache layout, input checks and cleanup planning for GCS scratch locations.

Pure logic, no Google client imports: the hook feeds listed objects in, this module decides what
is a cache entry, pairs JAX ``<key>-cache``/``<key>-atime`` objects, selects entries by age or by a
size budget and spills the plan to disk so memory stays bounded whatever the listing size.

Layout facts (Pathways on Cloud): Pathways keeps its compilation cache under
``<gcs_scratch_location>/compilation_cache/`` (with a ``temp/`` staging folder); the Slurm scripts
use ``gs://BUCKET/pathways-scratch/shared``; JAX's own persistent cache stores ``<key>-cache`` and
``<key>-atime`` object pairs, ``<key>`` ending in a 64-hex-digit hash.

What is cache is decided by where an object is, then by what it is: only objects inside a cache
folder (a ``compilation_cache/`` or ``jax_cache/`` folder, the location itself when its name says
"cache", or the folders given as ``cache_prefixes``) and never inside a protected folder
(``checkpoints/``, ``tensorboard/`` ...). Inside a cache folder, a JAX-named object is cache only
as half of a complete pair; an unpaired half is kept.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import re
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

GCS_SCHEME = "gs://"
SLURM_SCRATCH_SUBDIR = "pathways-scratch/shared"
PATHWAYS_CACHE_FOLDER = "compilation_cache"
JAX_CACHE_FOLDER = "jax_cache"
# Folders the default selection treats as cache folders, at any depth under the location.
DEFAULT_CACHE_FOLDERS = (PATHWAYS_CACHE_FOLDER, JAX_CACHE_FOLDER)
# Nothing inside a folder with one of these names (any case) is ever deleted.
PROTECTED_FOLDERS = frozenset({"checkpoint", "checkpoints", "ckpt", "ckpts", "tensorboard"})
DEFAULT_MIN_AGE = timedelta(hours=1)
MAX_AGE = timedelta(days=36500)
MAX_AGE_TEXT = "100 years (36500d)"
MAX_CACHE_BYTES = 2**60
MAX_CACHE_BYTES_TEXT = "1 EiB (2**60 bytes)"
SAMPLE_SIZE = 10
SORT_RUN_ENTRIES = 10_000

JAX_SUFFIX_CACHE = "-cache"
JAX_SUFFIX_ATIME = "-atime"
# A JAX cache file name: "<module>-<sha256 hex>-cache" or "...-atime".
_JAX_NAME = re.compile(r"^(?P<key>.+-[0-9a-f]{64})-(?P<kind>cache|atime)$")
# A folder name that says "cache": compilation_cache, jax-cache, xla_cache, cache, cache-v2 ...
_CACHE_FOLDER_NAME = re.compile(r"(?i)(?:^|[-_.])cache(?:[-_.]|$)")
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
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
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class CacheCleanupError(Exception):
    """A cleanup could not run (missing bucket, no permission, server refused a change)."""


class BucketNotFoundError(CacheCleanupError):
    """The bucket does not exist or the credentials cannot see it."""


# --------------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------------


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
        if not _BUCKET_NAME.match(bucket) or ".." in bucket:
            raise ValueError(
                f"{param}={text!r}: {bucket!r} is not a valid bucket name (3-222 characters: "
                "lowercase letters, digits, '-', '_' and '.', starting and ending with a letter or digit)"
            )
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


def looks_like_cache_folder(name: str) -> bool:
    """Whether a folder name says it holds a cache (``compilation_cache``, ``jax-cache``, ``cache``...)."""
    return bool(_CACHE_FOLDER_NAME.search(name))


def protected_folder(path: str) -> str | None:
    """The first protected folder (``checkpoints``, ``tensorboard`` ...) in a ``/``-separated path, or None.

    Every segment but the last counts as a folder when ``path`` is an object name; pass a prefix
    ending with ``/`` to check all its segments.
    """
    for folder in path.split("/")[:-1]:
        if folder.lower() in PROTECTED_FOLDERS:
            return folder
    return None


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


# --------------------------------------------------------------------------------------------
# Which objects are cache entries
# --------------------------------------------------------------------------------------------


class CacheObject(NamedTuple):
    """One listed object: name, generation, size in bytes and last update (``updated``)."""

    name: str
    generation: int
    size: int
    updated: datetime


@dataclass(frozen=True)
class CacheEntry:
    """What is deleted together: one object, or a JAX pair (``-atime`` first, then ``-cache``)."""

    objects: tuple[CacheObject, ...]

    @property
    def size(self) -> int:
        return sum(obj.size for obj in self.objects)

    @property
    def updated(self) -> datetime:
        """Last use of the entry: the newest ``updated`` of its objects."""
        return max(obj.updated for obj in self.objects)

    @property
    def is_jax_pair(self) -> bool:
        return len(self.objects) == 2


@dataclass(frozen=True)
class CacheSelector:
    """Decides which objects under a location are cache entries (and which JAX objects pair up).

    An object is cache only if it is inside a cache folder and inside no protected folder:

    - cache folders are the ``cache_prefixes`` (relative to the location) when given; otherwise
      every ``compilation_cache/`` and ``jax_cache/`` folder at any depth, and the whole location
      when its own folder name says "cache" (``.../jax-cache``);
    - protected folders (:data:`PROTECTED_FOLDERS`: ``checkpoints``, ``tensorboard`` ...) anywhere
      in the object's path keep it, whatever its name;
    - inside a cache folder, an object named like half of a JAX pair (``<key>-cache`` or
      ``<key>-atime``, ``<key>`` ending in 64 hex digits) is cache only with its partner in the
      same folder (``jax_pairs=False``: never); every other object is one entry.
    """

    location: GcsLocation
    cache_prefixes: tuple[str, ...] | None = None
    jax_pairs: bool = True

    @classmethod
    def build(
        cls,
        location: GcsLocation,
        *,
        cache_prefixes: Sequence[str] | None = None,
        jax_pairs: bool = True,
        allow_bucket_root: bool = False,
        allow_any_prefix: bool = False,
    ) -> CacheSelector:
        """Check the location and cache prefixes against the safety rules; raise ``ValueError``."""
        if location.is_bucket_root and not allow_bucket_root:
            raise ValueError(
                f"location={location.url!r} is a bucket root: give the scratch location "
                f"(e.g. 'gs://{location.bucket}/{SLURM_SCRATCH_SUBDIR}'), or set allow_bucket_root=True "
                "to clean cache folders across the whole bucket"
            )
        guarded = protected_folder(location.prefix)
        if guarded is not None:
            raise ValueError(
                f"location={location.url!r} is inside {guarded + '/'!r}: nothing inside checkpoint or "
                "tensorboard folders is ever deleted; give the scratch location that holds the cache"
            )
        if isinstance(cache_prefixes, str):
            raise ValueError(
                f"cache_prefixes={cache_prefixes!r} must be a list of folders, e.g. ['compilation_cache/']"
            )
        prefixes: tuple[str, ...] | None = None
        if cache_prefixes is not None:
            checked: list[str] = []
            for raw in cache_prefixes:
                if not isinstance(raw, str) or raw.startswith(GCS_SCHEME) or raw.startswith("/"):
                    raise ValueError(
                        f"cache_prefixes entry {raw!r} must be a folder relative to the location, "
                        "e.g. 'compilation_cache/'"
                    )
                prefix = normalize_prefix(raw, param="cache_prefixes")
                where = f"{location.url}{prefix}"
                guarded = protected_folder(prefix)
                if guarded is not None:
                    raise ValueError(
                        f"cache_prefixes entry {raw!r} ({where}) is inside {guarded + '/'!r}: nothing "
                        "inside checkpoint or tensorboard folders is ever deleted"
                    )
                folders = prefix.rstrip("/").split("/") if prefix else [location.folder_name]
                if not allow_any_prefix and not any(looks_like_cache_folder(f) for f in folders):
                    raise ValueError(
                        f"cache_prefixes entry {raw!r} ({where}) is not a cache folder (no folder name in it "
                        "contains 'cache'): everything under it would be deleted; point it at a cache "
                        "folder or set allow_any_prefix=True if that is really meant"
                    )
                checked.append(prefix)
            if not checked:
                raise ValueError("cache_prefixes is empty: leave it unset for the default cache folders")
            # Drop prefixes nested in another one so nothing is listed twice.
            ordered = sorted(set(checked))
            prefixes = tuple(p for p in ordered if not any(p != q and p.startswith(q) for q in ordered))
        return cls(location=location, cache_prefixes=prefixes, jax_pairs=jax_pairs)

    @property
    def whole_location_is_cache(self) -> bool:
        """The location itself is a cache folder (e.g. ``.../compilation_cache/``, ``.../jax-cache/``)."""
        return self.cache_prefixes is None and looks_like_cache_folder(self.location.folder_name)

    def listing_prefixes(self) -> list[str]:
        """Object prefixes to list: the location, or each explicit cache prefix under it."""
        if self.cache_prefixes is None:
            return [self.location.prefix]
        return [self.location.prefix + p for p in self.cache_prefixes]

    def in_cache_folder(self, name: str) -> bool:
        """Whether object ``name`` is under the location, inside a cache folder and no protected folder."""
        base = self.location.prefix
        if not name.startswith(base):
            return False
        rel = name[len(base) :]
        if not rel or rel.endswith("/") or protected_folder(name) is not None:
            return False
        if self.cache_prefixes is not None:
            return any(rel.startswith(p) for p in self.cache_prefixes)
        if self.whole_location_is_cache:
            return True
        return any(folder in DEFAULT_CACHE_FOLDERS for folder in name.split("/")[:-1])

    def classify(self, name: str) -> tuple[str, str] | None:
        """``None`` (kept), ``("object", name)``, or ``("atime"|"cache", jax_key_path)`` (a pair half)."""
        if not self.in_cache_folder(name):
            return None
        folder, _, leaf = name.rpartition("/")
        match = _JAX_NAME.match(leaf)
        if match is None:
            return ("object", name)
        if not self.jax_pairs:
            return None
        return (match["kind"], f"{folder}/{match['key']}" if folder else match["key"])


def group_entries(
    objects: Iterable[CacheObject], selector: CacheSelector, stats: ListingStats
) -> Iterator[CacheEntry]:
    """Turn a name-ordered listing into cache entries, pairing JAX ``-atime``/``-cache`` objects.

    Only complete pairs become entries; a half without its partner is kept and counted in
    ``stats.unpaired_jax_objects``. Memory stays bounded: an ``-atime`` waits only until the
    listing passes its ``-cache`` name.
    """
    pending: OrderedDict[str, CacheObject] = OrderedDict()
    for obj in objects:
        stats.listed_objects += 1
        stats.listed_bytes += obj.size
        while pending:
            key = next(iter(pending))
            if key + JAX_SUFFIX_CACHE >= obj.name:
                break
            del pending[key]
            stats.unpaired_jax_objects += 1  # its -cache object does not exist
        kind = selector.classify(obj.name)
        if kind is None:
            continue
        what, key = kind
        if what == "atime":
            pending[key] = obj
        elif what == "cache":
            paired = pending.pop(key, None)
            if paired is None:
                stats.unpaired_jax_objects += 1  # its -atime object does not exist
            else:
                yield CacheEntry((paired, obj))
        else:
            yield CacheEntry((obj,))
    stats.unpaired_jax_objects += len(pending)


@dataclass
class ListingStats:
    """Counters over everything listed under the location (cache or not)."""

    listed_objects: int = 0
    listed_bytes: int = 0
    unpaired_jax_objects: int = 0


# --------------------------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------------------------


def _to_us(moment: datetime) -> int:
    delta = moment - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _from_us(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def encode_entry(entry: CacheEntry, seq: int = 0) -> str:
    """One spill-file line for an entry (JSON, one line)."""
    members = [[o.name, o.generation, o.size, _to_us(o.updated)] for o in entry.objects]
    return json.dumps([_to_us(entry.updated), seq, members], separators=(",", ":")) + "\n"


def _decode(line: str) -> tuple[int, int, CacheEntry]:
    updated, seq, members = json.loads(line)
    objects = tuple(CacheObject(name, gen, size, _from_us(us)) for name, gen, size, us in members)
    return updated, seq, CacheEntry(objects)


class SetDigest:
    """Order-independent fingerprint of a set of (name, generation) pairs."""

    def __init__(self) -> None:
        self._value = 0

    def add(self, name: str, generation: int) -> None:
        digest = hashlib.blake2b(f"{name}\n{generation}".encode(), digest_size=16).digest()
        self._value ^= int.from_bytes(digest, "big")

    def hexdigest(self) -> str:
        return f"{self._value:032x}"


@dataclass
class PlanSummary:
    """Counts describing a plan (all JSON-serialisable)."""

    location: str
    older_than_seconds: float | None
    max_cache_bytes: int | None
    min_age_seconds: float
    cutoff: str | None
    planned_at: str
    listed_objects: int = 0
    listed_bytes: int = 0
    unpaired_jax_objects: int = 0
    cache_entries: int = 0
    cache_objects: int = 0
    cache_bytes: int = 0
    planned_entries: int = 0
    planned_objects: int = 0
    planned_bytes: int = 0
    planned_jax_pairs: int = 0
    planned_oldest: str | None = None
    planned_newest: str | None = None
    planned_digest: str = ""
    planned_sample: list[str] = field(default_factory=list)
    over_budget_bytes: int = 0

    @property
    def kept_cache_bytes(self) -> int:
        return self.cache_bytes - self.planned_bytes


class CleanupPlan:
    """What a cleanup would delete, spilled to a temporary file (bounded memory).

    Iterate :meth:`entries` to see each entry with the generation seen when planning. Close the plan
    (or use it as a context manager) to remove the spill file.
    """

    def __init__(self, location: GcsLocation, summary: PlanSummary, spill: Path, workdir: Path) -> None:
        self.location = location
        self.summary = summary
        self._spill = spill
        self._workdir = workdir

    @property
    def bucket(self) -> str:
        return self.location.bucket

    def entries(self) -> Iterator[CacheEntry]:
        """The planned entries, oldest decisions first, as seen when planning."""
        with open(self._spill, encoding="utf-8") as handle:
            for line in handle:
                yield _decode(line)[2]

    def to_dict(self) -> dict[str, Any]:
        data = dict(vars(self.summary))
        data["kept_cache_bytes"] = self.summary.kept_cache_bytes
        return data

    def close(self) -> None:
        shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> CleanupPlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class PlanBuilder:
    """Selects cache entries to delete from a name-ordered listing, streaming, with bounded memory.

    ``older_than``: entries whose last update is older than this go (decided as the listing goes).
    ``max_cache_bytes``: then, while the cache is over this budget, the oldest entries go (newest
    kept; decided after the listing, through an external sort on disk), but never one updated less
    than ``min_age`` ago. At least one of the two criteria is required. :attr:`summary` is complete
    once :meth:`select` is exhausted.
    """

    def __init__(
        self,
        selector: CacheSelector,
        *,
        older_than: timedelta | None,
        max_cache_bytes: int | None,
        min_age: timedelta = DEFAULT_MIN_AGE,
        now: datetime | None = None,
        spill_dir: str | Path | None = None,
        run_entries: int = SORT_RUN_ENTRIES,
    ) -> None:
        if older_than is None and max_cache_bytes is None:
            raise ValueError(
                "give older_than (an age such as '7d') and/or max_cache_bytes (a budget such as '500GiB')"
            )
        if older_than is not None:
            check_age(older_than, param="older_than")
        check_age(min_age, param="min_age")
        if max_cache_bytes is not None:
            parse_size(max_cache_bytes, param="max_cache_bytes")
        self.selector = selector
        self.now = now or datetime.now(timezone.utc)
        self.cutoff = self.now - older_than if older_than is not None else None
        self.guard = self.now - min_age
        self.max_cache_bytes = max_cache_bytes
        self.spill_dir = spill_dir
        self.run_entries = run_entries
        self.summary = PlanSummary(
            location=selector.location.url,
            older_than_seconds=older_than.total_seconds() if older_than is not None else None,
            max_cache_bytes=max_cache_bytes,
            min_age_seconds=min_age.total_seconds(),
            cutoff=self.cutoff.isoformat() if self.cutoff is not None else None,
            planned_at=self.now.isoformat(),
        )
        self._digest = SetDigest()
        self._oldest: datetime | None = None
        self._newest: datetime | None = None

    def _take(self, entry: CacheEntry) -> CacheEntry:
        summary = self.summary
        summary.planned_entries += 1
        summary.planned_objects += len(entry.objects)
        summary.planned_bytes += entry.size
        summary.planned_jax_pairs += entry.is_jax_pair
        updated = entry.updated
        if self._oldest is None or updated < self._oldest:
            self._oldest = updated
        if self._newest is None or updated > self._newest:
            self._newest = updated
        for obj in entry.objects:
            self._digest.add(obj.name, obj.generation)
            if len(summary.planned_sample) < SAMPLE_SIZE:
                summary.planned_sample.append(obj.name)
        summary.planned_digest = self._digest.hexdigest()
        summary.planned_oldest = self._oldest.isoformat()
        summary.planned_newest = self._newest.isoformat()
        return entry

    def select(self, listing: Iterable[CacheObject]) -> Iterator[CacheEntry]:
        """Yield the entries to delete (with the generation listed), updating :attr:`summary`."""
        summary = self.summary
        stats = ListingStats()
        workdir = Path(tempfile.mkdtemp(prefix="pathways-cache-candidates-", dir=self.spill_dir))
        try:
            candidates_path = workdir / "candidates.jsonl"
            seq = 0
            with open(candidates_path, "w", encoding="utf-8") as candidates:
                for entry in group_entries(listing, self.selector, stats):
                    summary.listed_objects = stats.listed_objects
                    summary.listed_bytes = stats.listed_bytes
                    summary.unpaired_jax_objects = stats.unpaired_jax_objects
                    summary.cache_entries += 1
                    summary.cache_objects += len(entry.objects)
                    summary.cache_bytes += entry.size
                    if self.cutoff is not None and entry.updated < self.cutoff:
                        yield self._take(entry)
                    elif self.max_cache_bytes is not None:
                        candidates.write(encode_entry(entry, seq))
                        seq += 1
            summary.listed_objects = stats.listed_objects
            summary.listed_bytes = stats.listed_bytes
            summary.unpaired_jax_objects = stats.unpaired_jax_objects
            if self.max_cache_bytes is not None:
                excess = summary.cache_bytes - summary.planned_bytes - self.max_cache_bytes
                guard_us = _to_us(self.guard)
                if excess > 0:
                    for updated_us, _seq, entry in _sorted_candidates(
                        candidates_path, workdir, self.run_entries
                    ):
                        if excess <= 0 or updated_us > guard_us:
                            break
                        excess -= entry.size
                        yield self._take(entry)
                summary.over_budget_bytes = max(excess, 0)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def build_plan(
    listing: Iterable[CacheObject],
    selector: CacheSelector,
    *,
    older_than: timedelta | None,
    max_cache_bytes: int | None,
    min_age: timedelta = DEFAULT_MIN_AGE,
    now: datetime | None = None,
    spill_dir: str | Path | None = None,
    run_entries: int = SORT_RUN_ENTRIES,
) -> CleanupPlan:
    """Run a :class:`PlanBuilder` over the listing and keep its selection in a spill file."""
    builder = PlanBuilder(
        selector,
        older_than=older_than,
        max_cache_bytes=max_cache_bytes,
        min_age=min_age,
        now=now,
        spill_dir=spill_dir,
        run_entries=run_entries,
    )
    workdir = Path(tempfile.mkdtemp(prefix="pathways-cache-plan-", dir=spill_dir))
    plan_path = workdir / "plan.jsonl"
    try:
        with open(plan_path, "w", encoding="utf-8") as out:
            for entry in builder.select(listing):
                out.write(encode_entry(entry))
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return CleanupPlan(selector.location, builder.summary, plan_path, workdir)


def _sorted_candidates(path: Path, workdir: Path, run_entries: int) -> Iterator[tuple[int, int, CacheEntry]]:
    """Candidates oldest first (ties in listing order): an external merge sort over runs on disk."""
    runs: list[Path] = []
    with open(path, encoding="utf-8") as handle:
        while True:
            chunk: list[tuple[int, int, str]] = []
            for line in handle:
                updated, seq, _ = json.loads(line)
                chunk.append((updated, seq, line))
                if len(chunk) >= run_entries:
                    break
            if not chunk:
                break
            chunk.sort()
            run = workdir / f"run-{len(runs)}.jsonl"
            with open(run, "w", encoding="utf-8") as out:
                out.writelines(line for _, _, line in chunk)
            runs.append(run)
            del chunk

    def read(run: Path) -> Iterator[tuple[int, int, CacheEntry]]:
        with open(run, encoding="utf-8") as handle:
            for line in handle:
                yield _decode(line)

    yield from heapq.merge(*(read(run) for run in runs), key=lambda item: (item[0], item[1]))


# --------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------


@dataclass
class CleanupReport:
    """What a cleanup did (or, for a dry run, would do).

    Counts are exact for what this run did: ``deleted_*`` only what this run's requests removed
    (a JAX pair counts as a deleted entry for the run that deleted its ``-cache`` object),
    ``missing_objects`` what was already gone when this run asked, so concurrent cleanups of the
    same location add up to what existed.
    """

    plan: PlanSummary
    dry_run: bool
    deleted_entries: int = 0
    deleted_objects: int = 0
    deleted_bytes: int = 0
    skipped_changed_entries: int = 0
    skipped_changed_objects: int = 0
    missing_objects: int = 0
    restored_atimes: int = 0
    errors: int = 0
    error_samples: list[dict[str, Any]] = field(default_factory=list)
    retries: int = 0
    aborted: str | None = None
    duration_seconds: float = 0.0
    deleted_digest: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-serialisable dict (what the operator pushes to XCom)."""
        data = dict(vars(self.plan))
        data["kept_cache_bytes"] = self.plan.kept_cache_bytes
        data.update({k: v for k, v in vars(self).items() if k != "plan"})
        return data

    def summary_table(self) -> str:
        """A short table for task logs: entries (what is deleted together), objects and bytes."""
        plan = self.plan
        title = f"Compilation cache cleanup of {plan.location}" + (
            " (DRY RUN: nothing deleted)" if self.dry_run else ""
        )
        rows: list[tuple[str, str, str, str]] = [
            ("listed under location", "", f"{plan.listed_objects}", format_bytes(plan.listed_bytes)),
            ("cache", f"{plan.cache_entries}", f"{plan.cache_objects}", format_bytes(plan.cache_bytes)),
            (
                "planned to delete",
                f"{plan.planned_entries}",
                f"{plan.planned_objects}",
                format_bytes(plan.planned_bytes),
            ),
        ]
        if not self.dry_run:
            rows += [
                (
                    "deleted",
                    f"{self.deleted_entries}",
                    f"{self.deleted_objects}",
                    format_bytes(self.deleted_bytes),
                ),
                (
                    "kept: changed since plan",
                    f"{self.skipped_changed_entries}",
                    f"{self.skipped_changed_objects}",
                    "",
                ),
                ("already gone", "", f"{self.missing_objects}", ""),
                ("errors", "", f"{self.errors}", ""),
            ]
        kept = plan.cache_bytes - (plan.planned_bytes if self.dry_run else self.deleted_bytes)
        rows.append(("cache left", "", "", format_bytes(kept)))
        header = ("", "entries", "objects", "bytes")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
        line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

        def fmt(row: tuple[str, str, str, str]) -> str:
            cells = [row[0].ljust(widths[0])] + [row[i].rjust(widths[i]) for i in range(1, 4)]
            return "| " + " | ".join(cells) + " |"

        out = [title, line, fmt(header), line, *(fmt(r) for r in rows), line]
        criteria = []
        if plan.older_than_seconds is not None:
            criteria.append(f"older than {timedelta(seconds=plan.older_than_seconds)} (before {plan.cutoff})")
        if plan.max_cache_bytes is not None:
            criteria.append(f"budget {format_bytes(plan.max_cache_bytes)}")
        out.append("criteria: " + ", ".join(criteria))
        if plan.unpaired_jax_objects:
            out.append(
                f"kept {plan.unpaired_jax_objects} JAX cache objects whose -cache/-atime partner is missing"
            )
        if plan.over_budget_bytes:
            out.append(
                f"still {format_bytes(plan.over_budget_bytes)} over budget: the rest is newer than min_age "
                f"({timedelta(seconds=plan.min_age_seconds)})"
            )
        if self.retries:
            out.append(f"retried requests: {self.retries}")
        if self.aborted:
            out.append(f"stopped early: {self.aborted}")
        return "\n".join(out)
