"""Readiness of the Pathways service on real Slurm, with a service script that names its worker array
and owner in ``cluster.env`` (the sandbox's) and with one that does only what seed 002 promises
(``PATHWAYS_AS_PUBLISHED=1``): the proxy address in ``~/pathways/cluster.env`` once ``MIN_SLICES``
slices run, the workers submitted as a job array of ``run_worker_slice.sh``.

Every test runs per Slurm version and over REST and SSH.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pathways.hooks.slurm import SlurmHook
from airflow_provider_pathways.operators.slurm import CancelSlurmJobOperator
from airflow_provider_pathways.slurm.service import ServiceProbe, service_worker_arrays
from tests.slurm.conftest import CONN_IDS, Sandbox, wait_for
from tests.support.slurm_isolated import claim_isolated_node
from tests.support.slurm_scripts import (
    SHARED_CLUSTER_ENV,
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

    second, _ = start_service(hook, scripts, name, published=True, alone=False)
    services.append(second)
    wait_for(
        lambda: "Pathways cluster ready" in service_log(scripts, second), "the second to write its file", 90
    )
    for service, other in ((second, first), (first, second)):
        look = check(hook, service, probe).readiness
        assert not look.ready and look.proxy_address is None
        assert f"cannot tell whose {path} this is" in look.reason
        assert f"job(s) {other} of the same Slurm user" in look.reason
        assert "cluster_env_variable" in look.reason  # the way out is named


def test_two_services_of_one_user_under_two_names_never_take_each_others_proxy_or_workers(
    sandbox: Sandbox, hook: SlurmHook, transport: str, scripts: Path, services: list[int]
) -> None:
    """Issue 34, item 3, as a user tried it: two DAGs' services under one Slurm user (two job names,
    ``<dag_id>.<task_id>``), seed 002's script (``~/pathways/cluster.env``, an array named after
    ``run_worker_slice.sh``, neither naming a job), B submitted 2 s after A and writing its file
    first. A must not report B's proxy, and cancelling A (kill, timeout and teardown share the
    lookup) must cancel A's worker array and leave B's workers running."""
    token = uuid.uuid4().hex[:8]
    probe = ServiceProbe(cluster_env_path=SHARED_CLUSTER_ENV, min_slices=2)
    with claim_isolated_node(sandbox.settings, sandbox.run) as isolated:
        # A's slices wait behind a job of another user (root) that fills the isolated node: B,
        # whose slices run at once, writes cluster.env first.
        blocker = sandbox.sbatch(
            f"--partition={isolated.partition}", f"--cpus-per-task={isolated.cpus}", "--wrap", "sleep 600"
        )
        wait_for(lambda: states(sandbox, blocker) == {"RUNNING"}, "the job filling the isolated node")
        first, _ = start_service(
            hook,
            scripts,
            f"dag_a_{token}.service",
            published=True,
            leaves_workers=True,
            environment={"PATHWAYS_WORKER_PARTITION": isolated.partition},
        )
        services.append(first)
        first_array = wait_for(lambda: logged_array(scripts, first), "A's worker array", 60)
        time.sleep(2)  # B's start lies seconds after A's array (Slurm's times are whole seconds)
        second, _ = start_service(
            hook, scripts, f"dag_b_{token}.service", published=True, leaves_workers=True, alone=False
        )
        services.append(second)
        wait_for(lambda: "Pathways cluster ready" in service_log(scripts, second), "B to write its file", 90)
        second_array = logged_array(scripts, second)
        assert second_array is not None and "Pathways cluster ready" not in service_log(scripts, first)

        look = check(hook, first, probe).readiness
        assert not look.ready and look.proxy_address is None, look  # never B's proxy
        assert f"job(s) {second} of the same Slurm user" in look.reason, look.reason
        assert "cluster_env_variable" in look.reason and "max_active_runs=1" in look.reason
        theirs = check(hook, second, probe).readiness  # B cannot tell A out either: A ran too
        assert not theirs.ready and f"job(s) {first} of the same Slurm user" in theirs.reason, theirs.reason

        # What a kill, a timeout or the teardown cancels: A's own array, never B's.
        found = hook.run_on_private_loop(lambda: service_worker_arrays(hook, [first], probe))
        assert found == [first_array], (found, first_array, second_array)
        stopped = CancelSlurmJobOperator(task_id="stop", job_ids=[first], slurm_conn_id=CONN_IDS[transport])
        try:
            assert stopped.execute({}) == {"cancelled": [first, first_array], "already_ended": []}
        finally:
            stopped.hook.close()
        wait_for(lambda: states(sandbox, first_array) == {"CANCELLED"}, "A's slices to be cancelled")
        time.sleep(2)  # B's slices stay up
        assert states(sandbox, second_array) == {"RUNNING"}
        assert states(sandbox, second) == {"RUNNING"}


def states(sandbox: Sandbox, job: int) -> set[str]:
    """The states of a job or of every task of an array."""
    out = sandbox.run("squeue", "-h", "-r", "-t", "all", "-j", str(job), "-o", "%T", check=False).stdout
    return set(out.split())
