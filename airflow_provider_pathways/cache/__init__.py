"""The compilation-cache cleanup's domain, free of Airflow: one job per module.

- :mod:`.location`: ``gs://`` locations and the Slurm scratch convention;
- :mod:`.values`: ages, sizes and counts given by users, range-checked;
- :mod:`.selection`: which objects are cache entries (cache folders, protected folders, JAX pairs);
- :mod:`.criteria`: a cleanup's criteria (ages, budget, what is cache), checked and normalised once;
- :mod:`.plan`: selecting entries by age or budget, streamed and spilled to disk;
- :mod:`.report`: the report, its summary table, and how answers to deletes become its counts;
- :mod:`.storage`, :mod:`.deleter`: the GCS JSON API calls (batch format, listing answers read as
  they arrive, errors) and the concurrent delete pass (google-auth, urllib3 and google-api-core
  are loaded only when used);
- :mod:`.listing`: a location listed with long listings split by folder, several at once;
- :mod:`.lifecycle`: bucket lifecycle rules.

Importing this package loads no Google client library.
"""

from airflow_provider_pathways.cache.criteria import CleanupCriteria
from airflow_provider_pathways.cache.location import (
    GCS_SCHEME,
    SLURM_SCRATCH_SUBDIR,
    GcsLocation,
    normalize_prefix,
    scratch_location_for_bucket,
)
from airflow_provider_pathways.cache.plan import (
    SAMPLE_SIZE,
    SORT_RUN_ENTRIES,
    CleanupPlan,
    PlanBuilder,
    PlanSummary,
    SetDigest,
    build_plan,
    encode_entry,
)
from airflow_provider_pathways.cache.report import CleanupReport
from airflow_provider_pathways.cache.selection import (
    DEFAULT_CACHE_FOLDERS,
    JAX_CACHE_FOLDER,
    JAX_SUFFIX_ATIME,
    JAX_SUFFIX_CACHE,
    PATHWAYS_CACHE_FOLDER,
    PROTECTED_FOLDERS,
    CacheEntry,
    CacheObject,
    CacheSelector,
    ListingStats,
    group_entries,
    looks_like_cache_folder,
    protected_folder,
    relative_prefixes,
)
from airflow_provider_pathways.cache.storage import BucketNotFoundError, CacheCleanupError
from airflow_provider_pathways.cache.values import (
    DEFAULT_MIN_AGE,
    MAX_AGE,
    MAX_AGE_TEXT,
    MAX_CACHE_BYTES,
    MAX_CACHE_BYTES_TEXT,
    check_age,
    check_count,
    format_bytes,
    parse_duration,
    parse_size,
)

__all__ = [
    "DEFAULT_CACHE_FOLDERS",
    "DEFAULT_MIN_AGE",
    "GCS_SCHEME",
    "JAX_CACHE_FOLDER",
    "JAX_SUFFIX_ATIME",
    "JAX_SUFFIX_CACHE",
    "MAX_AGE",
    "MAX_AGE_TEXT",
    "MAX_CACHE_BYTES",
    "MAX_CACHE_BYTES_TEXT",
    "PATHWAYS_CACHE_FOLDER",
    "PROTECTED_FOLDERS",
    "SAMPLE_SIZE",
    "SLURM_SCRATCH_SUBDIR",
    "SORT_RUN_ENTRIES",
    "BucketNotFoundError",
    "CacheCleanupError",
    "CacheEntry",
    "CacheObject",
    "CacheSelector",
    "CleanupCriteria",
    "CleanupPlan",
    "CleanupReport",
    "GcsLocation",
    "ListingStats",
    "PlanBuilder",
    "PlanSummary",
    "SetDigest",
    "build_plan",
    "check_age",
    "check_count",
    "encode_entry",
    "format_bytes",
    "group_entries",
    "looks_like_cache_folder",
    "normalize_prefix",
    "parse_duration",
    "parse_size",
    "protected_folder",
    "relative_prefixes",
    "scratch_location_for_bucket",
]
