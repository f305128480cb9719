"""Retries a second apart for the test DAGs, on every Airflow version: through a PathwaysRetryPolicy
where Airflow has retry policies (3.3+), through ``retry_delay`` before."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow_provider_pathways.airflow_features import RETRY_POLICIES


def fast_retry(*, budget: bool = False) -> dict[str, Any]:
    """Task keywords for retries a second apart; ``budget``: the retries are a preemption budget
    (other failures are not retried, as with no ``retries`` set)."""
    settings: dict[str, Any] = {"retry_delay": timedelta(seconds=1)}
    if RETRY_POLICIES:
        from airflow_provider_pathways.failures import PathwaysRetryPolicy

        settings["retry_policy"] = PathwaysRetryPolicy(
            base_delay=timedelta(seconds=1), max_delay=timedelta(seconds=2), retry_unclassified=not budget
        )
    return settings
