"""Bucket lifecycle rules: one age-based ``Delete`` rule for a cache prefix, added idempotently."""

from __future__ import annotations

import functools
from typing import Any

from airflow_provider_pathways.cache.location import GcsLocation, normalize_prefix
from airflow_provider_pathways.cache.report import Logger
from airflow_provider_pathways.cache.selection import looks_like_cache_folder
from airflow_provider_pathways.cache.storage import BucketNotFoundError, CacheCleanupError
from airflow_provider_pathways.transient import TRANSIENT_HTTP_STATUSES, CallRetry

MAX_RULE_AGE_DAYS = 36500


def ensure_age_rule(
    rules: list[dict[str, Any]], prefix: str, age_days: int
) -> tuple[list[dict[str, Any]], str]:
    """The rules with exactly one ``Delete {age: age_days, matchesPrefix: [prefix]}`` rule, and the change."""
    ours = [
        i
        for i, rule in enumerate(rules)
        if (rule.get("action") or {}).get("type") == "Delete"
        and set((rule.get("condition") or {}).keys()) == {"age", "matchesPrefix"}
        and list(rule["condition"]["matchesPrefix"]) == [prefix]
    ]
    wanted = {"action": {"type": "Delete"}, "condition": {"age": age_days, "matchesPrefix": [prefix]}}
    if len(ours) == 1 and rules[ours[0]]["condition"]["age"] == age_days:
        return rules, "unchanged"
    kept = [rule for i, rule in enumerate(rules) if i not in ours]
    return [*kept, wanted], ("updated" if ours else "added")


def check_rule_arguments(
    bucket: object, prefix: object, age_days: object, *, allow_bucket_root: bool, allow_any_prefix: bool
) -> tuple[str, str]:
    """The bucket name and the normalised prefix; ``ValueError`` naming the parameter otherwise."""
    name = bucket.strip().removeprefix("gs://").strip("/") if isinstance(bucket, str) else bucket
    GcsLocation.parse(f"gs://{name}/", param="bucket")
    if not isinstance(prefix, str) or prefix.startswith("gs://"):
        raise ValueError(
            f"prefix={prefix!r} must be an object prefix inside the bucket, e.g. "
            "'pathways-scratch/shared/compilation_cache/'"
        )
    clean = normalize_prefix(prefix, param="prefix")
    if not clean and not allow_bucket_root:
        raise ValueError(
            "prefix is empty: a delete rule would cover the whole bucket; give the cache folder, e.g. "
            "'pathways-scratch/shared/compilation_cache/', or set allow_bucket_root=True"
        )
    if clean and not allow_any_prefix and not looks_like_cache_folder(clean.rstrip("/").rpartition("/")[2]):
        raise ValueError(
            f"prefix={prefix!r} is not a cache folder: an age rule deletes everything under it; give the "
            f"cache folder (e.g. '{clean}compilation_cache/') or set allow_any_prefix=True"
        )
    check_age_days(age_days)
    return str(name), clean


def check_age_days(age_days: object) -> int:
    """``age_days`` if it is a whole number of days from 1 to 36500; else ``ValueError``."""
    if isinstance(age_days, bool) or not isinstance(age_days, int) or not 1 <= age_days <= MAX_RULE_AGE_DAYS:
        raise ValueError(
            f"age_days={age_days!r} must be a whole number of days from 1 to {MAX_RULE_AGE_DAYS} (100 years)"
        )
    return age_days


def _transient(err: BaseException) -> bool:
    """A google-cloud-storage call worth a retry: answered with a status of
    ``TRANSIENT_HTTP_STATUSES``, or not answered (a connection error or a timeout)."""
    import requests
    from google.api_core import exceptions as gexc

    if isinstance(err, gexc.GoogleAPICallError):
        return err.code in TRANSIENT_HTTP_STATUSES
    return isinstance(
        err,
        (
            requests.ConnectionError,
            requests.Timeout,
            requests.exceptions.ChunkedEncodingError,
            ConnectionError,
            TimeoutError,
        ),
    )


def apply_age_rule(
    client: Any, bucket: str, prefix: str, age_days: int, *, timeout: float, retry: CallRetry, log: Logger
) -> str:
    """Make the bucket's rules hold one age rule for ``prefix`` (``google.cloud.storage.Client``).

    The update is conditioned on the bucket's metageneration and re-read to confirm. Each call is
    retried by ``retry`` (the library's own retries are off). Returns ``"added"``, ``"updated"`` or
    ``"unchanged"``.
    """
    from google.api_core import exceptions as gexc

    def get_bucket() -> Any:
        return retry.call(
            functools.partial(client.get_bucket, bucket, timeout=timeout, retry=None), is_transient=_transient
        )

    for _ in range(5):
        try:
            bucket_obj = get_bucket()
        except gexc.NotFound:
            raise BucketNotFoundError(
                f"bucket {bucket!r} does not exist or is not visible to these credentials"
            ) from None
        rules = [dict(rule) for rule in bucket_obj.lifecycle_rules]
        new_rules, outcome = ensure_age_rule(rules, prefix, age_days)
        if outcome == "unchanged":
            return outcome
        bucket_obj.lifecycle_rules = new_rules
        try:
            retry.call(
                functools.partial(
                    bucket_obj.patch,
                    if_metageneration_match=bucket_obj.metageneration,
                    timeout=timeout,
                    retry=None,
                ),
                is_transient=_transient,
            )
        except gexc.PreconditionFailed:
            continue  # someone else changed the bucket meanwhile (or a lost answer's patch): read again
        check = get_bucket()
        _, after = ensure_age_rule([dict(r) for r in check.lifecycle_rules], prefix, age_days)
        if after != "unchanged":
            raise CacheCleanupError(
                f"the server did not keep the lifecycle rule on bucket {bucket!r} (it answered the update "
                "but the rule is not there): check the bucket's lifecycle configuration"
            )
        log.info("Lifecycle rule %s on gs://%s: delete %s* after %d days", outcome, bucket, prefix, age_days)
        return outcome
    raise CacheCleanupError(f"bucket {bucket!r} kept changing while updating its lifecycle rules; try again")
