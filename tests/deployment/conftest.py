"""One real Airflow deployment per pytest run (PostgreSQL, api-server, scheduler with LocalExecutor,
dag-processor, two triggerers) wired to the Kubernetes stand-in and the sandbox Slurm cluster.
``celery/`` runs its own deployment, with the CeleryExecutor, before this one.

Tests marked ``deployment``. Every selected scenario starts as soon as the deployment is up (see
``scenarios.py``); each test then waits for its own scenario and asserts on what it saw. The
services are reached directly (``gke_sandbox``, ``slurm_rest``, ``slurm_ssh``) or through gates that
the outage scenarios close (``gke_gated``, ``slurm_rest_gated``, ``slurm_ssh_gated``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.airflow.deployment import AirflowDeployment
from sandbox.kube.launcher import LOG_FILE as KUBE_LOG_FILE
from tests.deployment.clusters import KubeCluster, SlurmCluster
from tests.deployment.harness import Airflow, TaskOutcome
from tests.deployment.scenarios import Runner, Stage
from tests.deployment.steps import namespace
from tests.support.environment import require_root
from tests.support.lost_answer import LosingRelay
from tests.support.statsd_server import StatsdListener
from tests.support.tcp_gate import Gate

HERE = Path(__file__).resolve().parent
DAG_FILES = sorted((HERE / "dags").glob("*.py"))
_SELECTED = pytest.StashKey[list[tuple[Path, str]]]()
DEPLOYMENT_KEY = pytest.StashKey[AirflowDeployment]()
KUBE_LOG_KEY = pytest.StashKey[Path]()
#: A failed scenario's report shows the last lines of each try's log, each cut to its message.
LOG_LINES = 40
LOG_LINE_WIDTH = 240
_SEEN = pytest.StashKey[Any]()
#: Seconds a Google access token of the GKE stand-in reached with a Google identity lives.
GOOGLE_TOKEN_LIFETIME = 3


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "deployment: runs DAGs through a real Airflow deployment")
    config.addinivalue_line(
        "markers", "scenario(name): the concurrent scenario whose evidence the test checks"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.deployment)


def scenario_name(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("scenario")
    if marker is None:
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    return str(marker.args[0]).format(**params)


def pytest_collection_finish(session: pytest.Session) -> None:
    found = {(Path(str(item.fspath)).resolve(), scenario_name(item)) for item in session.items}
    session.config.stash[_SELECTED] = sorted((path, name) for path, name in found if name)


def selected_scenarios(
    config: pytest.Config, directory: Path, *, excluding: tuple[Path, ...] = ()
) -> list[str]:
    """The scenarios of the selected tests under ``directory`` (not under ``excluding``): each
    deployment runs its own."""
    return sorted(
        {
            name
            for path, name in config.stash.get(_SELECTED, [])
            if path.is_relative_to(directory) and not any(path.is_relative_to(e) for e in excluding)
        }
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    deployment = item.config.stash.get(DEPLOYMENT_KEY, None)
    if report.failed and scenario_name(item):
        for seen in _outcomes(item.stash.get(_SEEN, None)):
            for attempt, text in sorted(seen.logs.items()):
                tail = "\n".join(line[:LOG_LINE_WIDTH] for line in text.splitlines()[-LOG_LINES:])
                report.sections.append((f"task log {seen.dag_id}.{seen.task_id} try {attempt}", tail))
            deletes = _deletes_in(item.config.stash.get(KUBE_LOG_KEY, None), namespace(seen.dag_id))
            if deletes:
                report.sections.append((f"Kubernetes deletes in {namespace(seen.dag_id)}", deletes))
        if deployment is not None:
            report.sections.append(("Airflow deployment logs (tails)", deployment.tails(40)))


def _deletes_in(kube_log: Path | None, ns: str) -> str:
    """The Kubernetes stand-in's audit lines of deletes in namespace ``ns``."""
    if kube_log is None or not kube_log.exists():
        return ""
    marker = f"/namespaces/{ns}/"
    lines = kube_log.read_text(errors="replace").splitlines()
    return "\n".join(line for line in lines if "DELETE" in line and marker in line)


def _outcomes(value: Any) -> list[TaskOutcome]:
    if isinstance(value, TaskOutcome):
        return [value]
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, TaskOutcome)]
    return []


def _cpu(pid: int) -> float:
    import psutil

    with contextlib.suppress(psutil.Error):
        times = psutil.Process(pid).cpu_times()
        return round(times.user + times.system, 1)
    return 0.0


