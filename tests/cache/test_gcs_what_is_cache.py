"""What a cleanup deletes is decided by where an object is and what it is, never by its name alone.

Every object below is 40 days old and the cleanup deletes what is older than 7 days, so age never
saves anything: only the location rules do. Names that look like JAX cache files
(``<name>-<64 hex>-cache`` / ``-atime``) sit in every kind of folder.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from datetime import timedelta

import pytest

from airflow_provider_pathways.cache import CleanupCriteria
from airflow_provider_pathways.hooks.gcs import CompilationCacheHook
from sandbox.gcs.launcher import GcsEmulator
from tests.cache.conftest import NOW

pytestmark = pytest.mark.gcs

SCRATCH = "pathways-scratch/shared"
FORTY_DAYS_AGO = NOW - timedelta(days=40)

Seed = Callable[..., None]
JAX_HALF = re.compile(r"-[0-9a-f]{64}-(cache|atime)$")


def hexkey(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def pair(folder: str, label: str) -> list[str]:
    key = f"{folder}/jit_{label}-{hexkey(label)}"
    return [f"{key}-atime", f"{key}-cache"]


# (object name under the scratch location, deleted by the default selection,
#  deleted with cache_prefixes=["compilation_cache/", "xla_cache/"])
TABLE: list[tuple[str, bool, bool]] = [
    # The Pathways cache folder: every entry, and complete JAX pairs.
    ("compilation_cache/default/e1.binarypb", True, True),
    ("compilation_cache/temp/staging.binarypb", True, True),
    ("compilation_cache/default/model-cache", True, True),  # no 64-hex key: a plain entry
    *((name, True, True) for name in pair("compilation_cache/default", "pair")),
    # Unpaired JAX halves inside a cache folder are kept.
    (f"compilation_cache/default/jit_lone-{hexkey('lone')}-cache", False, False),
    (f"compilation_cache/default/jit_stray-{hexkey('stray')}-atime", False, False),
    # JAX's own cache folder: in the default selection, not when other folders are named.
    *((name, True, False) for name in pair("jax_cache", "jax")),
    ("jax_cache/notes.txt", True, False),
    (f"jax_cache/jit_half-{hexkey('half')}-cache", False, False),
    # A cache folder the default selection does not name: only when named.
    *((name, False, True) for name in pair("xla_cache", "xla")),
    (f"xla_cache/jit_xhalf-{hexkey('xhalf')}-atime", False, False),
    # Checkpoints: never, whatever the names and folders inside.
    (f"checkpoints/step_100/shard-{hexkey('shard')}-cache", False, False),
    *((name, False, False) for name in pair("checkpoints/step_100", "ckpt")),
    ("checkpoints/step_100/compilation_cache/x.binarypb", False, False),
    *((name, False, False) for name in pair("checkpoints/jax_cache", "ckptjax")),
    ("Checkpoints/compilation_cache/y.binarypb", False, False),
    ("compilation_cache/checkpoints/z.binarypb", False, False),
    # TensorBoard logs: never.
    ("tensorboard/events.out.tfevents.1", False, False),
    *((name, False, False) for name in pair("tensorboard", "tb")),
    ("tensorboard/compilation_cache/w.binarypb", False, False),
    # A sibling folder outside every cache folder: never.
    (f"outputs/shard-{hexkey('out')}-cache", False, False),
    *((name, False, False) for name in pair("outputs", "out")),
    # The scratch location itself is no cache folder.
    *((name, False, False) for name in pair(".", "root")),
    ("model-cache", False, False),
    ("compilation_cache_notes.txt", False, False),
]
OUTSIDE = [  # under the bucket but outside the location: never listed, never deleted
    "pathways-scratch/shared-2/compilation_cache/default/x.binarypb",
    *pair("pathways-scratch/shared-2/jax_cache", "other"),
]


def full(name: str) -> str:
    return f"{SCRATCH}/{name.removeprefix('./')}"


@pytest.mark.parametrize(
    ("selection", "column"),
    [({}, 1), ({"cache_prefixes": ["compilation_cache/", "xla_cache/"]}, 2)],
    ids=["default-selection", "named-folders"],
)
def test_look_alike_names_in_every_folder_leave_exactly_the_documented_survivors(
    emulator: GcsEmulator, bucket: str, seed: Seed, selection: dict[str, object], column: int
) -> None:
    names = [full(row[0]) for row in TABLE]
    assert len(set(names)) == len(names)
    seed(bucket, {name: 100 for name in [*names, *OUTSIDE]}, updated=FORTY_DAYS_AGO)
    doomed = {full(row[0]) for row in TABLE if row[column]}
    kept = set(names) - doomed | set(OUTSIDE)
    halves = {name for name in doomed if JAX_HALF.search(name)}
    location = f"gs://{bucket}/{SCRATCH}"

    dry = CompilationCacheHook().cleanup(
        location, CleanupCriteria(older_than="7d", **selection), dry_run=True
    )
    report = CompilationCacheHook().cleanup(location, CleanupCriteria(older_than="7d", **selection))

    assert set(emulator.list_objects(bucket)) == kept
    assert (report.deleted_objects, report.deleted_bytes, report.errors) == (
        len(doomed),
        100 * len(doomed),
        0,
    )
    assert report.deleted_entries == len(doomed) - len(halves) // 2
    assert dry.plan.planned_objects == len(doomed)
    # One unpaired half in each selected cache folder besides compilation_cache/ (which has two).
    assert report.plan.unpaired_jax_objects == 3
    assert "kept 3 JAX cache objects whose -cache/-atime partner is missing" in report.summary_table()


def test_the_checkpoint_file_from_the_field_report_survives(
    emulator: GcsEmulator, bucket: str, seed: Seed
) -> None:
    checkpoint = f"{SCRATCH}/checkpoints/step_100/shard-{hexkey('field')}-cache"
    seed(bucket, {checkpoint: 4096}, updated=FORTY_DAYS_AGO)

    report = CompilationCacheHook().cleanup(f"gs://{bucket}/{SCRATCH}", CleanupCriteria(older_than="7d"))

    assert set(emulator.list_objects(bucket)) == {checkpoint}
    assert (report.deleted_objects, report.plan.cache_objects, report.plan.listed_objects) == (0, 0, 1)


@pytest.mark.parametrize(
    ("location", "selection", "message"),
    [
        (f"{SCRATCH}/checkpoints", {}, "is inside 'checkpoints/'"),
        (f"{SCRATCH}/tensorboard/jax-cache", {}, "is inside 'tensorboard/'"),
        (SCRATCH, {"cache_prefixes": ["checkpoints/jax_cache/"]}, "is inside 'checkpoints/'"),
        (SCRATCH, {"cache_prefixes": ["ckpt/"], "allow_any_prefix": True}, "is inside 'ckpt/'"),
    ],
)
def test_naming_a_protected_folder_is_refused_before_any_request(
    emulator: GcsEmulator, bucket: str, seed: Seed, location: str, selection: dict[str, object], message: str
) -> None:
    inside = f"{SCRATCH}/checkpoints/jax_cache/jit_a-{hexkey('a')}-cache"
    seed(bucket, {inside: 1}, updated=FORTY_DAYS_AGO)
    with pytest.raises(ValueError, match=message):
        CompilationCacheHook().cleanup(
            f"gs://{bucket}/{location}", CleanupCriteria(older_than="7d", **selection)
        )
    assert set(emulator.list_objects(bucket)) == {inside}
