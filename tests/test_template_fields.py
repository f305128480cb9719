"""Every template field of every operator and sensor takes an ``XComArg`` (another task's output,
known only when the task runs): the DAG parses, and the run uses the values the upstream task gave.

Airflow renders template fields just before ``execute()``; an operator that transforms or checks
them in ``__init__`` breaks DAGs that hand values from task to task. The DAGs are in
tests/dags/template_field_scenarios.py.
"""

from __future__ import annotations

import importlib
import inspect
import uuid
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import BaseOperator

from airflow_provider_pathways.operators.template_values import unrendered
from airflow_provider_pathways.provider_info import get_provider_info
from tests.support.airflow_runs import load_dag, run_dag
from tests.support.kube_jobs import stand_in_objects

DAGS = "template_field_scenarios.py"
DAG_IDS = ("xcomarg_gke", "xcomarg_cache", "xcomarg_cache_lifecycle", "xcomarg_slurm")


def provider_operator_classes() -> list[type[BaseOperator]]:
    """The operators and sensors the provider lists (what Airflow shows users)."""
    info = get_provider_info()
    modules = [m for entry in info["operators"] + info["sensors"] for m in entry["python-modules"]]
    classes: list[type[BaseOperator]] = []
    for name in modules:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (  # module first: Python 3.10 calls an alias such as tuple[...] a class
                inspect.isclass(value)
                and value.__module__ == name
                and issubclass(value, BaseOperator)
                and not inspect.isabstract(value)
            ):
                classes.append(value)
    return classes


def test_every_template_field_of_every_operator_is_given_as_an_xcomarg_somewhere() -> None:
    """The scenario DAGs parse with XComArgs in every template field, and miss none."""
    given: dict[type[BaseOperator], set[str]] = {}
    for dag_id in DAG_IDS:
        for task in load_dag(DAGS, dag_id).tasks:
            values = {f: getattr(task, f) for f in task.template_fields}
            fields = {f for f, value in values.items() if unrendered(value) and not isinstance(value, str)}
            given.setdefault(type(task), set()).update(fields)
    missing = {
        cls.__name__: sorted(set(cls.template_fields) - given.get(cls, set()))
        for cls in provider_operator_classes()
        if set(cls.template_fields) - given.get(cls, set())
    }
    assert missing == {}


@pytest.mark.end_to_end  # a rarer whole run (seconds): `make test` runs it
@pytest.mark.versioned  # XComArg and mapping resolve differently per Airflow version
def test_gke_operators_run_with_every_template_field_from_xcom(kube: Any) -> None:
    from tests.dags.template_field_scenarios import GKE_ANNOTATIONS, GKE_LABELS, GKE_NAMESPACE

    outcomes = run_dag(load_dag(DAGS, "xcomarg_gke"))

    assert {task: o.state for task, o in outcomes.items()} == dict.fromkeys(
        ("settings", "job", "ready", "submitted", "sweep", "delete"), "success"
    )
    job = outcomes["job"].xcom
    assert (job["name"], job["namespace"]) == ("xcomarg-job", GKE_NAMESPACE)
    assert job["proxy_address"] == "grpc://xcomarg-job-pathways-head-0-0.xcomarg-job:29000"
    # the console links are built from the project, cluster and location given through XCom
    assert "/kubernetes/job/europe-west4/xcom-cluster/" in job["_link_GKEWorkloadLink"]
    assert job["_link_GKEWorkloadLink"].endswith("project=xcom-project")
    assert outcomes["ready"].xcom["return_value"] == job["proxy_address"]
    (swept,) = outcomes["sweep"].xcom["return_value"]
    assert (swept["task_id"], swept["outcome"]) == ("job", "kept")
    metadata = outcomes["submitted"].xcom["return_value"]
    assert GKE_LABELS.items() <= metadata["labels"].items()
    assert GKE_ANNOTATIONS.items() <= metadata["annotations"].items()
    # Kueue's labels (kueue defaults.go: queue-name; workload priority class) from the XCom values
    assert metadata["labels"]["kueue.x-k8s.io/queue-name"] == "multislice-queue"
    assert metadata["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert stand_in_objects(kube, "pathwaysjobs", GKE_NAMESPACE) == []


@pytest.mark.parametrize("conn", ["slurm_rest", "slurm_ssh"])
def test_slurm_operators_run_with_every_template_field_from_xcom(
    slurm_cluster: dict[str, str], conn: str
) -> None:
    from tests.dags.template_field_scenarios import SLURM_ENV_MARKER

    home = slurm_cluster["SLURM_SANDBOX_USER_HOME"]
    conf = {
        "conn": conn,
        "scripts": slurm_cluster["SLURM_SANDBOX_SCRIPTS_DIR"],
        "cluster_env": f"{home}/pathways/tests/{uuid.uuid4().hex}.env",
        "workdir": f"{home}/pathways/tests",
    }

    outcomes = run_dag(load_dag(DAGS, "xcomarg_slurm"), conf)

    assert {task: o.state for task, o in outcomes.items()} == dict.fromkeys(
        ("slurm_settings", "service", "sweep", "sensor", "workload", "stop"), "success"
    )
    # the sweep kept the service its task handed on once ready (the workload had ended)
    swept = {str(row["job"]): row["outcome"] for row in outcomes["sweep"].xcom["return_value"]}
    assert swept == {f"Slurm job {outcomes['service'].xcom['job_id']}": "kept"}
    assert outcomes["service"].xcom["proxy_address"].startswith("grpc://")
    assert (
        outcomes["sensor"].xcom["return_value"]["proxy_address"] == outcomes["service"].xcom["proxy_address"]
    )
    workload = outcomes["workload"].xcom["job"]
    assert workload["name"] == "xcomarg-workload"
    assert workload["partition"] == "batch"
    assert outcomes["workload"].xcom["tpu_hours"]["tries"][0]["chips_per_slice"] == 8  # slice_shape 2x4
    with open(f"{conf['workdir']}/xcomarg-{workload['job_id']}.out") as output:
        assert f"workload sees {SLURM_ENV_MARKER}" in output.read()
    assert outcomes["service"].xcom["job_id"] in outcomes["stop"].xcom["return_value"]["cancelled"]
