"""Which listed objects are cache entries: cache folders, protected folders and JAX pairs.

An object is cache only if it is inside a cache folder and inside no protected folder. Inside a
cache folder, a JAX-named object (``<key>-cache``/``<key>-atime``, ``<key>`` ending in 64 hex
digits) is cache only with its partner; an unpaired half is kept.
"""

from __future__ import annotations

import functools
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from airflow_provider_pathways.cache.location import (
    GCS_SCHEME,
    SLURM_SCRATCH_SUBDIR,
    GcsLocation,
    normalize_prefix,
)

PATHWAYS_CACHE_FOLDER = "compilation_cache"
JAX_CACHE_FOLDER = "jax_cache"
# Folders the default selection treats as cache folders, at any depth under the location.
DEFAULT_CACHE_FOLDERS = (PATHWAYS_CACHE_FOLDER, JAX_CACHE_FOLDER)
# Nothing inside a folder with one of these names (any case) is ever deleted.
PROTECTED_FOLDERS = frozenset({"checkpoint", "checkpoints", "ckpt", "ckpts", "tensorboard"})

JAX_SUFFIX_CACHE = "-cache"
JAX_SUFFIX_ATIME = "-atime"
# A JAX cache file name: "<module>-<sha256 hex>-cache" or "...-atime".
_JAX_NAME = re.compile(r"^(?P<key>.+-[0-9a-f]{64})-(?P<kind>cache|atime)$")
# A folder name that says "cache": compilation_cache, jax-cache, xla_cache, cache, cache-v2 ...
_CACHE_FOLDER_NAME = re.compile(r"(?i)(?:^|[-_.])cache(?:[-_.]|$)")


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


def relative_prefixes(cache_prefixes: object) -> tuple[str, ...] | None:
    """``cache_prefixes`` checked as folders relative to a location, each ending with ``/`` (None:
    the default cache folders); ``ValueError`` naming the bad entry. Whether each is a cache folder
    depends on the location: :meth:`CacheSelector.build` checks that."""
    if cache_prefixes is None:
        return None
    if isinstance(cache_prefixes, str) or not isinstance(cache_prefixes, Iterable):
        raise ValueError(
            f"cache_prefixes={cache_prefixes!r} must be a list of folders, e.g. ['compilation_cache/']"
        )
    checked: list[str] = []
    for raw in cache_prefixes:
        if not isinstance(raw, str) or raw.startswith(GCS_SCHEME) or raw.startswith("/"):
            raise ValueError(
                f"cache_prefixes entry {raw!r} must be a folder relative to the location, "
                "e.g. 'compilation_cache/'"
            )
        checked.append(normalize_prefix(raw, param="cache_prefixes"))
    if not checked:
        raise ValueError("cache_prefixes is empty: leave it unset for the default cache folders")
    return tuple(checked)


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
        prefixes = relative_prefixes(cache_prefixes)
        if prefixes is not None:
            for prefix in prefixes:
                where = f"{location.url}{prefix}"
                guarded = protected_folder(prefix)
                if guarded is not None:
                    raise ValueError(
                        f"cache_prefixes entry {prefix!r} ({where}) is inside {guarded + '/'!r}: nothing "
                        "inside checkpoint or tensorboard folders is ever deleted"
                    )
                folders = prefix.rstrip("/").split("/") if prefix else [location.folder_name]
                if not allow_any_prefix and not any(looks_like_cache_folder(f) for f in folders):
                    raise ValueError(
                        f"cache_prefixes entry {prefix!r} ({where}) is not a cache folder (no folder name "
                        "in it contains 'cache'): everything under it would be deleted; point it at a "
                        "cache folder or set allow_any_prefix=True if that is really meant"
                    )
            # Drop prefixes nested in another one so nothing is listed twice.
            ordered = sorted(set(prefixes))
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
        if not name.startswith(base) or len(name) == len(base) or name.endswith("/"):
            return False
        folders = name.split("/")[:-1]
        if any(folder.lower() in PROTECTED_FOLDERS for folder in folders):
            return False
        if self.cache_prefixes is not None:
            rel = name[len(base) :]
            return any(rel.startswith(p) for p in self.cache_prefixes)
        return self._location_is_cache or any(folder in DEFAULT_CACHE_FOLDERS for folder in folders)

    @functools.cached_property
    def _location_is_cache(self) -> bool:
        return self.whole_location_is_cache

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

    def add(self, other: ListingStats) -> None:
        """Add the counts of another listing of the same location."""
        self.listed_objects += other.listed_objects
        self.listed_bytes += other.listed_bytes
        self.unpaired_jax_objects += other.unpaired_jax_objects
