"""Readiness of the Pathways service on real Slurm, with a service script that names its worker array
and owner in ``cluster.env`` (the sandbox's) and with one that does only what seed 002 promises
(``PATHWAYS_AS_PUBLISHED=1``): the proxy address in ``~/pathways/cluster.env`` once ``MIN_SLICES``
slices run, the workers submitted as a job array of ``run_worker_slice.sh``.

Every test runs per Slurm version and over REST and SSH.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pathways.hooks.slurm import SlurmHook
from airflow_provider_pathways.slurm.service import ServiceProbe
from tests.slurm.conftest import Sandbox, wait_for
from tests.slurm_scripts import (
    check,
    copy_service_scripts,
    logged_array,
    proxy_banner,
    service_log,
    start_service,
    stop_service,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions("22.05", "24.11")]


@pytest.fixture
def scripts(sandbox: Sandbox) -> Path:
    return copy_service_scripts(sandbox.settings)


@pytest.fixture
def services(hook: SlurmHook, scripts: Path) -> Any:
    submitted: list[int] = []
    yield submitted
    for job_id in submitted:
        stop_service(hook, scripts, job_id)


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
