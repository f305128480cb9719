"""Fixtures for the compilation-cache cleanup tests: GCS emulators over HTTP, buckets, seeding."""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sandbox.gcs.launcher import GCP_STORAGE_EMULATOR, GcsEmulator, SeedObject, start_gcs_emulator
from sandbox.gcs.proxy import GcsProxy

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
HERE = Path(__file__).resolve().parent
NOW = datetime.now(timezone.utc)
OLD = NOW - timedelta(days=10)


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    """fake-gcs-server over HTTP (filesystem backend), one per test session."""
    emulator = start_gcs_emulator(tmp_path_factory.mktemp("gcs"))
    yield emulator
    emulator.stop()


@pytest.fixture(scope="session")
def lifecycle_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    """gcp-storage-emulator over HTTP: the emulator that keeps bucket lifecycle rules."""
    emulator = start_gcs_emulator(tmp_path_factory.mktemp("gcs-lifecycle"), flavour=GCP_STORAGE_EMULATOR)
    yield emulator
    emulator.stop()


@pytest.fixture
def emulator(gcs_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch) -> GcsEmulator:
    """The emulator, with ``STORAGE_EMULATOR_HOST`` pointing at it for this test."""
    monkeypatch.setenv(EMULATOR_ENV, gcs_emulator.url)
    return gcs_emulator


@pytest.fixture
def bucket(emulator: GcsEmulator) -> str:
    """A fresh bucket in the emulator."""
    name = f"cache-{uuid.uuid4().hex[:12]}"
    emulator.create_bucket(name)
    return name


@pytest.fixture
def proxy(emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[GcsProxy]:
    """The sandbox proxy (enforces ``ifGenerationMatch`` on delete, records deletes) in front of it;
    ``STORAGE_EMULATOR_HOST`` points at the proxy."""
    with GcsProxy(emulator.url) as running:
        monkeypatch.setenv(EMULATOR_ENV, running.url)
        yield running


@pytest.fixture
def seed(emulator: GcsEmulator) -> Callable[..., None]:
    """``seed(bucket, {name: size}, updated=OLD)``: write objects with a chosen ``updated`` time."""

    def _seed(bucket: str, objects: dict[str, int], updated: datetime = OLD) -> None:
        emulator.seed_objects(bucket, (SeedObject(name, size, updated) for name, size in objects.items()))

    return _seed


@pytest.fixture(scope="session")
def cleanup_dags() -> str:
    """Copy the test DAG file into the Airflow DAGs folder (dag.test needs it there)."""
    dags_folder = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    dags_folder.mkdir(parents=True, exist_ok=True)
    source = HERE / "dags" / "gcs_cleanup_dags.py"
    shutil.copy2(source, dags_folder / source.name)
    return source.name


@dataclass
class TokenServer:
    """A stand-in OAuth token endpoint: answers every POST with ``token``; counts the requests."""

    url: str
    token: str
    requests: list[bytes] = field(default_factory=list)


@pytest.fixture
def token_server() -> Iterator[TokenServer]:
    """An OAuth token endpoint on 127.0.0.1 (service-account credentials sign in there)."""
    server_state = TokenServer(url="", token=f"ya29.sandbox-{uuid.uuid4().hex}")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_POST(self) -> None:
            server_state.requests.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            body = json.dumps(
                {"access_token": server_state.token, "expires_in": 3600, "token_type": "Bearer"}
            )
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server_state.url = f"http://127.0.0.1:{server.server_address[1]}/token"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server_state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
