"""Compilation-cache layout, input checks and cleanup planning for GCS scratch locations.

Pure logic, no Google client imports: the hook feeds listed objects in, this module decides what
is a cache entry, pairs JAX ``<key>-cache``/``<key>-atime`` objects, selects entries by age or by a
size budget and spills the plan to disk so memory stays bounded whatever the listing size.

Layout facts (Pathways on Cloud): Pathways keeps its compilation cache under
``<gcs_scratch_location>/compilation_cache/`` (with a ``temp/`` staging folder); the Slurm scripts
use ``gs://BUCKET/pathways-scratch/shared``; JAX's own persistent cache stores ``<key>-cache`` and
``<key>-atime`` object pairs, ``<key>`` ending in a 64-hex-digit hash.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, NamedTuple

GCS_SCHEME = "gs://"
SLURM_SCRATCH_SUBDIR = "pathways-scratch/shared"
PATHWAYS_CACHE_FOLDER = "compilation_cache"
DEFAULT_MIN_AGE = timedelta(hours=1)
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
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]i?b|b)?\s*$", re.IGNORECASE)
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


def parse_duration(value: object, *, param: str) -> timedelta:
    """A non-negative duration from a timedelta, seconds, or text such as ``'36h'``, ``'7d'``, ``'1d12h'``."""
    hint = "use e.g. '36h', '7d', '1d12h', a number of seconds or a timedelta"
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, bool):
        raise ValueError(f"{param}={value!r} is not a duration: {hint}")
    elif isinstance(value, int | float):
        result = timedelta(seconds=float(value))
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"-?\d+(\.\d+)?", text):
            result = timedelta(seconds=float(text))
        else:
            negative = text.startswith("-")
            body = text[1:] if negative else text
            parts = _DURATION_PART.findall(body)
            if not parts or _DURATION_PART.sub("", body).strip():
                raise ValueError(f"{param}={value!r} is not a duration: {hint}")
            seconds = sum(float(num) * _DURATION_UNITS[unit.lower()] for num, unit in parts)
            result = timedelta(seconds=-seconds if negative else seconds)
    else:
        raise ValueError(f"{param}={value!r} is not a duration: {hint}")
    if result < timedelta(0):
        raise ValueError(f"{param}={value!r} is negative: give an age of zero or more, e.g. '7d'")
    return result


def parse_size(value: object, *, param: str) -> int:
    """A non-negative byte count from an int or text such as ``'500GiB'``, ``'1.5TB'``, ``'0'``."""
    hint = "use a number of bytes or text such as '500GiB' or '2TB'"
    if isinstance(value, bool):
        raise ValueError(f"{param}={value!r} is not a size: {hint}")
    if isinstance(value, int):
        result = value
    elif isinstance(value, float) and value.is_integer():
        result = int(value)
    elif isinstance(value, str):
        text = value.strip()
        if text.startswith("-"):
            raise ValueError(f"{param}={value!r} is negative: give a budget of zero or more bytes")
        match = _SIZE.match(text)
        if not match:
            raise ValueError(f"{param}={value!r} is not a size: {hint}")
        number, unit = match.groups()
        result = int(float(number) * _SIZE_UNITS[(unit or "b").lower()])
    else:
        raise ValueError(f"{param}={value!r} is not a size: {hint}")
    if result < 0:
        raise ValueError(f"{param}={value!r} is negative: give a budget of zero or more bytes")
    return result


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
    """Decides which objects under a location are cache entries (and which JAX objects pair up)."""

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
                folders = prefix.rstrip("/").split("/") if prefix else [location.folder_name]
                if not allow_any_prefix and not any(looks_like_cache_folder(f) for f in folders):
                    where = f"{location.url}{prefix}"
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
        """The location itself is a cache folder (e.g. ``.../compilation_cache/``)."""
        return self.cache_prefixes is None and looks_like_cache_folder(self.location.folder_name)

    def listing_prefixes(self) -> list[str]:
        """Object prefixes to list: the location, or each explicit cache prefix under it."""
        if self.cache_prefixes is None:
            return [self.location.prefix]
        return [self.location.prefix + p for p in self.cache_prefixes]

    def classify(self, name: str) -> tuple[str, str] | None:
        """``None`` (not cache), ``("object", name)``, or ``("atime"|"cache", jax_key_path)``."""
        base = self.location.prefix
        if not name.startswith(base):
            return None
        rel = name[len(base) :]
        if not rel or rel.endswith("/"):
            return None  # folder placeholder objects are not cache entries
        if self.cache_prefixes is not None:
            in_cache = any(rel.startswith(p) for p in self.cache_prefixes)
            if not in_cache:
                return None
        else:
            in_cache = self.whole_location_is_cache or PATHWAYS_CACHE_FOLDER in rel.split("/")[:-1]
        if self.jax_pairs:
            folder, _, leaf = rel.rpartition("/")
            match = _JAX_NAME.match(leaf)
            if match:
                key_path = f"{base}{folder}/{match['key']}" if folder else f"{base}{match['key']}"
                return (match["kind"], key_path)
        return ("object", name) if in_cache else None


def group_entries(
    objects: Iterable[CacheObject], selector: CacheSelector, stats: ListingStats
) -> Iterator[CacheEntry]:
    """Turn a name-ordered listing into cache entries, pairing JAX ``-atime``/``-cache`` objects.

    Memory stays bounded: an ``-atime`` waits only until the listing passes its ``-cache`` name.
    """
    pending: OrderedDict[str, CacheObject] = OrderedDict()
    for obj in objects:
        stats.listed_objects += 1
        stats.listed_bytes += obj.size
        while pending:
            key, atime = next(iter(pending.items()))
            if key + JAX_SUFFIX_CACHE >= obj.name:
                break
            del pending[key]
            yield CacheEntry((atime,))  # its -cache object does not exist
        kind = selector.classify(obj.name)
        if kind is None:
            continue
        what, key = kind
        if what == "atime":
            pending[key] = obj
        elif what == "cache":
            paired = pending.pop(key) if key in pending else None
            yield CacheEntry((paired, obj)) if paired is not None else CacheEntry((obj,))
        else:
            yield CacheEntry((obj,))
    for atime in pending.values():
        yield CacheEntry((atime,))


@dataclass
class ListingStats:
    """Counters over everything listed under the location (cache or not)."""

    listed_objects: int = 0
    listed_bytes: int = 0


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
    """What a cleanup did (or, for a dry run, would do)."""

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
        """A short table for task logs."""
        plan = self.plan
        title = f"Compilation cache cleanup of {plan.location}" + (
            " (DRY RUN: nothing deleted)" if self.dry_run else ""
        )
        rows: list[tuple[str, str, str]] = [
            ("listed under location", f"{plan.listed_objects}", format_bytes(plan.listed_bytes)),
            ("cache entries", f"{plan.cache_objects}", format_bytes(plan.cache_bytes)),
            ("planned to delete", f"{plan.planned_objects}", format_bytes(plan.planned_bytes)),
        ]
        if not self.dry_run:
            rows += [
                ("deleted", f"{self.deleted_objects}", format_bytes(self.deleted_bytes)),
                ("kept: changed since plan", f"{self.skipped_changed_objects}", ""),
                ("already gone", f"{self.missing_objects}", ""),
                ("errors", f"{self.errors}", ""),
            ]
        kept = plan.cache_bytes - (plan.planned_bytes if self.dry_run else self.deleted_bytes)
        rows.append(("cache left", "", format_bytes(kept)))
        widths = [max(len(r[i]) for r in [("", "objects", "bytes"), *rows]) for i in range(3)]
        line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
        out = [
            title,
            line,
            f"| {'':<{widths[0]}} | {'objects':>{widths[1]}} | {'bytes':>{widths[2]}} |",
            line,
        ]
        out += [f"| {a:<{widths[0]}} | {b:>{widths[1]}} | {c:>{widths[2]}} |" for a, b, c in rows]
        out.append(line)
        criteria = []
        if plan.older_than_seconds is not None:
            criteria.append(f"older than {timedelta(seconds=plan.older_than_seconds)} (before {plan.cutoff})")
        if plan.max_cache_bytes is not None:
            criteria.append(f"budget {format_bytes(plan.max_cache_bytes)}")
        out.append("criteria: " + ", ".join(criteria))
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
