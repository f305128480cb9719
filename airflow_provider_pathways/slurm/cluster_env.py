"""The ``cluster.env`` file a Pathways service job writes on Slurm, and readiness read from it.

The file is shell-style ``KEY=VALUE`` lines. It is parsed, never executed. Its key names are not
published: the proxy address key is configurable and defaults to the first of
:data:`DEFAULT_PROXY_KEYS` present.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

DEFAULT_CLUSTER_ENV_PATH = "~/pathways/cluster.env"
DEFAULT_PROXY_KEYS: tuple[str, ...] = ("PATHWAYS_PROXY_ADDRESS", "JAX_BACKEND_TARGET", "PATHWAYS_PROXY")
DEFAULT_SERVICE_JOB_KEY = "PATHWAYS_SERVICE_JOB_ID"
DEFAULT_WORKER_ARRAY_KEY = "PATHWAYS_WORKER_ARRAY_JOB_ID"
#: The worker array's job name: the service job runs ``sbatch run_worker_slice.sh`` (seed 002), and
#: sbatch names a job after its script file unless given ``--job-name``.
DEFAULT_WORKER_JOB_NAME = "run_worker_slice.sh"
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ADDRESS = re.compile(r"^(?:grpc://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(?P<port>\d{1,5})/?$")
# mtime and Slurm's StartTime come from the same cluster clock; StartTime has whole seconds.
CLOCK_SLACK_SECONDS = 1.0


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def per_run_cluster_env_path(ti: Any) -> str:
    """A ``cluster.env`` path of one task instance's own (dag, run, task and map index), the same on
    every try, so a retry that reattaches finds the file again."""
    parts = [ti.dag_id, ti.task_id] + ([str(ti.map_index)] if getattr(ti, "map_index", -1) >= 0 else [])
    name = ".".join(_UNSAFE.sub("_", str(part)) for part in [*parts, ti.run_id])
    return f"~/pathways/airflow/{name}.env"


class ClusterEnvError(ValueError):
    """``cluster.env`` has a line that is not ``KEY=VALUE``."""


def parse_cluster_env(text: str) -> dict[str, str]:
    """Parse ``KEY=VALUE`` lines: ``#`` comments, ``export``, single and double quotes; no expansion."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, rest = line.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            raise ClusterEnvError(f"cluster.env line {number} is not KEY=VALUE")
        try:
            words = shlex.split(rest, comments=True, posix=True)
        except ValueError as err:
            raise ClusterEnvError(f"cluster.env line {number} ({key}): {err}") from None
        values[key] = " ".join(words)
    return values


def normalize_proxy_address(value: str) -> str:
    """``grpc://host:port`` for ``grpc://host:port`` or ``host:port``; ValueError otherwise."""
    match = _ADDRESS.fullmatch(value.strip())
    if not match or not 0 < int(match["port"]) < 65536:
        raise ValueError(f"{value!r} is not a proxy address; expected grpc://host:port or host:port")
    return f"grpc://{match['host']}:{match['port']}"


@dataclass(frozen=True)
class Readiness:
    """Whether the Pathways service on Slurm is ready, and why (not)."""

    ready: bool
    reason: str
    proxy_address: str | None = None
    values: Mapping[str, str] = field(default_factory=dict)
    running_slices: int | None = None
    worker_array_job_id: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "ready": self.ready,
            "reason": self.reason,
            "proxy_address": self.proxy_address,
            "values": dict(self.values),
            "running_slices": self.running_slices,
            "worker_array_job_id": self.worker_array_job_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Readiness:
        return cls(
            ready=bool(data["ready"]),
            reason=str(data.get("reason") or ""),
            proxy_address=data.get("proxy_address"),
            values=dict(data.get("values") or {}),
            running_slices=data.get("running_slices"),
            worker_array_job_id=data.get("worker_array_job_id"),
        )


def worker_array_id(values: Mapping[str, str], key: str = DEFAULT_WORKER_ARRAY_KEY) -> int | None:
    """The worker array job id recorded in ``cluster.env``, if any."""
    raw = values.get(key, "").strip()
    return int(raw) if raw.isdigit() else None


def evaluate_cluster_env(
    *,
    service_job_id: int,
    service_started: datetime | None,
    stat: tuple[float, int] | None,
    text: str | None,
    proxy_keys: Sequence[str] = DEFAULT_PROXY_KEYS,
    service_job_key: str = DEFAULT_SERVICE_JOB_KEY,
) -> Readiness:
    """Readiness from the file alone (slice counts are checked separately)."""
    if stat is None or text is None:
        return Readiness(False, "cluster.env does not exist yet")
    if service_started is None:
        return Readiness(False, "the service job has not started yet")
    mtime, _size = stat
    if mtime + CLOCK_SLACK_SECONDS < service_started.timestamp():
        return Readiness(False, "cluster.env is older than the service job (left by an earlier run)")
    try:
        values = parse_cluster_env(text)
    except ClusterEnvError as err:
        return Readiness(False, f"cluster.env is being written or malformed: {err}")
    owner = values.get(service_job_key)
    if owner and owner.strip() != str(service_job_id):
        return Readiness(
            False, f"cluster.env belongs to service job {owner}, not {service_job_id}", values=values
        )
    key = next((k for k in proxy_keys if values.get(k)), None)
    if key is None:
        return Readiness(False, f"cluster.env has none of {', '.join(proxy_keys)}", values=values)
    try:
        address = normalize_proxy_address(values[key])
    except ValueError as err:
        return Readiness(False, f"cluster.env {key}: {err}", values=values)
    return Readiness(True, f"cluster.env has {key}", proxy_address=address, values=values)


def count_running(tasks: Iterable[object]) -> int:
    """Worker array tasks that are RUNNING (one per TPU slice)."""
    return sum(1 for task in tasks if getattr(task, "state", None) == "RUNNING")
