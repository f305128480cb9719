"""Cleanup plans: entries selected by age or size budget, streamed, spilled to disk (bounded memory)."""

from __future__ import annotations

import hashlib
import heapq
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow_provider_pathways.cache.criteria import CleanupCriteria
from airflow_provider_pathways.cache.location import GcsLocation
from airflow_provider_pathways.cache.selection import (
    CacheEntry,
    CacheObject,
    ListingStats,
    group_entries,
)

SAMPLE_SIZE = 10
SORT_RUN_ENTRIES = 10_000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


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

    What is cache under ``location`` and which entries go are the ``criteria``: entries older than
    ``older_than`` are decided as the listing goes; then, while the cache is over ``max_cache_bytes``,
    the oldest go (newest kept; decided after the listing, through an external sort on disk), but
    never one updated less than ``min_age`` ago. :attr:`summary` is complete once :meth:`select` is
    exhausted. ``ValueError`` if the location or a cache prefix breaks a safety rule.
    """

    def __init__(
        self,
        location: GcsLocation,
        criteria: CleanupCriteria,
        *,
        now: datetime | None = None,
        spill_dir: str | Path | None = None,
        run_entries: int = SORT_RUN_ENTRIES,
    ) -> None:
        self.selector = criteria.selector(location)
        self.criteria = criteria
        self.now = now or datetime.now(timezone.utc)
        older_than = criteria.older_than
        self.cutoff = self.now - older_than if older_than is not None else None
        self.guard = self.now - criteria.min_age
        self.spill_dir = spill_dir
        self.run_entries = run_entries
        self.summary = PlanSummary(
            location=location.url,
            older_than_seconds=older_than.total_seconds() if older_than is not None else None,
            max_cache_bytes=criteria.max_cache_bytes,
            min_age_seconds=criteria.min_age.total_seconds(),
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
        return entry

    def _finish(self, stats: ListingStats) -> None:
        """Copy the running figures into :attr:`summary` (done once, not per entry)."""
        summary = self.summary
        summary.listed_objects = stats.listed_objects
        summary.listed_bytes = stats.listed_bytes
        summary.unpaired_jax_objects = stats.unpaired_jax_objects
        summary.planned_digest = self._digest.hexdigest()
        summary.planned_oldest = self._oldest.isoformat() if self._oldest else None
        summary.planned_newest = self._newest.isoformat() if self._newest else None

    def select(self, listing: Iterable[CacheObject]) -> Iterator[CacheEntry]:
        """Yield the entries to delete (with the generation listed), updating :attr:`summary`."""
        stats = ListingStats()
        return self.select_entries(group_entries(listing, self.selector, stats), stats)

    def select_entries(self, entries: Iterable[CacheEntry], stats: ListingStats) -> Iterator[CacheEntry]:
        """Like :meth:`select`, from cache entries already grouped (e.g. by several listings at once);
        ``stats`` counts everything those listings saw and is complete once ``entries`` is."""
        summary = self.summary
        budget = self.criteria.max_cache_bytes
        workdir = Path(tempfile.mkdtemp(prefix="pathways-cache-candidates-", dir=self.spill_dir))
        try:
            candidates_path = workdir / "candidates.jsonl"
            seq = 0
            with open(candidates_path, "w", encoding="utf-8") as candidates:
                for entry in entries:
                    summary.cache_entries += 1
                    summary.cache_objects += len(entry.objects)
                    summary.cache_bytes += entry.size
                    if self.cutoff is not None and entry.updated < self.cutoff:
                        yield self._take(entry)
                    elif budget is not None:
                        candidates.write(encode_entry(entry, seq))
                        seq += 1
            self._finish(stats)
            if budget is not None:
                excess = summary.cache_bytes - summary.planned_bytes - budget
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
            close = getattr(entries, "close", None)
            if close is not None:  # stopped early: stop the listings too
                close()
            self._finish(stats)
            shutil.rmtree(workdir, ignore_errors=True)


def build_plan(
    listing: Iterable[CacheObject],
    location: GcsLocation,
    criteria: CleanupCriteria,
    *,
    now: datetime | None = None,
    spill_dir: str | Path | None = None,
    run_entries: int = SORT_RUN_ENTRIES,
) -> CleanupPlan:
    """Run a :class:`PlanBuilder` over the listing and keep its selection in a spill file."""
    builder = PlanBuilder(location, criteria, now=now, spill_dir=spill_dir, run_entries=run_entries)
    workdir = Path(tempfile.mkdtemp(prefix="pathways-cache-plan-", dir=spill_dir))
    plan_path = workdir / "plan.jsonl"
    try:
        with open(plan_path, "w", encoding="utf-8") as out:
            for entry in builder.select(listing):
                out.write(encode_entry(entry))
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return CleanupPlan(builder.selector.location, builder.summary, plan_path, workdir)


def _sorted_candidates(path: Path, workdir: Path, run_entries: int) -> Iterator[tuple[int, int, CacheEntry]]:
    """Candidates oldest first, ties by name (the same order however the listing was split): an
    external merge sort over runs on disk."""
    runs: list[Path] = []
    with open(path, encoding="utf-8") as handle:
        while True:
            chunk: list[tuple[int, str, str]] = []
            for line in handle:
                updated, _seq, members = json.loads(line)
                chunk.append((updated, members[0][0], line))
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

    yield from heapq.merge(*(read(run) for run in runs), key=lambda item: (item[0], item[2].objects[0].name))
