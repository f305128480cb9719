"""The example DAGs run end to end against the sandbox, as `make demo` shows them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tests.conftest import EXAMPLE_BUCKET
from tests.support.airflow_runs import load_dag, run_dag
from tests.support.kube_jobs import wait_for

pytestmark = pytest.mark.usefixtures("kube", "gcs")


def jobs_in(kube: Any, namespace: str) -> list[str]:
    listing = kube.request(
        "GET", f"/apis/pathways-job.pathways.domain/v1/namespaces/{namespace}/pathwaysjobs"
    )
    return [item["metadata"]["name"] for item in listing["items"]]


def seed_cache(gcs: Any, scratch: str) -> tuple[str, str]:
    """A stale and a fresh compilation-cache entry under ``scratch`` (a path in the example bucket)."""
    from sandbox.gcs.launcher import SeedObject

    now = datetime.now(timezone.utc)
    stale = f"{scratch}/compilation_cache/default/old.binarypb"
    fresh = f"{scratch}/compilation_cache/default/new.binarypb"
    gcs.seed_objects(
        EXAMPLE_BUCKET,
        [
            SeedObject(stale, 1000, now - timedelta(days=30)),
            SeedObject(fresh, 1000, now - timedelta(hours=2)),
        ],
    )
    return stale, fresh


def test_training_example_trains_and_cleans_up(kube: Any, gcs: Any) -> None:
    stale, fresh = seed_cache(gcs, "pathways-scratch/train")
    outcomes = run_dag(load_dag("example_pathways_training.py", "example_pathways_training"))
    assert outcomes["train"].state == "success"
    assert outcomes["train"].xcom["status"]["phase"] == "succeeded"
    assert jobs_in(kube, "default") == []
    assert outcomes["cleanup_compilation_cache"].state == "success"
    left = gcs.list_objects(EXAMPLE_BUCKET, "pathways-scratch/train/")
    assert stale not in left and fresh in left  # only the entry unused for a week went


def test_batch_inference_example_hands_the_proxy_address_downstream_and_tears_down(kube: Any) -> None:
    outcomes = run_dag(load_dag("example_pathways_batch_inference.py", "example_pathways_batch_inference"))
    assert {k: v.state for k, v in outcomes.items()} == {
        "start_pathways": "success",
        "wait_for_slices": "success",
        "run_inference[0]": "success",
        "run_inference[1]": "success",
        "delete_pathways": "success",
        "cleanup_compilation_cache": "success",
    }
    name = outcomes["start_pathways"].xcom["name"]
    address = f"grpc://{name}-pathways-head-0-0.{name}:29000"
    assert outcomes["wait_for_slices"].xcom["return_value"] == address
    assert outcomes["run_inference[1]"].xcom["return_value"] == {"shard": 1, "backend": address}
    assert jobs_in(kube, "default") == []


@pytest.mark.end_to_end
def test_sweep_example_ends_the_job_of_a_deleted_dag_run(kube: Any) -> None:
    """A job handed on by a task that succeeded once it was ready, whose DAG run a user then deleted
    (the DAG's later run stays): nothing else would ever end it. The maintenance example, given its
    namespace, deletes it and keeps the later run's."""
    from tests.dags.gke_sweep import NAMESPACE
    from tests.operators.test_sweep import delete_run, jobs

    deleted = run_dag(load_dag("gke_sweep.py", "gke_sweep_run_deleted"))["served"]
    later = run_dag(load_dag("gke_sweep.py", "gke_sweep_run_deleted"))["served"]
    delete_run("gke_sweep_run_deleted", deleted.run_id)
    before = jobs(kube)
    outcome = run_dag(
        load_dag("example_pathways_sweep.py", "example_pathways_sweep"), {"namespaces": [NAMESPACE]}
    )
    assert outcome["sweep"].state == "success"
    swept = {row["run_id"]: row for row in outcome["sweep"].xcom["return_value"]}
    assert (swept[deleted.run_id]["outcome"], swept[later.run_id]["outcome"]) == ("ended", "kept")
    gone = swept[deleted.run_id]["job"].rsplit("/", 1)[1]
    wait_for(lambda: set(jobs(kube)) == set(before) - {gone}, timeout=30)
    kept = swept[later.run_id]["job"].rsplit("/", 1)[1]
    kube.request(
        "DELETE", f"/apis/pathways-job.pathways.domain/v1/namespaces/{NAMESPACE}/pathwaysjobs/{kept}"
    )
