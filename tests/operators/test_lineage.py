"""OpenLineage events of the operators, as the OpenLineage provider's file transport writes them:
the ``pathways`` run facet and the job's GCS locations as output datasets (a DAG run in a separate
process, so that the provider's listener starts with the transport configured)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pathways.lineage import FACET_NAME, FACET_SCHEMA_URL, gcs_location

pytest.importorskip("airflow.providers.openlineage", reason="apache-airflow-providers-openlineage")
ROOT = Path(__file__).resolve().parents[2]

# the task states go to a file: the OpenLineage listener's threads log to stdout meanwhile
RUN_DAG = """
import json, pathlib, sys
from tests.support.airflow_runs import load_dag, run_dag
outcome = run_dag(load_dag(sys.argv[1], sys.argv[2]))
pathlib.Path(sys.argv[3]).write_text(json.dumps({task: o.state for task, o in outcome.items()}))
"""


def lineage_events(tmp_path: Path, dag_file: str, dag_id: str) -> list[dict[str, Any]]:
    """Run ``dag_id`` with OpenLineage's file transport; the events it wrote."""
    events, states = tmp_path / "openlineage.jsonl", tmp_path / "states.json"
    env = {
        **os.environ,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "pathways-tests",
    }
    run = subprocess.run(
        [sys.executable, "-c", RUN_DAG, dag_file, dag_id, str(states)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    ran = json.loads(states.read_text()) if states.exists() else None
    assert ran == {"train": "success"}, run.stdout[-3000:] + run.stderr[-3000:]
    return [json.loads(line) for line in events.read_text().splitlines() if line.strip()]


@pytest.mark.end_to_end  # a DAG run in an Airflow process of its own: `make test` runs it
@pytest.mark.versioned  # and on every Airflow version of the compatibility tier
@pytest.mark.usefixtures("kube")
def test_a_gke_job_reports_its_tpus_queue_and_gcs_locations(tmp_path: Path) -> None:
    events = lineage_events(tmp_path, "gke_scenarios.py", "gke_lineage")
    (complete,) = [
        e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == "gke_lineage.train"
    ]
    facet = complete["run"]["facets"][FACET_NAME]
    assert facet["_schemaURL"] == FACET_SCHEMA_URL
    assert {key: facet[key] for key in ("backend", "tpuType", "topology", "slices", "queue")} == {
        "backend": "gke",
        "tpuType": "v5litepod-16",
        "topology": "4x4",
        "slices": 2,
        "queue": "multislice-queue",  # the rendered template
    }
    assert facet["preemptions"] == 0
    outputs = {(o["namespace"], o["name"]) for o in complete["outputs"]}
    assert outputs == {
        ("gs://pathways-test-bucket", "scratch"),  # the spec's pathwaysDir
        ("gs://pathways-test-bucket", "gke_lineage/checkpoints"),  # checkpoint_dir, rendered
    }


def test_a_slurm_service_reports_its_bucket_and_shape() -> None:
    """The Slurm operators' lineage needs no cluster: what the try knew, as the facet's JSON."""
    from openlineage.client.serde import Serde

    from airflow_provider_pathways.operators.slurm import PathwaysSlurmServiceOperator, SlurmJobOperator

    service = PathwaysSlurmServiceOperator(
        task_id="service",
        script_path="/opt/pathways/start_pathways.sh",
        slice_shape="2x4",
        min_slices=1,
        max_slices=2,
        gcs_bucket="my-bucket",
        partition="tpu",
    )
    lineage = service.get_openlineage_facets_on_complete(None)
    facet = json.loads(Serde.to_json(lineage.run_facets[FACET_NAME]))
    assert {k: v for k, v in facet.items() if not k.startswith("_")} == {
        "backend": "slurm",
        "topology": "2x4",
        "queue": "tpu",
    }  # unknown values (slices before the service was ready, preemptions) are left out
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("gs://my-bucket", "/")]
    job = SlurmJobOperator(task_id="train", script="#!/bin/bash\n", checkpoint_dir="gs://b/ckpt/")
    assert [(d.namespace, d.name) for d in job.get_openlineage_facets_on_failure(None).outputs] == [
        ("gs://b", "ckpt")
    ]


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("gs://bucket/a/b/", ("gs://bucket", "a/b")),
        ("gs://bucket", ("gs://bucket", "/")),
        ("/local/path", None),
        ("gs:///nothing", None),
    ],
)
def test_gcs_locations_are_named_as_openlineage_names_them(url: str, named: tuple[str, str] | None) -> None:
    assert gcs_location(url) == named
