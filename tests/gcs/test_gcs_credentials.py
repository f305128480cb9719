"""Where the hook's credentials come from, and that errors name the fix without leaking secrets."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from airflow_provider_pathways.compilation_cache import CacheCleanupError
from airflow_provider_pathways.hooks.gcs import CompilationCacheHook
from sandbox.gcs.launcher import GcsEmulator

HAS_GOOGLE_PROVIDER = importlib.util.find_spec("airflow.providers.google") is not None
SECRET = "s3cr3t-do-not-print"


@pytest.fixture
def no_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)


def write_json(path: Path, data: dict[str, object]) -> str:
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.skipif(
    HAS_GOOGLE_PROVIDER, reason="with the google provider, credentials come from the connection"
)
@pytest.mark.usefixtures("no_emulator")
def test_without_the_google_provider_it_uses_application_default_credentials(
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


@pytest.mark.skipif(
    HAS_GOOGLE_PROVIDER, reason="with the google provider, credentials come from the connection"
)
@pytest.mark.usefixtures("no_emulator")
def test_missing_or_broken_credentials_give_the_fix_and_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broken = {"type": "not-a-type", "private_key": SECRET, "client_secret": SECRET}
    for path in (write_json(tmp_path / "broken.json", broken), str(tmp_path / "missing.json")):
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", path)
        with pytest.raises(CacheCleanupError, match="Application Default Credentials") as err:
            CompilationCacheHook().cleanup("gs://team-bucket/pathways-scratch/shared", older_than="7d")
        assert SECRET not in str(err.value) and SECRET not in repr(err.value.__context__)
    assert SECRET not in caplog.text


def test_with_an_emulator_and_no_connection_it_is_anonymous(emulator: GcsEmulator) -> None:
    from google.auth.credentials import AnonymousCredentials

    creds, _ = CompilationCacheHook().get_credentials_and_project()
    assert isinstance(creds, AnonymousCredentials)


@pytest.mark.skipif(not HAS_GOOGLE_PROVIDER, reason="needs apache-airflow-providers-google")
def test_with_the_google_provider_the_connection_is_used(
    emulator: GcsEmulator, bucket: str, seed: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = {"conn_type": "google_cloud_platform", "extra": {"is_anonymous": True, "project": "p1"}}
    monkeypatch.setenv("AIRFLOW_CONN_GCS_CACHE", json.dumps(connection))
    seed(bucket, {"pathways-scratch/shared/compilation_cache/a.binarypb": 3})  # type: ignore[operator]
    hook = CompilationCacheHook(gcp_conn_id="gcs_cache")
    assert hook.get_credentials_and_project()[1] == "p1"
    assert hook.cleanup(f"gs://{bucket}/pathways-scratch/shared", older_than="1d").deleted_objects == 1
    with pytest.raises(CacheCleanupError, match="gcp_conn_id='nope': no such Airflow connection"):
        CompilationCacheHook(gcp_conn_id="nope").get_credentials_and_project()
    assert os.environ["STORAGE_EMULATOR_HOST"] == emulator.url
