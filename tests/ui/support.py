"""The pieces of the UI tests: an Airflow API server of their own, the docs site, screenshots."""

from __future__ import annotations

import contextlib
import json
import mimetypes
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DAGS = REPO_ROOT / "example_dags"
DOCS = REPO_ROOT / "docs"
CHROMIUM = Path("/usr/bin/chromium")
# Chromium as root in a container: no sandbox, no GPU, nothing that phones home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SERVER_START_TIMEOUT = 120.0


@dataclass
class AirflowUi:
    """The running API server: its URL and the environment to run ``airflow`` commands against it."""

    url: str
    home: Path
    env: dict[str, str]

    def airflow(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run an ``airflow`` CLI command in the server's home; output is returned, never printed."""
        return subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )

    def api(self, path: str) -> Any:
        resp = httpx.get(f"{self.url}/api/v2/{path.lstrip('/')}", timeout=30)
        resp.raise_for_status()
        return resp.json()

    def connections(self) -> dict[str, dict[str, Any]]:
        """Every saved connection with its secrets, as ``airflow connections export`` writes them."""
        target = self.home / "connections.json"
        try:
            self.airflow("connections", "export", str(target), "--file-format", "json")
            return json.loads(target.read_text())
        finally:
            target.unlink(missing_ok=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(home: Path, port: int) -> dict[str, str]:
    # Nothing of the test run's own Airflow configuration leaks into the server's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        }
    )
    return env


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def wait_until_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    with httpx.Client(timeout=5) as client:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"airflow api-server exited with {process.returncode}:\n{_log_tail(log)}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{url}/api/v2/monitor/health").status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"airflow api-server did not answer within {SERVER_START_TIMEOUT:g}s")
            time.sleep(0.2)  # poll interval of a condition with a deadline


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)  # the server's own process group (start_new_session)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def serve_directory(root: Path, base_url: str) -> Any:
    """A Playwright route handler that answers requests under ``base_url`` from files in ``root``."""

    def handle(route: Any) -> None:
        relative = route.request.url.removeprefix(base_url).split("#", 1)[0].split("?", 1)[0]
        path = (root / (relative or "index.html")).resolve()
        if path.is_dir():
            path = path / "index.html"
        if not path.is_relative_to(root.resolve()) or not path.is_file():
            route.fulfill(status=404, body="not found")
            return
        content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        route.fulfill(status=200, body=path.read_bytes(), headers={"Content-Type": content_type})

    return handle


class Screenshots:
    """Screenshots into ``PATHWAYS_UI_SCREENSHOTS`` when it is set; nothing otherwise."""

    def __init__(self, directory: str | None) -> None:
        self.directory = Path(directory) if directory else None
        if self.directory:
            self.directory.mkdir(parents=True, exist_ok=True)

    def take(self, target: Any, name: str) -> None:
        """A page as it is, or an element (a dialog) whole: the viewport grows to show all of it."""
        if self.directory is None:
            return
        path = str(self.directory / f"{name}.png")
        page = getattr(target, "page", None)
        if page is None:
            target.screenshot(path=path)
            return
        size = page.viewport_size
        height = target.evaluate("e => Math.max(e.scrollHeight, e.getBoundingClientRect().height)")
        page.set_viewport_size({"width": size["width"], "height": int(height) + 200})
        try:
            target.screenshot(path=path)
        finally:
            page.set_viewport_size(size)