def _gated_kubeconfig(standin: Any, gate: Gate, path: Path) -> Path:
    config = yaml.safe_load(Path(standin.kubeconfig).read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"http://127.0.0.1:{gate.port}"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def _slurm_connections(
    settings: dict[str, str], gates: dict[str, Gate], held: LosingRelay | None = None
) -> dict[str, str]:
    """``slurm_<transport>`` direct, ``slurm_<transport>_gated`` through the gates, and with
    ``held`` (a relay that can hold a submission) ``slurm_rest_held`` through it."""
    from sandbox.slurm.cluster import airflow_connection

    conns: dict[str, str] = {}
    if held is not None:
        direct = json.loads(airflow_connection(settings, "rest"))
        # A held submission waits for the kill a mark brings at the task's next heartbeat: its
        # answer must not time out first on a loaded machine (the default request_timeout is 60 s).
        extra = dict(direct.get("extra") or {}, request_timeout=300)
        conns["slurm_rest_held"] = json.dumps(dict(direct, host="127.0.0.1", port=held.port, extra=extra))
    for transport in ("rest", "ssh"):
        direct = json.loads(airflow_connection(settings, transport))
        conns[f"slurm_{transport}"] = json.dumps(direct)
        gated = dict(direct, host="127.0.0.1", port=gates[transport].port)
        if transport == "ssh":
            known = settings["SLURM_SANDBOX_SSH_KNOWN_HOSTS"]
            if not known.startswith("["):  # a path to the known_hosts file
                known = Path(known).read_text().strip().splitlines()[0]
            key = known.split(" ", 1)[1]
            gated["extra"] = dict(direct["extra"], known_hosts=f"[127.0.0.1]:{gates['ssh'].port} {key}")
        conns[f"slurm_{transport}_gated"] = json.dumps(gated)
    return conns


@contextlib.contextmanager
def kube_only_stage(
    request: pytest.FixtureRequest,
    prefix: str,
    dag_files: list[Path],
    *,
    gcs: bool = False,
    **deployment: Any,
) -> Iterator[Stage]:
    """A deployment (``deployment``: its settings) wired to a Kubernetes stand-in of its own, no
    Slurm, and with ``gcs`` a GCS emulator over HTTP (``STORAGE_EMULATOR_HOST`` of every Airflow
    process); everything stopped afterwards (files kept with ``PATHWAYS_KEEP_DEPLOYMENT_LOGS=1``)."""
    require_root("the deployment tests need root (PostgreSQL as its own user)")
    from sandbox.gcs.launcher import start_gcs_emulator
    from sandbox.kube.launcher import start_kube_standin

    base = Path(tempfile.mkdtemp(prefix=prefix))
    keep = os.environ.get("PATHWAYS_KEEP_DEPLOYMENT_LOGS") == "1"
    standin = start_kube_standin(base / "kube")
    request.config.stash[KUBE_LOG_KEY] = base / "kube" / KUBE_LOG_FILE
    kube = KubeCluster(standin)
    emulator = start_gcs_emulator(base / "gcs", reuse=False) if gcs else None
    if emulator is not None:
        deployment["env"] = {**deployment.get("env", {}), **emulator.env()}
    airflow_deployment = AirflowDeployment(
        base / "airflow", dag_files, connections={"gke_sandbox": standin.airflow_connection()}, **deployment
    )
    airflow: Airflow | None = None
    try:
        airflow_deployment.start()
        request.config.stash[DEPLOYMENT_KEY] = airflow_deployment  # its logs go with a failed test's report
        airflow = Airflow(airflow_deployment)
        yield Stage(airflow=airflow, kube=kube, slurm=None, gates={}, gcs=emulator)
    finally:
        if airflow is not None:
            airflow.close()
        try:
            airflow_deployment.stop()
        finally:
            kube.close()
            standin.stop()
            if emulator is not None:
                emulator.stop()
            if keep:
                print(f"deployment files kept in {base}")
            else:
                shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def scenario_runner(stage: Stage, config: pytest.Config, directory: Path, **select: Any) -> Iterator[Runner]:
    """The scenarios of the selected tests under ``directory``, started at once on ``stage``."""
    scenarios = Runner(stage, selected_scenarios(config, directory, **select))
    try:
        yield scenarios
    finally:
        scenarios.close()
        if os.environ.get("PATHWAYS_DEPLOYMENT_CPU_REPORT") == "1":
            print("\nscenarios done after (s):", dict(sorted(scenarios.took.items(), key=lambda kv: kv[1])))


@pytest.fixture(scope="package")
def stage(request: pytest.FixtureRequest) -> Iterator[Stage]:
    """The deployment and the clusters, started once for the package's tests and stopped after them."""
    require_root("the deployment tests need root (PostgreSQL as its own user, the Slurm sandbox)")
    from sandbox.kube.launcher import start_kube_standin
    from sandbox.slurm.cluster import start_slurm_sandbox

    base = Path(tempfile.mkdtemp(prefix="pathways-deployment-"))
    keep = os.environ.get("PATHWAYS_KEEP_DEPLOYMENT_LOGS") == "1"
    cleanups: list[Any] = []
    try:
        standin = start_kube_standin(base / "kube")
        request.config.stash[KUBE_LOG_KEY] = base / "kube" / KUBE_LOG_FILE
        cleanups.append(standin.stop)
        kube = KubeCluster(standin)
        cleanups.append(kube.close)
        google = start_kube_standin(
            base / "kube-google",
            extra_args=(
                "--google",
                "--token-lifetime",
                str(GOOGLE_TOKEN_LIFETIME),
                "--max-watch-seconds",
                "1",
            ),
        )
        cleanups.append(google.stop)
        google_cloud, gke_google = google.google_connections("google_cloud_sandbox", namespace="gke-google")
        settings = start_slurm_sandbox()
        slurm = SlurmCluster(settings)
        cleanups.append(slurm.cleanup)
        rest_port = int(settings["SLURM_SANDBOX_REST_URL"].rsplit(":", 1)[1])
        gates = {
            "kube": Gate("127.0.0.1", int(standin.url.rsplit(":", 1)[1]), "kube"),
            "rest": Gate("127.0.0.1", rest_port, "slurmrestd"),
            "ssh": Gate(settings["SLURM_SANDBOX_SSH_HOST"], int(settings["SLURM_SANDBOX_SSH_PORT"]), "sshd"),
        }
        cleanups.extend(g.close for g in gates.values())
        held = LosingRelay("127.0.0.1", rest_port).__enter__()
        cleanups.append(lambda: held.__exit__(None, None, None))
        gated_kubeconfig = _gated_kubeconfig(standin, gates["kube"], base / "kube" / "kubeconfig-gated")
        connections = {
            "gke_sandbox": standin.airflow_connection(),
            "gke_gated": json.dumps(
                {"conn_type": "kubernetes", "extra": {"kube_config_path": str(gated_kubeconfig)}}
            ),
            **_slurm_connections(settings, gates, held),
            "google_cloud_sandbox": google_cloud,
            "gke_google": gke_google,
        }
        statsd = StatsdListener()  # Airflow's [metrics] go here: the provider's metrics in a deployment
        cleanups.append(statsd.close)
        deployment = AirflowDeployment(
            base / "airflow", DAG_FILES, connections=connections, parallelism=32, env=statsd.settings()
        )
        cleanups.append(deployment.stop)
        deployment.start()
        request.config.stash[DEPLOYMENT_KEY] = deployment
        airflow = Airflow(deployment)
        cleanups.append(airflow.close)
        yield Stage(
            airflow=airflow, kube=kube, slurm=slurm, gates=gates, google=google, statsd=statsd, held=held
        )
        if os.environ.get("PATHWAYS_DEPLOYMENT_CPU_REPORT") == "1":
            snapshots = airflow._snapshots
            print(
                f"\nCPU seconds: {deployment.cpu_report()}, kube stand-in: {_cpu(standin.pid)}, "
                f"task instance reads: {snapshots.calls} taking {snapshots.call_seconds:.0f}s"
            )
    finally:
        errors = []
        for cleanup in reversed(cleanups):
            try:
                cleanup()
            except Exception as err:
                errors.append(repr(err))
        if keep:
            print(f"deployment files kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
        if errors:
            raise RuntimeError("stopping the deployment: " + "; ".join(errors))


@pytest.fixture(scope="package")
def runner(stage: Stage, request: pytest.FixtureRequest) -> Iterator[Runner]:
    # celery/ and compat/ run their own deployments, and their own scenarios on them
    with scenario_runner(
        stage, request.config, HERE, excluding=(HERE / "celery", HERE / "compat")
    ) as scenarios:
        yield scenarios


@pytest.fixture
def seen(runner: Runner, request: pytest.FixtureRequest) -> Any:
    """What this test's scenario saw (its exception, if it failed, is raised here)."""
    name = scenario_name(request.node)
    assert name, "a test using `seen` needs @pytest.mark.scenario(name)"
    value = runner.result(name)
    request.node.stash[_SEEN] = value
    return value
