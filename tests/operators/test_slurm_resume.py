"""A deferred Slurm job operator resumes with its own job's id, also as one of several mapped tasks;
a workload's success is remembered for a cleared try, a service's readiness is not.

No cluster is involved: a job Slurm no longer knows is judged from the trigger's event alone.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_pathways.failures import PathwaysOutcomeUnknown
from airflow_provider_pathways.operators.slurm import PathwaysSlurmServiceOperator, SlurmJobOperator
from tests.support.airflow_versions import AIRFLOW_V_3_3_PLUS

LOST = "Slurm forgot the job and accounting has no record of it"


class MappedTaskInstance:
    """Map index 1 of a task whose three indexes each pushed their job id (1001, 1002, 1003)."""

    dag_id, task_id, run_id, map_index, try_number = "train_mapped", "train", "manual__1", 1, 1

    def xcom_pull(self, *args: Any, **kwargs: Any) -> Any:
        return [1001, 1002, 1003]  # what a pull without map_indexes returns for a mapped task

    def xcom_push(self, key: str, value: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("event", "kwargs"),
    [
        ({"status": "done", "job": None, "message": LOST, "job_id": 1002}, {"job_id": 1002}),
        ({"status": "done", "job": None, "message": LOST, "job_id": 1002}, {}),
    ],
    ids=["operator-kwargs", "event-only"],
)
def test_a_mapped_task_resumes_with_its_own_job(event: dict[str, Any], kwargs: dict[str, Any]) -> None:
    operator = SlurmJobOperator(task_id="train", script="#!/bin/bash\ntrue\n", deferrable=True)
    # a job Slurm forgot has an unknown outcome: never resubmitted blindly
    with pytest.raises(PathwaysOutcomeUnknown, match=LOST) as failure:
        operator.execute_complete({"ti": MappedTaskInstance()}, event, **kwargs)  # type: ignore[arg-type]
    assert failure.value.job == "1002"


#: ``task_state_store`` (and the retention the operators keep their keys with) arrived in Airflow 3.3
STATE_STORE = pytest.mark.skipif(not AIRFLOW_V_3_3_PLUS, reason="task_state_store arrived in Airflow 3.3")


class Store:
    """A ``task_state_store`` in memory."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        self.values[key] = value

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


class PushingTaskInstance(MappedTaskInstance):
    map_index, try_number, max_tries = -1, 1, 0

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


@STATE_STORE
def test_a_workload_remembers_its_success_and_a_cleared_try_reports_it_again_from_that_alone() -> None:
    """The try that reports a success keeps the job as it saw it with the kept job id; a new try
    (the task cleared once slurmctld forgot the job) reports it from that, with the same XComs,
    without reading the cluster: this operator has no connection."""
    from airflow_provider_pathways.reattach_rules import KeptJob, Verdict
    from airflow_provider_pathways.slurm.job import SlurmJob

    started = datetime(2026, 3, 1, 12, 0, 5, tzinfo=timezone.utc)
    job = SlurmJob(
        job_id=77,
        name="train",
        state="COMPLETED",
        exit_code=0,
        exit_signal=0,
        submit_time=started - timedelta(seconds=5),
        start_time=started,
        end_time=started + timedelta(seconds=30),
        std_out=None,
    )
    store, first = Store(), PushingTaskInstance()
    store.set("slurm_job_id", KeptJob(77, max_tries=0).to_stored())
    operator = SlurmJobOperator(task_id="train", script="#!/bin/bash\ntrue\n", slurm_conn_id="nowhere")
    result = operator.finish_job({"ti": first, "task_state_store": store}, 77, (job, "", None))  # type: ignore[arg-type]
    kept = KeptJob.from_stored(store.get("slurm_job_id"))
    assert (kept.job, kept.reported, kept.max_tries) == (77, Verdict.SUCCEEDED, 0)
    assert SlurmJob.from_dict(kept.outcome) == job  # times and all

    again = PushingTaskInstance()
    again.try_number, again.max_tries = 2, 1  # cleared
    cleared = SlurmJobOperator(task_id="train", script="#!/bin/bash\ntrue\n", slurm_conn_id="nowhere")
    assert cleared.run_job({"ti": again, "task_state_store": store}) == result  # type: ignore[arg-type]
    expected = {"job_id": 77, "job": job.to_dict()}
    assert {k: again.pushed[k] for k in expected} == {k: first.pushed[k] for k in expected} == expected
    # each try reports its TPU-hours (unknown here: no worker array), the job counted once
    assert [t["job"] for t in again.pushed["tpu_hours"]["tries"]] == ["77"]


@STATE_STORE
def test_a_ready_service_remembers_no_success_and_that_it_serves_on() -> None:
    """A service's success is its readiness, not its end: a cleared service task judges the job
    again (a live one is followed, as the clear table of docs/outcomes.rst says of a job a ready
    try left running; a gone one replaced), never reports a stale proxy."""
    from airflow_provider_pathways.reattach_rules import KeptJob
    from airflow_provider_pathways.slurm.service import Readiness, ServiceCheck

    store, ti = Store(), PushingTaskInstance()
    store.set("slurm_job_id", KeptJob(78, max_tries=0).to_stored())
    service = PathwaysSlurmServiceOperator(
        task_id="service",
        script="#!/bin/bash\n",
        slice_shape="2x4",
        min_slices=1,
        max_slices=1,
        gcs_bucket="b",
    )
    ready = ServiceCheck(None, Readiness(True, "ready", proxy_address="grpc://10.0.0.1:29000"))
    service.finish_job({"ti": ti, "task_state_store": store}, 78, ready)  # type: ignore[arg-type]
    assert store.get("slurm_job_id") == KeptJob(78, max_tries=0, left_running=True).to_stored()
