"""What the connection forms promise, checked on the hook side without a browser.

The forms' defaults (``provider_info``) must be what the hook does with an unset field, and the
values a user types where the forms ask for them must reach the hook as meant: an ``https://`` host
keeps TLS whatever the scheme field says, the token from ``scontrol token`` works as printed, and
the file-access switch means what it shows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow.models.connection import Connection

from airflow_provider_pathways.provider_info import get_provider_info
from airflow_provider_pathways.slurm.settings import SUPPORTED_API_VERSIONS, SlurmSettings

TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJwYXRod2F5cyJ9.c2lnbmF0dXJl"


def _fields(conn_type: str) -> dict[str, Any]:
    for conn in get_provider_info()["connection-types"]:
        if conn["connection-type"] == conn_type:
            return conn["conn-fields"]
    raise AssertionError(f"no connection type {conn_type}")


def settings(
    host: str = "slurm.example.com",
    *,
    password: str | None = TOKEN,
    port: int | None = None,
    **extra: Any,
) -> SlurmSettings:
    extra.setdefault("transport", "rest")
    if extra["transport"] == "rest" and "ssh_host" not in extra:
        extra.setdefault("shared_fs", True)  # REST needs file access (see the tests of that below)
    conn = Connection(
        conn_id="pathways_slurm_form",
        conn_type="pathways_slurm",
        host=host,
        login="pathways",
        password=password,
        port=port,
        extra=json.dumps(extra),
    )
    return SlurmSettings.from_connection(conn)


@pytest.mark.parametrize(
    ("host", "scheme", "port", "expected"),
    [
        ("https://slurm.example.com", "http", None, "https"),  # what the old form saved: TLS kept
        ("https://slurm.example.com", None, None, "https"),
        ("https://slurm.example.com/", "https", 6820, "https"),
        ("http://slurm.example.com", "https", None, "https"),  # https asked for in the extra
        ("http://slurm.example.com", None, 443, "http"),  # an explicit http:// host is http
        ("slurm.example.com", None, 443, "https"),
        ("slurm.example.com", "http", 443, "http"),
        ("slurm.example.com", None, None, "http"),
        ("slurm.example.com", "https", None, "https"),
    ],
)
def test_https_from_the_host_or_the_scheme_field_is_never_lost(
    host: str, scheme: str | None, port: int | None, expected: str
) -> None:
    got = settings(host, port=port, scheme=scheme)
    assert got.scheme == expected
    assert got.host == "slurm.example.com"


def test_a_host_with_another_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        settings("ftp://slurm.example.com")


@pytest.mark.parametrize("pasted", [f"SLURM_JWT={TOKEN}", f"SLURM_JWT={TOKEN}\n", f"  {TOKEN}  ", TOKEN])
def test_the_token_works_as_scontrol_token_prints_it(pasted: str) -> None:
    got = settings(password=pasted)
    assert got.password == TOKEN
    assert TOKEN in got.secrets


def test_a_prefix_without_a_token_is_no_token() -> None:
    with pytest.raises(ValueError, match="needs the JWT"):
        settings(password="SLURM_JWT=")


def test_an_ssh_password_is_kept_as_typed() -> None:
    got = settings(password=" SLURM_JWT=is-a-password ", transport="ssh")
    assert got.password == " SLURM_JWT=is-a-password "


def as_written(extra: dict[str, Any]) -> Connection:
    """A REST connection with a token and exactly ``extra``, as an environment variable or a
    secrets backend holds it (no form filled anything in)."""
    return Connection(
        conn_id="pathways_slurm_as_written",
        conn_type="pathways_slurm",
        host="slurm.example.com",
        login="pathways",
        password=TOKEN,
        extra=json.dumps(extra),
    )


@pytest.mark.parametrize("unset", [{}, {"shared_fs": None}, {"shared_fs": False}, {"shared_fs": "false"}])
def test_rest_without_a_way_to_read_files_is_refused(unset: dict[str, Any]) -> None:
    """The switch is off unless set (Airflow off the cluster does not see its filesystem), and a REST
    connection that can read files neither over SSH nor locally is refused, naming both fixes."""
    assert _fields("pathways_slurm")["shared_fs"]["schema"]["default"] is False
    with pytest.raises(ValueError, match="REST alone cannot read job files") as refused:
        SlurmSettings.from_connection(as_written({"transport": "rest", **unset}))
    assert "'pathways_slurm_as_written'" in str(refused.value)
    assert "ssh_host" in str(refused.value) and "shared_fs=true" in str(refused.value)
    assert TOKEN not in str(refused.value)


@pytest.mark.parametrize(
    ("extra", "local", "sftp_host"),
    [
        ({"shared_fs": True}, True, None),
        ({"shared_fs": "true"}, True, None),
        ({"ssh_host": "login-0"}, False, "login-0"),
        ({"ssh_host": "login-0", "shared_fs": True}, False, "login-0"),  # the SSH host wins
        ({"ssh_host": "login-0", "shared_fs": False}, False, "login-0"),
    ],
)
def test_an_ssh_host_is_the_file_access_when_set(
    extra: dict[str, Any], local: bool, sftp_host: str | None
) -> None:
    got = settings(**extra)
    assert got.shared_fs is local
    assert got.ssh_host == sftp_host


def test_form_defaults_are_the_hooks_defaults() -> None:
    """Every default the form shows is what the hook does with the field unset (a connection from
    an environment variable or a secrets backend has only what its author wrote)."""
    fields = _fields("pathways_slurm")
    # The one thing REST needs besides the token: a way to read job files.
    unset = SlurmSettings.from_connection(as_written({"ssh_host": "login-0"}))
    shown = {name: f["schema"]["default"] for name, f in fields.items() if "default" in f["schema"]}
    assert shown.pop("scheme") is None  # decided from the host and port
    assert shown.pop("shared_fs") is False  # see test_rest_without_a_way_to_read_files_is_refused
    assert {"transport", "api_version", "verify_ssl", "strict_host_key_checking"} <= set(shown)
    assert shown == {name: getattr(unset, name) for name in shown}


def test_closed_value_sets_are_dropdowns_with_every_value_the_hook_accepts() -> None:
    fields = _fields("pathways_slurm")
    assert fields["transport"]["schema"]["enum"] == ["rest", "ssh"]
    assert set(fields["api_version"]["schema"]["enum"]) == {"auto", *SUPPORTED_API_VERSIONS}
    for version in fields["api_version"]["schema"]["enum"]:
        assert settings(api_version=version).api_version == version
    assert fields["scheme"]["schema"]["enum"] == [None, "http", "https"]
    for scheme in ("http", "https"):
        assert settings(scheme=scheme).scheme == scheme


@pytest.mark.parametrize("conn_type", ["pathways_gke", "pathways_slurm"])
def test_every_form_field_has_a_label_and_help_text(conn_type: str) -> None:
    for name, field in _fields(conn_type).items():
        assert field.get("label"), name
        assert len(field.get("description") or "") > 20, name


@pytest.mark.slurm
def test_slurmrestd_accepts_the_token_pasted_as_scontrol_token_prints_it(
    slurm_cluster: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_pathways.hooks.slurm import SlurmHook
    from sandbox.slurm.cluster import airflow_connection

    conn = json.loads(airflow_connection(slurm_cluster, "rest"))
    token = Path(conn["extra"].pop("token_file")).read_text().strip().removeprefix("SLURM_JWT=")
    conn["password"] = f"SLURM_JWT={token}\n"
    monkeypatch.setenv("AIRFLOW_CONN_PATHWAYS_SLURM_PRINTED_TOKEN", json.dumps(conn))
    hook = SlurmHook("pathways_slurm_printed_token")
    try:
        ok, message = hook.test_connection()
    finally:
        hook.close()
    assert ok, message
