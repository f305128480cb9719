"""A real Airflow API server with the example DAGs, the built docs, and headless Chromium.

The server runs in an Airflow home of its own (SQLite, the simple auth manager with every user an
admin, a free port): ``airflow db migrate``, one pass of ``airflow dag-processor`` over a copy of
``example_dags/``, then ``airflow api-server``. The browser is Debian's Chromium
(``sandbox/ui/install.sh``) driven by Playwright; nothing downloads a browser.

``PATHWAYS_UI_SCREENSHOTS=<dir>`` keeps screenshots of what the tests looked at.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import registry
from tests.support.environment import require
from tests.ui.support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    DOCS,
    EXAMPLE_DAGS,
    REPO_ROOT,
    AirflowUi,
    Screenshots,
    free_port,
    server_env,
    stop_process,
    wait_until_healthy,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ui: drives the Airflow UI in headless Chromium (/usr/bin/chromium)")


@pytest.fixture(scope="session")
def airflow_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowUi]:
    home = tmp_path_factory.mktemp("airflow-ui-home")
    dags = home / "dags"
    dags.mkdir()
    for path in EXAMPLE_DAGS.glob("*.py"):
        shutil.copy2(path, dags / path.name)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    ui = AirflowUi(url=url, home=home, env=server_env(home, port))
    ui.airflow("db", "migrate")
    log = home / "api-server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port", str(port)],
            env=ui.env,
            cwd=home,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    # Machine-wide: stopped by the next sandbox start if this test session dies without stopping it.
    description = f"Airflow api-server {url} (UI tests)"
    record = registry.register("airflow-ui", process.pid, description=description, owner=os.getpid())
    try:
        # Meanwhile one parsing pass, as a deployment's dag processor makes it: DAGs and import errors.
        ui.airflow("dag-processor", "--num-runs", "1", timeout=300)
        wait_until_healthy(url, process, log)
        yield ui
    finally:
        stop_process(process)
        registry.unregister(record)


def _docs_sources_newer_than(index: Path) -> bool:
    built = index.stat().st_mtime
    sources = [*DOCS.rglob("*.rst"), *DOCS.rglob("*.py"), *EXAMPLE_DAGS.glob("*.py")]
    sources.append(REPO_ROOT / "airflow_provider_pathways" / "provider_info.py")
    return any(path.stat().st_mtime > built for path in sources if "_build" not in path.parts)


@pytest.fixture(scope="session")
def built_docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML docs: ``make docs``'s output when it is up to date, else a fresh build."""
    html = DOCS / "_build" / "html"
    index = html / "index.html"
    if index.exists() and not _docs_sources_newer_than(index):
        return html
    html = tmp_path_factory.mktemp("docs-html")
    subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(html)],
        check=True,
        capture_output=True,
        env={**os.environ, "AIRFLOW_HOME": str(tmp_path_factory.mktemp("docs-airflow-home"))},
        timeout=300,
    )
    return html


@pytest.fixture(scope="session")
def browser_context(airflow_ui: AirflowUi) -> Iterator[Any]:
    """A headless Chromium with a fresh profile (Playwright's persistent context on a new directory).

    It needs the server only to be closed before it: no open connection delays the server's stop."""
    require(CHROMIUM.exists(), f"{CHROMIUM} is missing: run sandbox/ui/install.sh (make test does)")
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=str(CHROMIUM),
                args=CHROMIUM_ARGS,
                headless=True,
                viewport={"width": 1400, "height": 1000},
            )
            context.set_default_timeout(20_000)
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def page(browser_context: Any) -> Iterator[Any]:
    page = browser_context.new_page()
    try:
        yield page
    finally:
        page.close()


@pytest.fixture(scope="session")
def screenshots() -> Screenshots:
    return Screenshots(os.environ.get("PATHWAYS_UI_SCREENSHOTS"))
