"""`make demo`: start the sandbox, run the example DAGs with dag.test(), and tell what happened.

python -m sandbox.demo            # every example
python -m sandbox.demo run FILE DAG_ID   # one DAG (used by the above, in a child process)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
STATE = REPO_ROOT / ".sandbox"
AIRFLOW_HOME = STATE / "airflow"
GKE_EXAMPLES = (
    ("example_pathways_training.py", "example_pathways_training"),
    ("example_pathways_batch_inference.py", "example_pathways_batch_inference"),
)
SLURM_EXAMPLE = ("example_pathways_slurm.py", "example_pathways_slurm")
EXAMPLE_BUCKET = "my-pathways-bucket"
# Log lines worth showing: the provider's own, and the example tasks' prints.
_SHOWN = re.compile(
    r"airflow_provider_pathways|would run inference|Retry policy decision|Pathways proxy address|step \d"
)
_CONF_ARG = 4
_LOG_LINE = re.compile(r"^\S+Z \[(\w+)\s*\] (.*?)\s+\[([\w.]+)\].*$")
_SUMMARY = "DEMO-SUMMARY "
#: The example DAG running now (a child process), stopped when the demo is interrupted.
_running: list[subprocess.Popen[str]] = []


def _airflow_env(connections: dict[str, str], deployment: str) -> dict[str, str]:
    env = dict(os.environ)
    # Its own deployment name: the Slurm jobs of this demo run, and only they, carry it.
    env["AIRFLOW__PATHWAYS__DEPLOYMENT_NAME"] = deployment
    env.update({f"AIRFLOW_CONN_{conn_id.upper()}": value for conn_id, value in connections.items()})
    env.update(
        {
            "AIRFLOW_HOME": str(AIRFLOW_HOME),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(AIRFLOW_HOME / "dags"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME}/airflow.db",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
        }
    )
    return env


def _prepare_airflow(env: dict[str, str]) -> None:
    dags = AIRFLOW_HOME / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    for path in (REPO_ROOT / "example_dags").glob("*.py"):
        shutil.copy2(path, dags / path.name)
    if not (AIRFLOW_HOME / "airflow.db").exists():
        print("Creating the Airflow metadata database (SQLite)...", flush=True)
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL
        )


def _show(line: str) -> None:
    match = _LOG_LINE.match(line)
    if match:
        level, message, _logger = match.groups()
        print(f"    {level:<7} {message}")
    else:
        print(f"    {line}")


def _run_example(
    filename: str, dag_id: str, env: dict[str, str], conf: dict[str, Any] | None = None
) -> dict[str, Any]:
    print(f"\n=== {dag_id} ({filename})", flush=True)
    child = subprocess.Popen(
        [sys.executable, "-m", "sandbox.demo", "run", filename, dag_id, json.dumps(conf or {})],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    _running.append(child)
    summary: dict[str, Any] = {}
    assert child.stdout is not None
    for raw in child.stdout:
        line = raw.rstrip("\n")
        if line.startswith(_SUMMARY):
            summary = json.loads(line[len(_SUMMARY) :])
        elif _SHOWN.search(line):
            _show(line)
    child.wait()
    _running.remove(child)
    for task, outcome in summary.get("tasks", {}).items():
        print(f"  task {task:<22} {outcome['state']:<8} try {outcome['try_number']}")
    return summary


def run_one(filename: str, dag_id: str, conf: dict[str, Any]) -> None:
    """Child process: run one DAG and print a JSON summary line."""
    import importlib.util

    from airflow.models.taskinstance import TaskInstance
    from airflow.sdk import DAG
    from airflow.utils.session import create_session
    from sqlalchemy import select

    path = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / filename
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag = next(v for v in vars(module).values() if isinstance(v, DAG) and v.dag_id == dag_id)
    run = dag.test(run_conf=conf or None)
    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run.run_id)
        ).all()
        tasks = {
            (ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"): {
                "state": str(getattr(ti.state, "value", ti.state)),
                "try_number": ti.try_number,
            }
            for ti in tis
        }
    print(_SUMMARY + json.dumps({"dag_id": dag_id, "state": str(run.state), "tasks": tasks}), flush=True)


def _end_left_jobs(slurm: dict[str, str], deployment: str) -> list[str]:
    """Cancel the Slurm jobs this demo run left active (interrupted, a DAG run never reached its
    teardown): those carrying its deployment's name (``dep=`` in the comment), and the worker arrays
    of its services (the sandbox's ``start_pathways.sh``, run as the demo runs it, comments them
    ``pathways-service=<id>``; the published script's arrays carry no such comment). Nothing of
    another demo or test run: their deployment names differ. The ids cancelled."""
    from airflow_provider_pathways.slurm.job import comment_owner
    from sandbox.slurm.cluster import slurm_cli

    listed = subprocess.run(
        [*slurm_cli(slurm), "squeue", "-h", "-u", slurm["SLURM_SANDBOX_USER"], "-o", "%i|%k"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if listed.returncode != 0:  # Slurm unreachable: say so, and let the demo end as it would
        print(f"Could not list the Slurm jobs this demo left ({deployment}): {listed.stderr.strip()}")
        return []
    jobs = [line.partition("|")[::2] for line in listed.stdout.splitlines()]
    ours = {
        job.split("_")[0]
        for job, comment in jobs
        if (owner := comment_owner(comment)) is not None and owner.deployment == deployment
    }
    workers = {f"pathways-service={service}" for service in ours}
    arrays = {job.split("_")[0] for job, comment in jobs if comment in workers}
    left = sorted(ours | arrays, key=int)
    if left:
        # check=False: a job that ended since it was listed is no failure of the demo
        subprocess.run([*slurm_cli(slurm), "scancel", *left], timeout=60, check=False)
    return left


def _stop_running() -> None:
    """The example DAG still running (its process got the same signal): given 30 s, then killed."""
    for child in list(_running):
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _interrupted(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _succeeded(summary: dict[str, Any]) -> bool:
    return bool(summary) and all(t["state"] == "success" for t in summary["tasks"].values())


def main() -> int:
    from sandbox.gcs.launcher import start_gcs_emulator
    from sandbox.kube.launcher import ensure_kube_standin
    from sandbox.slurm.cluster import airflow_connection, start_slurm_sandbox

    print("Starting the sandbox: Kubernetes API stand-in with simulated Pathways controllers...")
    kube = ensure_kube_standin(STATE / "kube")
    print(f"  API server {kube.url} (kubeconfig {kube.kubeconfig.relative_to(REPO_ROOT)})")
    print("Starting the sandbox: a real Slurm cluster (slurmctld, slurmd, slurmrestd, sshd)...")
    slurm = start_slurm_sandbox()
    print(f"  slurmrestd {slurm['SLURM_SANDBOX_REST_URL']}, sshd port {slurm['SLURM_SANDBOX_SSH_PORT']}")
    print("Starting the sandbox: a GCS emulator for the compilation cache...")
    gcs = start_gcs_emulator(STATE / "gcs")
    gcs.create_bucket(EXAMPLE_BUCKET)
    print(f"  {gcs.url} with bucket gs://{EXAMPLE_BUCKET}")
    deployment = f"demo-{os.getpid()}"
    env = _airflow_env(
        {
            "kubernetes_default": kube.airflow_connection(),
            "pathways_slurm_default": airflow_connection(slurm, "ssh"),
        },
        deployment,
    )
    env.update(gcs.env())
    _prepare_airflow(env)
    # SIGTERM (make demo stopped, its session passing the signal on) ends the demo as Ctrl-C does:
    # through the cleanup below.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        return _run_examples(env, kube, slurm)
    finally:
        _stop_running()
        left = _end_left_jobs(slurm, deployment)
        if left:
            print(f"\nCancelled the Slurm jobs this demo left active: {', '.join(left)}", flush=True)


def _run_examples(env: dict[str, str], kube: Any, slurm: dict[str, str]) -> int:
    from sandbox.gcs.demo import run_demo as run_cache_cleanup_demo

    failed = [
        dag_id for filename, dag_id in GKE_EXAMPLES if not _succeeded(_run_example(filename, dag_id, env))
    ]
    left = kube.request("GET", "/apis/pathways-job.pathways.domain/v1/pathwaysjobs")["items"]
    print(f"\nPathwaysJobs left on the cluster: {len(left)}")
    slurm_conf = {
        "scripts_dir": slurm["SLURM_SANDBOX_SCRIPTS_DIR"],
        "workload_script": Path(slurm["SLURM_SANDBOX_RUN_WORKLOAD_SCRIPT"]).name,
    }
    if not _succeeded(_run_example(*SLURM_EXAMPLE, env, slurm_conf)):
        failed.append(SLURM_EXAMPLE[1])
    print("\n=== example_cache_cleanup (example_cache_cleanup.py): a nightly cleanup of a team bucket")
    if run_cache_cleanup_demo(STATE / "gcs-demo") != 0:
        failed.append("example_cache_cleanup")
    if not os.environ.get("PATHWAYS_SANDBOX_SESSION"):
        # Run by hand; `make demo` stops the sandbox itself when the demo ends (sandbox/session.py).
        print("\nThe sandbox keeps running; stop it with `make sandbox-down`.")
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    print("All example DAGs succeeded.")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "run":
        run_one(sys.argv[2], sys.argv[3], json.loads(sys.argv[_CONF_ARG]))
    else:
        sys.exit(main())
