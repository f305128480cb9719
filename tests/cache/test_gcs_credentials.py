"""Where the hook's credentials come from, and that errors name the fix without leaking secrets."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from airflow_provider_pathways.cache import CacheCleanupError, CleanupCriteria
from airflow_provider_pathways.hooks.gcs import CompilationCacheHook
from sandbox.gcs.launcher import GcsEmulator
from sandbox.gcs.proxy import GcsProxy
from tests.cache.conftest import TokenServer
from tests.support.environment import require

HAS_GOOGLE_PROVIDER = importlib.util.find_spec("airflow.providers.google") is not None
NEEDS_GOOGLE_PROVIDER = "needs apache-airflow-providers-google (the test extra has it)"
SECRET = "s3cr3t-do-not-print"


@pytest.fixture
def no_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)


def write_json(path: Path, data: dict[str, object]) -> str:
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.usefixtures("no_emulator")
def test_without_a_connection_it_uses_application_default_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.auth import impersonated_credentials
    from google.oauth2 import credentials as user_credentials

    adc = {"type": "authorized_user", "client_id": "id", "client_secret": SECRET, "refresh_token": SECRET}
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", write_json(tmp_path / "adc.json", adc))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "team-project")

    creds, project = CompilationCacheHook().get_credentials_and_project()
    assert isinstance(creds, user_credentials.Credentials) and project == "team-project"

    chain = "first@p.iam.gserviceaccount.com, cleaner@p.iam.gserviceaccount.com"
    creds, _ = CompilationCacheHook(impersonation_chain=chain).get_credentials_and_project()
    assert isinstance(creds, impersonated_credentials.Credentials)
    assert creds.service_account_email == "cleaner@p.iam.gserviceaccount.com"


@pytest.mark.usefixtures("no_emulator")
def test_missing_or_broken_credentials_give_the_fix_and_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broken = {"type": "not-a-type", "private_key": SECRET, "client_secret": SECRET}
    for path in (write_json(tmp_path / "broken.json", broken), str(tmp_path / "missing.json")):
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", path)
        with pytest.raises(CacheCleanupError, match="Application Default Credentials") as err:
            CompilationCacheHook().cleanup(
                "gs://team-bucket/pathways-scratch/shared", CleanupCriteria(older_than="7d")
            )
        assert SECRET not in str(err.value) and SECRET not in repr(err.value.__context__)
    assert SECRET not in caplog.text


def test_with_an_emulator_and_no_connection_it_is_anonymous(emulator: GcsEmulator) -> None:
    from google.auth.credentials import AnonymousCredentials

    creds, _ = CompilationCacheHook().get_credentials_and_project()
    assert isinstance(creds, AnonymousCredentials)


def test_with_the_google_provider_the_connection_is_used(
    emulator: GcsEmulator, bucket: str, seed: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(HAS_GOOGLE_PROVIDER, NEEDS_GOOGLE_PROVIDER)
    connection = {"conn_type": "google_cloud_platform", "extra": {"is_anonymous": True, "project": "p1"}}
    monkeypatch.setenv("AIRFLOW_CONN_GCS_CACHE", json.dumps(connection))
    seed(bucket, {"pathways-scratch/shared/compilation_cache/a.binarypb": 3})  # type: ignore[operator]
    hook = CompilationCacheHook(gcp_conn_id="gcs_cache")
    assert hook.get_credentials_and_project()[1] == "p1"
    assert (
        hook.cleanup(
            f"gs://{bucket}/pathways-scratch/shared", CleanupCriteria(older_than="1d")
        ).deleted_objects
        == 1
    )
    with pytest.raises(CacheCleanupError, match="gcp_conn_id='nope': no such Airflow connection"):
        CompilationCacheHook(gcp_conn_id="nope").get_credentials_and_project()
    assert os.environ["STORAGE_EMULATOR_HOST"] == emulator.url


def test_a_service_account_connection_signs_in_and_every_request_carries_its_token(
    emulator: GcsEmulator,
    proxy: GcsProxy,
    bucket: str,
    seed: object,
    token_server: TokenServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The Airflow connection (a service-account key) is what signs the cleanup's requests: the
    token from the sign-in goes with every listing and delete, and neither token nor key is logged."""
    require(HAS_GOOGLE_PROVIDER, NEEDS_GOOGLE_PROVIDER)
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    account = {
        "type": "service_account",
        "project_id": "team-project",
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": "cache-cleaner@team-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_server.url,
    }
    connection = {"conn_type": "google_cloud_platform", "extra": {"keyfile_dict": json.dumps(account)}}
    monkeypatch.setenv("AIRFLOW_CONN_GCS_CLEANER", json.dumps(connection))
    cache = "pathways-scratch/shared/compilation_cache"
    seed(bucket, {f"{cache}/e{i:03d}.binarypb": 3 for i in range(150)})  # type: ignore[operator]

    report = CompilationCacheHook(gcp_conn_id="gcs_cleaner").cleanup(
        f"gs://{bucket}/pathways-scratch/shared", CleanupCriteria(older_than="1d")
    )

    assert (report.deleted_objects, report.errors) == (150, 0)
    assert len(token_server.requests) == 1  # signed in once, the token reused
    assert len(proxy.authorizations) == len(proxy.requests) >= 3  # listing and two batches
    assert set(proxy.authorizations) == {f"Bearer {token_server.token}"}
    logs = capfd.readouterr()
    for secret in (token_server.token, pem.splitlines()[1]):
        assert secret not in caplog.text and secret not in logs.out + logs.err
