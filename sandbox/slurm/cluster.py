"""Start the sandbox Slurm cluster and describe it as Airflow connections (tests and demo)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
UP_SCRIPT = REPO_ROOT / "sandbox" / "slurm" / "up.sh"


def state_dir() -> Path:
    """Where ``up.sh`` keeps its state (``SANDBOX_STATE_DIR`` or ``.sandbox/slurm``)."""
    return Path(os.environ.get("SANDBOX_STATE_DIR") or REPO_ROOT / ".sandbox" / "slurm").resolve()


def start_slurm_sandbox(timeout: float = 600) -> dict[str, str]:
    """Run ``up.sh`` (idempotent; takes the machine's sandbox over) and return ``slurm.json``."""
    env = {**os.environ, "SANDBOX_SLURM_TAKEOVER": "1"}
    proc = subprocess.run(
        ["bash", str(UP_SCRIPT)], capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT, env=env
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sandbox/slurm/up.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads((state_dir() / "slurm.json").read_text())


def airflow_connection(settings: dict[str, str], transport: str) -> str:
    """JSON for an ``AIRFLOW_CONN_<ID>`` variable: a ``pathways_slurm`` connection to the sandbox."""
    if transport == "rest":
        host, _, port = settings["SLURM_SANDBOX_REST_URL"].split("//", 1)[1].partition(":")
        extra = {
            "transport": "rest",
            "token_file": settings["SLURM_SANDBOX_JWT_TOKEN_FILE"],
            "api_version": "auto",
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
