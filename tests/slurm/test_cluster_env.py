"""cluster.env is parsed as data (never executed) and judged fresh only for this service job."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_provider_pathways.slurm.service import (
    ClusterEnvError,
    evaluate_cluster_env,
    normalize_proxy_address,
    parse_cluster_env,
)

STARTED = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)
FRESH = (STARTED.timestamp() + 30, 120)


def test_shell_style_lines_are_read_without_running_anything(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = f"""
# Written by start_pathways.sh
export PATHWAYS_PROXY_ADDRESS="grpc://10.0.0.5:29000"
JAX_PLATFORMS=proxy   # trailing comment
QUOTED='a b $HOME'
COMMAND=$(touch {marker})
EMPTY=
"""
    values = parse_cluster_env(text)
    assert values == {
        "PATHWAYS_PROXY_ADDRESS": "grpc://10.0.0.5:29000",
        "JAX_PLATFORMS": "proxy",
        "QUOTED": "a b $HOME",
        "COMMAND": f"$(touch {marker})",
        "EMPTY": "",
    }
    assert not marker.exists()


@pytest.mark.parametrize("line", ["NOT A PAIR", "1BAD=x", "KEY='unterminated"])
def test_malformed_lines_are_reported_without_their_values(line: str) -> None:
    with pytest.raises(ClusterEnvError, match="line 1"):
        parse_cluster_env(line)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("grpc://host-1.example:29000", "grpc://host-1.example:29000"),
        ("10.1.2.3:29000", "grpc://10.1.2.3:29000"),
        ("[fd00::1]:29000", "grpc://[fd00::1]:29000"),
    ],
)
def test_proxy_address_forms(value: str, expected: str) -> None:
    assert normalize_proxy_address(value) == expected


@pytest.mark.parametrize("value", ["http://h:1", "host", "host:0", "host:99999", ""])
def test_bad_proxy_addresses_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="not a proxy address"):
        normalize_proxy_address(value)


def evaluate(text: str | None, stat: tuple[float, int] | None = FRESH, **kwargs: object) -> object:
    return evaluate_cluster_env(service_job_id=42, service_started=STARTED, stat=stat, text=text, **kwargs)


def test_fresh_file_of_this_service_is_ready() -> None:
    readiness = evaluate("PATHWAYS_SERVICE_JOB_ID=42\nPATHWAYS_PROXY_ADDRESS=h:29000\n")
    assert readiness.ready and readiness.proxy_address == "grpc://h:29000"


def test_file_older_than_the_service_job_is_ignored() -> None:
    readiness = evaluate("PATHWAYS_PROXY_ADDRESS=h:29000", stat=(STARTED.timestamp() - 3600, 10))
    assert not readiness.ready and "earlier run" in readiness.reason


def test_file_of_another_service_job_is_ignored() -> None:
    readiness = evaluate("PATHWAYS_SERVICE_JOB_ID=41\nPATHWAYS_PROXY_ADDRESS=h:29000")
    assert not readiness.ready and "service job 41" in readiness.reason


def test_missing_file_or_key_is_not_ready() -> None:
    assert "does not exist" in evaluate(None, stat=None).reason
    readiness = evaluate("OTHER=1")
    assert not readiness.ready and "PATHWAYS_PROXY_ADDRESS" in readiness.reason


def test_the_proxy_key_is_configurable() -> None:
    readiness = evaluate("MY_PROXY=10.0.0.9:1234", proxy_keys=["MY_PROXY"])
    assert readiness.ready and readiness.proxy_address == "grpc://10.0.0.9:1234"
