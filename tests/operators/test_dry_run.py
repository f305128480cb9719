"""What was submitted, and dry runs: ``dry_run=True`` on the GKE and Slurm operators in real
``dag.test()`` runs; the manifest or request in the task log and XCom, secrets masked.

The Slurm tests need no cluster: their connection points where nothing listens, and a dry run never
opens it (nor does a real run whose request is refused before submission).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from airflow_provider_pathways.gke.objects import JobKind
from sandbox.kube.validation import pathwaysjob_schema
from tests.support.airflow_runs import load_dag, run_dag
from tests.support.airflow_versions import TASK_LOG_IN_OUTPUT
from tests.support.kube_jobs import stand_in_objects

pytestmark = pytest.mark.versioned  # task logs and the secrets masker differ per Airflow version
DAGS = "dry_run_scenarios.py"
#: The Variable the Slurm DAG reads into an environment value (a sensitive name: masked when read).
DB_PASSWORD = "s3cret-db-pw-9f2e"


@pytest.fixture
def nowhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[None]:
    """Connections to clusters that do not answer (port 9, discard, where nothing listens)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "unused-token"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    gke = {"kube_config_path": str(kubeconfig), "namespace": "from-connection"}
    monkeypatch.setenv("AIRFLOW_CONN_GKE_NOWHERE", json.dumps({"conn_type": "kubernetes", "extra": gke}))
    slurm = {"transport": "rest", "token": "unused-token", "api_version": "v0.0.40"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_SLURM_NOWHERE",
        json.dumps(
            {"conn_type": "pathways_slurm", "host": "127.0.0.1", "port": 9, "login": "u", "extra": slurm}
        ),
    )
    monkeypatch.setenv("AIRFLOW_VAR_DB_PASSWORD", DB_PASSWORD)
    yield


def api_requests(kube: Any) -> int:
    return int(kube.control("requests")["total"])


def submission_in_log(logs: str, title: str) -> dict[str, Any]:
    """The YAML the task logged under ``title``: the lines after it, up to the next log record
    (the console renderer ends the record's last line with its logger and location)."""
    lines = logs.splitlines()
    start = next(i for i, line in enumerate(lines) if title in line)
    block = []
    for line in lines[start + 1 :]:
        if RECORD_START.match(line):
            break
        body, suffix, _ = line.partition(" [airflow.task.")
        block.append(body)
        if suffix:
            break
    loaded = yaml.safe_load("\n".join(block))
    assert isinstance(loaded, dict)
    return loaded


RECORD_START = re.compile(r"^\[?\d{4}-\d\d-\d\d[T ]")
# minutes, seconds and milliseconds of a record's time (the two formats may differ in time zone)
RECORD_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:(\d\d):(\d\d)[,.](\d{3})")


def log_records_with(logs: str, title: str) -> int:
    """How many log records hold ``title``: Airflow 2.11 and 3.0's ``dag.test()`` print some
    records twice (console and task handler, the same time in two formats), counted once."""
    lines = [line for line in logs.splitlines() if title in line]
    return len({(m.groups() if (m := RECORD_TIME.search(line)) else line) for line in lines})


# ---- GKE ------------------------------------------------------------------------------------


def test_gke_dry_run_creates_nothing_and_shows_the_manifest_with_defaults(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    kube.control("requests/reset")
    outcomes = run_dag(load_dag(DAGS, "gke_dry_run"))
    logs = capfd.readouterr().out
    outcome = outcomes["train"]

    assert outcome.state == "success"
    assert api_requests(kube) == 0  # not one request, let alone a create
    assert stand_in_objects(kube, "pathwaysjobs", "dry-run") == []
    manifest = outcome.xcom["submitted_manifest"]
    assert manifest["kind"] == "PathwaysJob"
    metadata = manifest["metadata"]
    assert metadata["namespace"] == "dry-run"
    assert metadata["name"].startswith("train-")  # the default name of the task instance
    assert metadata["labels"]["team"] == "research"
    assert metadata["labels"]["airflow.apache.org/task_id"] == "train"
    worker = manifest["spec"]["workers"][0]
    assert (worker["type"], worker["topology"], worker["numSlices"]) == ("ct5lp-hightpu-4t", "4x4", 2)
    assert manifest["spec"]["controller"]["mainContainerName"] == "main"  # a default, filled in
    env = manifest["spec"]["controller"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "WANDB_API_KEY", "value": "***"}, {"name": "STEPS", "value": "3"}]
    assert outcome.xcom["return_value"] == {
        "dry_run": True,
        "name": metadata["name"],
        "namespace": "dry-run",
        "kind": "PathwaysJob",
    }
    # logged once, as YAML, the same masked manifest
    title = f"Dry run: PathwaysJob dry-run/{metadata['name']} would be created (nothing was created)"
    if TASK_LOG_IN_OUTPUT:
        assert log_records_with(logs, title) == 1
        assert submission_in_log(logs, title) == manifest
    assert "literal-api-key-1234" not in logs


