"""A deferred Slurm job operator resumes with its own job's id, also as one of several mapped tasks.

No cluster is involved: a job Slurm no longer knows is judged from the trigger's event alone.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_pathways.failures import PathwaysOutcomeUnknown
from airflow_provider_pathways.operators.slurm import SlurmJobOperator

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
