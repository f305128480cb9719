"""Which slurmrestd answers a Slurm call is sent again for: the package's statuses worth a retry
(https://cloud.google.com/storage/docs/retry-strategy: "HTTP 408, 429, and 5xx"), but 500; GKE and
GCS answers are shown against their stand-ins in tests/hooks and tests/cache."""

from __future__ import annotations

import pytest

from airflow_provider_pathways.slurm.errors import SlurmApiError, is_transient


@pytest.mark.parametrize("status", [408, 429, 502, 503, 504])
def test_slurmrestd_busy_or_unreachable_behind_a_proxy_is_retried(status: int) -> None:
    assert is_transient(SlurmApiError(f"HTTP {status}", status=status))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 500, 501])
def test_a_refused_request_is_not_retried(status: int) -> None:
    """500 too: slurmrestd answers a request it refused with 500 ("Unspecified error")."""
    assert not is_transient(SlurmApiError(f"HTTP {status}", status=status))