@pytest.mark.usefixtures("nowhere")
def test_gke_dry_run_needs_no_reachable_cluster_and_takes_the_connections_namespace(
    capfd: pytest.CaptureFixture[str],
) -> None:
    outcome = run_dag(load_dag(DAGS, "gke_dry_run_nowhere"))["train"]
    capfd.readouterr()
    assert outcome.state == "success"
    manifest = outcome.xcom["submitted_manifest"]
    assert manifest["kind"] == "JobSet"  # the plain JobSet xpk renders, every container filled in
    assert manifest["metadata"]["namespace"] == "from-connection"
    names = [job["name"] for job in manifest["spec"]["replicatedJobs"]]
    assert names == ["pathways-head", "worker"]


def test_a_real_run_shows_exactly_the_manifest_it_created(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

    outcome = run_dag(load_dag(DAGS, "gke_submitted_manifest"))["train"]
    logs = capfd.readouterr().out
    assert outcome.state == "success"
    shown = outcome.xcom["submitted_manifest"]
    [created] = stand_in_objects(kube, "pathwaysjobs", "submitted-manifest")
    try:
        # what was sent; the object read back is that plus the API server's CRD defaults
        sent = copy.deepcopy(shown)
        pathwaysjob_schema().apply_defaults(sent)
        assert (sent["apiVersion"], sent["kind"]) == (created["apiVersion"], created["kind"])
        assert sent["spec"] == _masked(created["spec"])
        for key in ("name", "namespace", "labels"):
            assert shown["metadata"][key] == created["metadata"][key], key
        # and the try that follows it marks it so after creating it
        followed = {"airflow.apache.org/followed-by-try": "1"}
        assert created["metadata"]["annotations"] == {**shown["metadata"]["annotations"], **followed}
        assert "literal-api-key-1234" not in logs
    finally:
        hook = PathwaysJobHook(kubernetes_conn_id="gke_sandbox")
        hook.delete_job(created["metadata"]["name"], "submitted-manifest", JobKind.PATHWAYS_JOB)
        hook.close()


def _masked(spec: dict[str, Any]) -> dict[str, Any]:
    """The created spec with the secret env value as the XCom shows it."""
    copy = json.loads(json.dumps(spec))
    for container in copy["controller"]["template"]["spec"]["containers"]:
        for entry in container.get("env", []):
            if entry["name"] == "WANDB_API_KEY":
                entry["value"] = "***"
    return copy


def test_a_bad_spec_fails_a_dry_run_as_it_fails_a_real_run(
    kube: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    errors = []
    for dag_id in ("gke_bad_spec", "gke_bad_spec_dry_run"):
        kube.control("requests/reset")
        outcome = run_dag(load_dag(DAGS, dag_id))["train"]
        logs = capfd.readouterr().out
        assert outcome.state == "failed" and outcome.try_number == 1, dag_id
        assert "submitted_manifest" not in outcome.xcom, dag_id
        assert kube.control("requests")["by_verb"].get("create", 0) == 0
        errors.append(set(re.findall(r"PathwaysSpecRejected: .*(?:\n(?:invalid|- ).*)*", logs)))
    assert len(errors[0]) == 1 and errors[0] == errors[1]
    [error] = errors[0]
    assert "the job spec is invalid, nothing was submitted" in error
    assert "spec.workers[0].topology: '3x3' is not a topology" in error


# ---- Slurm ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("nowhere")
def test_slurm_dry_run_shows_the_request_with_secrets_masked(capfd: pytest.CaptureFixture[str]) -> None:
    outcome = run_dag(load_dag(DAGS, "slurm_dry_run"))["train"]
    logs = capfd.readouterr().out

    assert outcome.state == "success"
    request = outcome.xcom["submitted_request"]
    assert request["job_name"] == "slurm_dry_run-train"  # rendered
    assert request["script"].startswith("#!/bin/bash\n#SBATCH --open-mode=truncate\n")
    options = request["sbatch_options"]
    assert "--partition=debug" in options and "--time=1:00:00" in options
    assert "--cpus-per-task=4" in options
    assert any(option.startswith("--comment=airflow-task-instance=") for option in options)
    assert "--open-mode=append" not in options  # the script's own #SBATCH line decides
    assert request["environment"] == {
        "API_TOKEN": "***",  # a secret name
        "DB_URL": "postgresql://trainer:***@db:5432/runs",  # a secret Airflow's masker knows
        "STEPS": "3",
    }
    assert outcome.xcom["return_value"] == {"dry_run": True, "job_name": "slurm_dry_run-train"}
    assert "job_id" not in outcome.xcom
    title = "Dry run: Slurm job slurm_dry_run-train would be submitted (nothing was submitted)"
    if TASK_LOG_IN_OUTPUT:
        assert log_records_with(logs, title) == 1
        assert submission_in_log(logs, title) == request
    assert "literal-token-5678" not in logs and DB_PASSWORD not in logs


@pytest.mark.usefixtures("nowhere")
def test_service_dry_run_shows_its_variables_and_leaves_the_path_to_the_cluster(
    capfd: pytest.CaptureFixture[str],
) -> None:
    outcome = run_dag(load_dag(DAGS, "slurm_service_dry_run"))["service"]
    capfd.readouterr()
    assert outcome.state == "success"
    request = outcome.xcom["submitted_request"]
    assert request["script_path"] == "~/pathways/start_pathways.sh"
    assert "script" not in request
    environment = request["environment"]
    assert {k: environment[k] for k in ("SLICE_SHAPE", "MIN_SLICES", "MAX_SLICES", "GCS_BUCKET")} == {
        "SLICE_SHAPE": "2x4",
        "MIN_SLICES": "1",
        "MAX_SLICES": "2",
        "GCS_BUCKET": "pathways-test-bucket",
    }
    # a file of this task instance's own, "~" expanded on the cluster when really submitted
    assert environment["PATHWAYS_CLUSTER_ENV"].startswith("~/")


@pytest.mark.usefixtures("nowhere")
def test_a_bad_request_fails_a_dry_run_as_it_fails_a_real_run(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # Airflow 3.0 prints the error with rich, which wraps it
    errors = []
    for dag_id in ("slurm_bad_request", "slurm_bad_request_dry_run"):
        outcome = run_dag(load_dag(DAGS, dag_id))["train"]
        logs = capfd.readouterr().out
        assert outcome.state == "failed" and outcome.try_number == 1, dag_id
        assert "submitted_request" not in outcome.xcom, dag_id
        errors.append(set(re.findall(r"PathwaysSpecRejected: nothing was submitted: .*", logs)))
    assert len(errors[0]) == 1 and errors[0] == errors[1]
    assert "time_limit 'soon' is not a Slurm time" in errors[0].pop()


def test_the_operators_dry_run_method_prints_the_request(capsys: pytest.CaptureFixture[str]) -> None:
    """``BaseOperator.dry_run()``, as ``KubernetesPodOperator`` has it: the YAML, outside any run."""
    try:
        from airflow.providers.common.compat.sdk import mask_secret
    except ImportError:  # the common-compat of Airflow 2.11 has no mask_secret: Airflow's own
        from airflow.utils.log.secrets_masker import mask_secret  # type: ignore[no-redef]

    from airflow_provider_pathways.operators.slurm import SlurmJobOperator

    mask_secret("registered-secret-4711")
    SlurmJobOperator(
        task_id="train",
        script="#!/bin/bash\necho registered-secret-4711\n",
        environment={"HF_TOKEN": "literal-token-0042", "STEPS": 3},
    ).dry_run()
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["script"] == "#!/bin/bash\necho ***\n"
    assert printed["environment"] == {"HF_TOKEN": "***", "STEPS": "3"}
    assert "--open-mode=append" in printed["sbatch_options"]
