"""Start the sandbox Slurm clusters and describe them as Airflow connections (tests and demo).

``22.05`` is the host's cluster (``up.sh``); the other versions run in Debian chroots
(``versions.sh``), each with its own ports, and describe themselves in the same ``slurm.json`` keys.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from sandbox import registry

REPO_ROOT = Path(__file__).resolve().parents[2]
UP_SCRIPT = REPO_ROOT / "sandbox" / "slurm" / "up.sh"
VERSIONS_SCRIPT = REPO_ROOT / "sandbox" / "slurm" / "versions.sh"
HOST_VERSION = "22.05"
#: Every Slurm version the sandbox runs: the host's, then the chroot clusters (versions.sh).
VERSIONS = (HOST_VERSION, "24.11", "26.05")


def state_dir(version: str = HOST_VERSION) -> Path:
    """Where ``up.sh`` (or ``versions.sh`` for other versions) keeps its state."""
    if version == HOST_VERSION:
        return Path(os.environ.get("SANDBOX_STATE_DIR") or REPO_ROOT / ".sandbox" / "slurm").resolve()
    base = os.environ.get("SANDBOX_VERSION_STATE_DIR") or REPO_ROOT / ".sandbox"
    return (Path(base) / f"slurm-{version}").resolve()


def start_slurm_sandbox(timeout: float = 600, version: str = HOST_VERSION) -> dict[str, str]:
    """Start one version's cluster (idempotent; builds its chroot the first time) and return its
    ``slurm.json``. The host cluster's ``up.sh`` takes the machine's sandbox over."""
    if version not in VERSIONS:
        raise ValueError(f"unknown sandbox Slurm version {version!r} (known: {', '.join(VERSIONS)})")
    # A `make test`/`make demo` that ends while this process runs leaves the clusters running for it.
    registry.add_user("slurm")
    env = {**os.environ, "SANDBOX_SLURM_TAKEOVER": "1"}
    if version == HOST_VERSION:
        command = ["bash", str(UP_SCRIPT)]
    else:
        command = ["bash", str(VERSIONS_SCRIPT), "up", version]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT, env=env)
    if proc.returncode != 0:
        what = " ".join(command[1:])
        raise RuntimeError(f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    settings: dict[str, str] = json.loads((state_dir(version) / "slurm.json").read_text())
    settings.setdefault("SLURM_SANDBOX_VERSION", HOST_VERSION)
    return settings


def slurm_cli(settings: dict[str, str]) -> list[str]:
    """The command prefix that runs Slurm's commands (as root) against this cluster."""
    root = settings.get("SLURM_SANDBOX_CHROOT")
    env = ["env", f"SLURM_CONF={settings['SLURM_CONF']}"]
    if not root:
        return env
    return ["chroot", root, "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", *env[1:]]


def airflow_connection(settings: dict[str, str], transport: str) -> str:
    """JSON for an ``AIRFLOW_CONN_<ID>`` variable: a ``pathways_slurm`` connection to the sandbox."""
    if transport == "rest":
        host, _, port = settings["SLURM_SANDBOX_REST_URL"].split("//", 1)[1].partition(":")
        extra = {
            "transport": "rest",
            "token_file": settings["SLURM_SANDBOX_JWT_TOKEN_FILE"],
            "api_version": "auto",
            "shared_fs": True,  # the sandbox's clusters run on this machine
        }
    elif transport == "ssh":
        host, port = settings["SLURM_SANDBOX_SSH_HOST"], settings["SLURM_SANDBOX_SSH_PORT"]
        extra = {
            "transport": "ssh",
            "key_file": settings["SLURM_SANDBOX_SSH_PRIVATE_KEY"],
            "known_hosts": settings["SLURM_SANDBOX_SSH_KNOWN_HOSTS"],
        }
    else:
        raise ValueError(f"transport: {transport!r} is not 'rest' or 'ssh'")
    return json.dumps(
        {
            "conn_type": "pathways_slurm",
            "host": host,
            "port": int(port),
            "login": settings["SLURM_SANDBOX_USER"],
            "extra": extra,
        }
    )
