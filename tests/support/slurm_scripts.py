"""This checkout's sandbox service and worker scripts, copied for one test.

The installed copies (``SLURM_SANDBOX_SCRIPTS_DIR``) are whatever checkout last started the shared
clusters; a test that relies on a script's behaviour submits its own copy.
"""

from __future__ import annotations

import re
import shutil
import socket
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_provider_pathways.hooks.slurm import SlurmHook
from airflow_provider_pathways.slurm.service import (
    ServiceCheck,
    ServiceProbe,
    check_pathways_service,
    may_be_service,
)

SCRIPTS = Path(__file__).resolve().parents[2] / "sandbox" / "slurm" / "scripts"
SHARED_CLUSTER_ENV = "~/pathways/cluster.env"  # where the published script always writes


def copy_service_scripts(settings: dict[str, str]) -> Path:
    """A fresh directory in the cluster user's home, owned by the user, with ``start_pathways.sh``
    and ``run_worker_slice.sh``."""
    user = settings["SLURM_SANDBOX_USER"]
    tests = Path(settings["SLURM_SANDBOX_USER_HOME"]) / "pathways" / "tests"
    target = tests / uuid.uuid4().hex[:12]
    target.mkdir(parents=True)
    for folder in (tests, target):
        shutil.chown(folder, user, user)
    for name in ("start_pathways.sh", "run_worker_slice.sh"):
        shutil.copyfile(SCRIPTS / name, target / name)
        (target / name).chmod(0o755)
    return target


def wait_until_alone(hook: SlurmHook, timeout: float = 180) -> None:
    """Wait until no job of the cluster user that may be a Pathways service job (any job not marked
    as another kind by this provider, whatever its name: an earlier test's service, or another test
    run's jobs on this shared cluster) is active or ended within the last 2 s, so that a service
    submitted now, as seed 002 publishes it, can tell its cluster.env and worker array as its own
    (Slurm's times are whole seconds). After ``timeout`` it goes on: the test then says what was in
    the way."""
    deadline = time.monotonic() + timeout

    def in_the_way() -> list[int]:
        recent = datetime.now(timezone.utc) - timedelta(seconds=2)
        return [
            job.job_id
            for job in hook.get_user_jobs()
            if may_be_service(job) and (job.active or job.end_time is None or job.end_time >= recent)
        ]

    while in_the_way() and time.monotonic() < deadline:
        time.sleep(0.5)


def start_service(
    hook: SlurmHook,
    scripts: Path,
    name: str,
    *,
    published: bool,
    min_slices: int = 2,
    max_slices: int = 2,
    leaves_workers: bool = False,
    environment: dict[str, str] | None = None,
    alone: bool | None = None,
) -> tuple[int, str]:
    """Submit the service script; (job id, the cluster.env it writes). The published script's
    file is removed first: one an earlier test's service wrote a moment ago would be within the
    clock slack of this job's start (whole seconds), so it would pass for fresh. ``leaves_workers``:
    the script leaves its worker array running when it ends (nothing published promises more).
    ``environment``: more variables for the script (``PATHWAYS_WORKER_PARTITION``, say). ``alone``
    (default: ``published``): first :func:`wait_until_alone`."""
    own_path = str(scripts / f"cluster-{uuid.uuid4().hex[:8]}.env")
    if published if alone is None else alone:
        wait_until_alone(hook)
    if published:
        (scripts.parents[1] / "cluster.env").unlink(missing_ok=True)  # ~/pathways/cluster.env
    job_id = hook.submit_job(
        script_path=str(scripts / "start_pathways.sh"),
        job_name=name,
        output=str(scripts / "service-%j.out"),
        environment={
            "SLICE_SHAPE": "2x4",
            "MIN_SLICES": str(min_slices),
            "MAX_SLICES": str(max_slices),
            "GCS_BUCKET": "my-bucket",
            "PATHWAYS_WORKER_SCRIPT": str(scripts / "run_worker_slice.sh"),
            "PATHWAYS_LOG_DIR": str(scripts / "logs"),
            "PATHWAYS_AS_PUBLISHED": "1" if published else "0",
            "PATHWAYS_CLUSTER_ENV": own_path,
            "PATHWAYS_CANCEL_WORKERS_ON_EXIT": "0" if leaves_workers else "1",
            **(environment or {}),
        },
    )
    return job_id, SHARED_CLUSTER_ENV if published else own_path


def check(hook: SlurmHook, service: int, probe: ServiceProbe) -> ServiceCheck:
    return hook.run_on_private_loop(lambda: check_pathways_service(hook, service, probe))


def service_log(scripts: Path, service: int) -> str:
    path = scripts / f"service-{service}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def logged_array(scripts: Path, service: int) -> int | None:
    """The worker array the service job says it submitted (its own log)."""
    match = re.search(r"worker array job id: (\d+)", service_log(scripts, service))
    return int(match.group(1)) if match else None


def logged_proxy(scripts: Path, service: int) -> str | None:
    """The proxy address the service job says it wrote (its own log)."""
    pattern = r"Pathways cluster ready: wrote \S+ \(PATHWAYS_PROXY_ADDRESS=(\S+)\)"
    match = re.search(pattern, service_log(scripts, service))
    return match.group(1) if match else None


def stop_service(hook: SlurmHook, scripts: Path, service: int) -> None:
    """Cancel a service job, then the worker array its log names: the published script leaves its
    array running when it ends (nothing published promises otherwise)."""
    hook.cancel_job(service)
    array = logged_array(scripts, service)
    if array is not None:
        hook.cancel_job(array)


def proxy_banner(address: str) -> str:
    """What the stand-in proxy at ``grpc://host:port`` answers: it names its service job."""
    host, port = address.removeprefix("grpc://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        return conn.recv(200).decode()
