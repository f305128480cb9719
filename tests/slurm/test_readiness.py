"""Readiness of the Pathways service on real Slurm, with a service script that names its worker array
and owner in ``cluster.env`` (the sandbox's) and with one that does only what seed 002 promises
(``PATHWAYS_AS_PUBLISHED=1``): the proxy address in ``~/pathways/cluster.env`` once ``MIN_SLICES``
slices run, the workers submitted as a job array of ``run_worker_slice.sh``.

Every test runs per Slurm version and over REST and SSH.
"""

from __future__ import annotations

import re
import shutil
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pathways.hooks.slurm import SlurmHook
from airflow_provider_pathways.slurm.service import ServiceCheck, ServiceProbe, check_pathways_service
from tests.slurm.conftest import Sandbox, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions("22.05", "24.11")]

SCRIPTS = Path(__file__).resolve().parents[2] / "sandbox" / "slurm" / "scripts"
SHARED_CLUSTER_ENV = "~/pathways/cluster.env"  # where the published script always writes


@pytest.fixture
def scripts(sandbox: Sandbox) -> Path:
    """This checkout's service and worker scripts, in a directory of the test's own."""
    target = sandbox.user_dir()
    for name in ("start_pathways.sh", "run_worker_slice.sh"):
        shutil.copyfile(SCRIPTS / name, target / name)
        (target / name).chmod(0o755)
    return target


def start_service(
    hook: SlurmHook, scripts: Path, name: str, *, published: bool, min_slices: int = 2, max_slices: int = 2
) -> tuple[int, str]:
    """Submit the service script; (job id, the cluster.env it writes)."""
    own_path = str(scripts / f"cluster-{uuid.uuid4().hex[:8]}.env")
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


def proxy_banner(address: str) -> str:
    """What the stand-in proxy at ``grpc://host:port`` answers: it names its service job."""
    host, port = address.removeprefix("grpc://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        return conn.recv(200).decode()


@pytest.fixture
def services(hook: SlurmHook) -> Any:
    submitted: list[int] = []
    yield submitted
    for job_id in submitted:
        hook.cancel_job(job_id)  # the script cancels its worker array on SIGTERM


@pytest.mark.parametrize("published", [False, True], ids=["sandbox-script", "published-script"])
def test_ready_when_min_slices_of_the_service_jobs_own_array_run(
    hook: SlurmHook, scripts: Path, services: list[int], published: bool
) -> None:
    name = f"readiness-{uuid.uuid4().hex[:8]}"
    service, path = start_service(hook, scripts, name, published=published)
    services.append(service)
    probe = ServiceProbe(cluster_env_path=path, min_slices=2)

    ready = wait_for(
        lambda: (c := check(hook, service, probe)).readiness.ready and c, "readiness", 90
    ).readiness
    assert ready.worker_array_job_id == logged_array(scripts, service)
    assert ready.running_slices == 2
    assert f"job={service} " in proxy_banner(ready.proxy_address or "")  # this service's proxy
    if published:  # the file says nothing but the address, yet the array was found in Slurm
        assert dict(ready.values) == {"JAX_BACKEND_TARGET": ready.proxy_address}


def test_two_service_jobs_of_one_name_never_read_each_others_cluster_env(
    hook: SlurmHook, scripts: Path, services: list[int]
) -> None:
    """Seed 002's script writes ~/pathways/cluster.env and names nothing: while two service jobs of
    one user and name run, neither takes the file or a worker array as its own."""
    name = f"readiness-pair-{uuid.uuid4().hex[:8]}"
    first, path = start_service(hook, scripts, name, published=True)
    services.append(first)
    probe = ServiceProbe(cluster_env_path=path, min_slices=2)
    alone = wait_for(lambda: (c := check(hook, first, probe)).readiness.ready and c, "the first ready", 90)
    assert f"job={first} " in proxy_banner(alone.readiness.proxy_address or "")

    second, _ = start_service(hook, scripts, name, published=True)
    services.append(second)
    wait_for(
        lambda: "Pathways cluster ready" in service_log(scripts, second), "the second to write its file", 90
    )
    for service, other in ((second, first), (first, second)):
        look = check(hook, service, probe).readiness
        assert not look.ready and look.proxy_address is None
        assert f"cannot tell whose {path} this is" in look.reason
        assert f"service job(s) {other} of the same user and name" in look.reason
        assert "cluster_env_variable" in look.reason  # the way out is named
