"""The soak's deployment: one real Airflow (PostgreSQL, api-server, scheduler with LocalExecutor,
dag-processor, two triggerers) parsing only the soak's DAG files, wired to a Kubernetes stand-in of
its own through a gate (``gke_gated``) and, with Slurm, to the sandbox Slurm cluster through gates
(``slurm_rest_gated``, ``slurm_ssh_gated``) and directly, with slurmctld's records of the soak's
jobs. Everything it starts it stops."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.airflow.deployment import AirflowDeployment
from sandbox.kube.launcher import LOG_FILE as KUBE_LOG_FILE
from tests.deployment.clusters import SlurmCluster
from tests.deployment.conftest import _gated_kubeconfig, _slurm_connections
from tests.deployment.harness import Airflow
from tests.soak.records import KubeRecords, SlurmRecords
from tests.support.lost_answer import LosingRelay
from tests.support.tcp_gate import Gate

HERE = Path(__file__).resolve().parent
GKE_DAGS = HERE / "dags" / "soak_gke.py"
SLURM_DAGS = HERE / "dags" / "soak_slurm.py"


def deployment_name(base: Path) -> str:
    """The soak deployment's ``[pathways] deployment_name``: its directory's, so that another
    checkout's soak on the same Slurm user neither sweeps nor adopts this one's jobs."""
    return base.name


@dataclass
class SoakStage:
    airflow: Airflow
    deployment: AirflowDeployment
    standin: Any
    records: KubeRecords
    kube_log: Path
    gates: dict[str, Gate]
    slurm: SlurmCluster | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: what slurmctld reports of every job the soak submitted (with Slurm)
    slurm_records: SlurmRecords | None = None
    #: the relay between the gated slurmrestd connection and its gate (with Slurm), which loses
    #: the answer to a run's submission when told to
    rest_relay: LosingRelay | None = None


@contextlib.contextmanager
def soak_stage(*, slurm: bool, parallelism: int = 32) -> Iterator[SoakStage]:
    from sandbox.kube.launcher import start_kube_standin

    base = Path(tempfile.mkdtemp(prefix="pathways-soak-"))
    keep = os.environ.get("PATHWAYS_KEEP_DEPLOYMENT_LOGS") == "1"
    cleanups: list[Any] = []
    try:
        standin = start_kube_standin(base / "kube")
        cleanups.append(standin.stop)
        records = KubeRecords(standin)
        cleanups.append(records.close)
        gates = {"kube": Gate("127.0.0.1", int(standin.url.rsplit(":", 1)[1]), "kube")}
        cleanups.append(gates["kube"].close)
        gated = _gated_kubeconfig(standin, gates["kube"], base / "kube" / "kubeconfig-gated")
        connections = {
            "gke_sandbox": standin.airflow_connection(),
            "gke_gated": json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(gated)}}),
        }
        dag_files = [GKE_DAGS]
        cluster: SlurmCluster | None = None
        slurm_records: SlurmRecords | None = None
        rest_relay: LosingRelay | None = None
        if slurm:
            from sandbox.slurm.cluster import start_slurm_sandbox

            settings = start_slurm_sandbox()
            cluster = SlurmCluster(settings)
            cleanups.append(cluster.cleanup)
            slurm_records = SlurmRecords(cluster.run, cluster.tag, deployment_name(base))
            cleanups.append(slurm_records.close)
            rest_port = int(settings["SLURM_SANDBOX_REST_URL"].rsplit(":", 1)[1])
            gates["rest"] = Gate("127.0.0.1", rest_port, "slurmrestd")
            gates["ssh"] = Gate(
                settings["SLURM_SANDBOX_SSH_HOST"], int(settings["SLURM_SANDBOX_SSH_PORT"]), "sshd"
            )
            cleanups.extend((gates["rest"].close, gates["ssh"].close))
            connections.update(_slurm_connections(settings, gates))
            rest_relay = LosingRelay("127.0.0.1", gates["rest"].port).__enter__()
            cleanups.append(lambda: rest_relay.__exit__(None, None, None))
            relayed = json.loads(connections["slurm_rest_gated"])
            connections["slurm_rest_gated"] = json.dumps(dict(relayed, port=rest_relay.port))
            if not SLURM_DAGS.exists():
                raise RuntimeError("the soak has no Slurm DAGs yet (tests/soak/dags/soak_slurm.py)")
            dag_files.append(SLURM_DAGS)
        # named, as deployments sharing a Slurm user should be: the sweeps leave other soaks' jobs alone
        deployment = AirflowDeployment(
            base / "airflow",
            dag_files,
            connections=connections,
            parallelism=parallelism,
            env={"AIRFLOW__PATHWAYS__DEPLOYMENT_NAME": deployment_name(base)},
        )
        cleanups.append(deployment.stop)
        deployment.start()
        airflow = Airflow(deployment)
        cleanups.append(airflow.close)
        yield SoakStage(
            airflow,
            deployment,
            standin,
            records,
            base / "kube" / KUBE_LOG_FILE,
            gates,
            cluster,
            slurm_records=slurm_records,
            rest_relay=rest_relay,
        )
    finally:
        errors = []
        for cleanup in reversed(cleanups):
            try:
                cleanup()
            except Exception as err:
                errors.append(repr(err))
        if keep:
            print(f"soak files kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
        if errors:
            raise RuntimeError("stopping the soak's deployment: " + "; ".join(errors))
