"""What a cleanup deletes: its criteria as users give them, checked and normalised once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from airflow_provider_pathways.cache.location import GcsLocation
from airflow_provider_pathways.cache.selection import CacheSelector, relative_prefixes
from airflow_provider_pathways.cache.values import DEFAULT_MIN_AGE, parse_duration, parse_size

NO_CRITERION = "give older_than (an age such as '7d') and/or max_cache_bytes (a budget such as '500GiB')"


def _flag(value: object, param: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{param}={value!r} must be True or False")
    return value


@dataclass(frozen=True, init=False)
class CleanupCriteria:
    """
    Which cache entries a cleanup deletes; a bad value raises ``ValueError`` naming the field and the fix.

    Entries last updated more than ``older_than`` ago go; then, while the cache exceeds
    ``max_cache_bytes``, the oldest go, never one updated less than ``min_age`` ago. At least one of
    ``older_than`` and ``max_cache_bytes`` is required. What counts as cache (``cache_prefixes``,
    ``jax_pairs``) and the opt-ins ``allow_bucket_root`` and ``allow_any_prefix`` are those of
    :meth:`~airflow_provider_pathways.cache.selection.CacheSelector.build`.

    :param older_than: an age such as ``'7d'``, ``'36h'``, seconds or a timedelta (kept as a timedelta).
    :param max_cache_bytes: a budget such as ``'500GiB'`` or bytes (kept as an int).
    :param min_age: like ``older_than`` (default one hour).
    :param cache_prefixes: cache folders relative to the location (kept as a tuple, each ending
        with ``/``); None: every ``compilation_cache/`` and ``jax_cache/`` folder.
    :param jax_pairs: delete complete JAX ``<key>-cache``/``<key>-atime`` pairs.
    :param allow_bucket_root: allow a bucket root as location.
    :param allow_any_prefix: allow ``cache_prefixes`` whose names do not say "cache".
    """

    older_than: timedelta | None
    max_cache_bytes: int | None
    min_age: timedelta
    cache_prefixes: tuple[str, ...] | None
    jax_pairs: bool
    allow_bucket_root: bool
    allow_any_prefix: bool

    # An __init__ rather than __post_init__: the parameters take what users write ('7d', '500GiB'),
    # the fields hold the normalised values with their own types.
    def __init__(
        self,
        *,
        older_than: timedelta | float | str | None = None,
        max_cache_bytes: int | str | None = None,
        min_age: timedelta | float | str = DEFAULT_MIN_AGE,
        cache_prefixes: Sequence[str] | None = None,
        jax_pairs: bool = True,
        allow_bucket_root: bool = False,
        allow_any_prefix: bool = False,
    ) -> None:
        if older_than is None and max_cache_bytes is None:
            raise ValueError(NO_CRITERION)
        normalised = {
            "older_than": None if older_than is None else parse_duration(older_than, param="older_than"),
            "max_cache_bytes": (
                None if max_cache_bytes is None else parse_size(max_cache_bytes, param="max_cache_bytes")
            ),
            "min_age": parse_duration(min_age, param="min_age"),
            "cache_prefixes": relative_prefixes(cache_prefixes),
            "jax_pairs": _flag(jax_pairs, "jax_pairs"),
            "allow_bucket_root": _flag(allow_bucket_root, "allow_bucket_root"),
            "allow_any_prefix": _flag(allow_any_prefix, "allow_any_prefix"),
        }
        for name, value in normalised.items():
            object.__setattr__(self, name, value)

    def selector(self, location: GcsLocation) -> CacheSelector:
        """What is cache under ``location``; ``ValueError`` if the location or a cache prefix breaks a
        safety rule (a bucket root, a protected folder, a prefix that is no cache folder)."""
        return CacheSelector.build(
            location,
            cache_prefixes=self.cache_prefixes,
            jax_pairs=self.jax_pairs,
            allow_bucket_root=self.allow_bucket_root,
            allow_any_prefix=self.allow_any_prefix,
        )
