"""Start, reuse and stop the Kubernetes stand-in as a subprocess (tests, demo, benchmarks).

``start_kube_standin(state_dir)`` spawns ``python -m sandbox.kube`` with the current interpreter and
waits (with a deadline) until it has written ``state_dir/kube.json``. ``connect_kube_standin`` reuses
one that is already running from its state dir; ``ensure_kube_standin`` does either.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox import registry
from sandbox.processes import forget_state, pid_alive, read_state, stop_process

REPO_ROOT = Path(__file__).resolve().parents[2]
TOKEN_ENV = "SANDBOX_KUBE_TOKEN"
KUBE_JSON = "kube.json"
LOG_FILE = "kube.log"
_GET_PATHS = frozenset({"requests", "state", "kueue", "google"})


class KubeStandinError(RuntimeError):
    """The stand-in did not start, or a control request failed."""


@dataclass
class KubeStandin:
    """A running stand-in: its URL, bearer token and kubeconfig path."""

    url: str
    token: str
    kubeconfig: Path
    pid: int
    state_dir: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    # With --google: token endpoint and GKE API URL, cluster, key and CA files, endpoints.
    google: dict[str, Any] | None = None

    def request(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        """An authenticated JSON request to the stand-in; returns the decoded JSON answer."""
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        url = f"{self.url}/{path.lstrip('/')}" + (f"?{query}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise KubeStandinError(
                f"{method} {path} -> {err.code}: {err.read().decode(errors='replace')}"
            ) from None
        return json.loads(raw) if raw.strip() else None

    def control(self, path: str, method: str | None = None, **params: Any) -> Any:
        """Call a ``/sandbox/`` endpoint, e.g. ``control("compact")`` or
        ``control("namespaces/default/jobsets/x/preempt-slice", slice=1)``.

        GET for ``requests``, ``state`` and ``kueue``, POST otherwise (override with ``method``).
        """
        path = path.strip("/")
        path = path.removeprefix("sandbox/")
        verb = method or ("GET" if path in _GET_PATHS else "POST")
        return self.request(verb, f"/sandbox/{path}", **params)

    def action(self, namespace: str, jobset: str, action: str, **params: Any) -> Any:
        """Run a scenario action on a JobSet (``preempt-slice``, ``fail-program``, ``evict``, ...)."""
        return self.control(f"namespaces/{namespace}/jobsets/{jobset}/{action}", **params)

    def airflow_connection(self, namespace: str = "default") -> str:
        """JSON for an ``AIRFLOW_CONN_<ID>`` variable: a ``kubernetes`` connection using the kubeconfig."""
        return json.dumps(
            {
                "conn_type": "kubernetes",
                "extra": {"kube_config_path": str(self.kubeconfig), "namespace": namespace},
            }
        )

    def google_connections(
        self, gcp_conn_id: str, namespace: str = "default", **extra: Any
    ) -> tuple[str, str]:
        """JSON for two ``AIRFLOW_CONN_<ID>`` variables (needs ``--google``): a Google Cloud
        connection signing in with the stand-in's service-account key, and a ``pathways_gke``
        connection that reaches the cluster through it (``extra`` adds or overrides its fields)."""
        if self.google is None:
            raise KubeStandinError("this stand-in runs without --google")
        key = Path(self.google["service_account_file"]).read_text()
        _, project, _, location, _, cluster = self.google["cluster"].split("/")
        gcp = {"conn_type": "google_cloud_platform", "extra": {"keyfile_dict": key, "project": project}}
        gke = {
            "conn_type": "pathways_gke",
            "extra": {
                "gcp_conn_id": gcp_conn_id,
                "gcp_project": project,
                "gke_location": location,
                "gke_cluster": cluster,
                "gke_api_endpoint": self.google["url"],
                "namespace": namespace,
                **extra,
            },
        }
        return json.dumps(gcp), json.dumps(gke)

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return pid_alive(self.pid)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the stand-in (SIGTERM, then SIGKILL after ``timeout``)."""
        stop_process(self.process, self.pid, timeout)
        forget_state(self.state_dir / KUBE_JSON, self.pid)

    def __enter__(self) -> KubeStandin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read_info(state_dir: Path) -> dict[str, Any] | None:
    return read_state(state_dir / KUBE_JSON)


def _from_info(state_dir: Path, info: dict[str, Any], process: subprocess.Popen[bytes] | None) -> KubeStandin:
    return KubeStandin(
        url=info["url"],
        token=info["token"],
        kubeconfig=Path(info["kubeconfig"]),
        pid=int(info["pid"]),
        state_dir=state_dir,
        process=process,
        google=info.get("google"),
    )


def start_kube_standin(
    state_dir: Path,
    token: str | None = None,
    *,
    timeout: float = 30.0,
    host: str = "127.0.0.1",
    port: int = 0,
    extra_args: tuple[str, ...] = (),
    detach: bool = False,
) -> KubeStandin:
    """Spawn the stand-in and wait until it listens (``kube.json`` written); raise on failure.

    By default the stand-in exits when this process exits; ``detach=True`` leaves it running
    (e.g. for a demo), to be reused with ``connect_kube_standin`` and stopped with ``stop()``.
    Sandbox processes left by a deleted checkout or a killed run are stopped first
    (``sandbox.registry.reap_orphans``).
    """
    registry.reap_orphans(log=_log)
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        (state_dir / KUBE_JSON).unlink()
    token = token or secrets.token_urlsafe(24)
    env = dict(os.environ)
    env[TOKEN_ENV] = token
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = [
        sys.executable,
        "-m",
        "sandbox.kube",
        "--host",
        host,
        "--port",
        str(port),
        "--state-dir",
        str(state_dir),
        *(() if detach else ("--exit-with-parent",)),
        *extra_args,
    ]
    log_path = state_dir / LOG_FILE
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = _read_info(state_dir)
        if info and info.get("pid") == process.pid:
            return _from_info(state_dir, info, process)
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise KubeStandinError(f"the kube stand-in exited with code {process.returncode}:\n{tail}")
        time.sleep(0.02)
    process.kill()
    process.wait()
    raise KubeStandinError(f"the kube stand-in did not write {state_dir / KUBE_JSON} within {timeout}s")


def _log(message: str) -> None:
    print(f"[sandbox] {message}", file=sys.stderr, flush=True)


def connect_kube_standin(state_dir: Path) -> KubeStandin | None:
    """The stand-in already running from ``state_dir``, or None if there is none (or it is dead)."""
    state_dir = Path(state_dir).resolve()
    info = _read_info(state_dir)
    if not info or not pid_alive(int(info.get("pid", 0))):
        return None
    standin = _from_info(state_dir, info, None)
    try:
        standin.request("GET", "/version")
    except (KubeStandinError, OSError):
        return None
    return standin


def ensure_kube_standin(
    state_dir: Path, token: str | None = None, *, timeout: float = 30.0, detach: bool = True
) -> KubeStandin:
    """Reuse the stand-in running from ``state_dir``, else start one (detached by default)."""
    registry.reap_orphans(log=_log)
    return connect_kube_standin(state_dir) or start_kube_standin(
        state_dir, token, timeout=timeout, detach=detach
    )
