"""PathwaysFailureNotifier in real DAG runs against the Kubernetes stand-in: each failure told by
its kind, what the next try does, and the TPU-hours so far."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pathways.failures import PathwaysPreempted, PathwaysQueueTimeout
from airflow_provider_pathways.notifications.failure import failure_kind
from tests.dags.gke_notified import NOTICES_ENV
from tests.operators.test_pathways_job import running_jobset
from tests.support.airflow_runs import load_dag, run_dag
from tests.support.airflow_versions import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_3_PLUS
from tests.support.kube_jobs import act_when

DAGS = "gke_notified.py"
#: dag.test() of Airflow 3.0 to 3.2 runs the failure callbacks without the try's exception in their
#: context (a worker's task runner puts it there on every version)
CALLBACKS_SEE_THE_EXCEPTION = not (AIRFLOW_V_3_0_PLUS and not AIRFLOW_V_3_3_PLUS)
pytestmark = [
    pytest.mark.usefixtures("kube"),
    pytest.mark.skipif(
        not CALLBACKS_SEE_THE_EXCEPTION, reason="dag.test() of Airflow 3.0-3.2 gives callbacks no exception"
    ),
]


def notices(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_failing_program_is_told_as_the_users_and_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NOTICES_ENV, str(tmp_path / "notices.jsonl"))
    outcome = run_dag(load_dag(DAGS, "gke_notified_program_fails"))["train"]
    assert outcome.state == "failed" and outcome.try_number == 1
    [notice] = notices(tmp_path / "notices.jsonl")
    assert notice["kind"] == "user program"
    assert notice["next_try"] == "No further try: a failure of this kind (user program) is not retried"
    assert "exited with code 3" in notice["error"]
    assert notice["tpu_hours"] is not None and notice["tpu_hours"] >= 0  # the GKE try's usage
    assert notice["text"].startswith("gke_notified_program_fails.train (run ")


def test_a_preemption_is_told_with_the_retry_that_submits_a_fresh_job(
    kube: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NOTICES_ENV, str(tmp_path / "notices.jsonl"))
    namespace = "notified-preempted"
    watcher = act_when(
        lambda: running_jobset(kube, namespace, 2),
        lambda name: kube.action(namespace, name, "preempt-slice", slice=1),
    )
    outcome = run_dag(load_dag(DAGS, "gke_notified_preempted"))["train"]
    watcher.join(5)
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "success" and outcome.try_number == 2
    [notice] = notices(tmp_path / "notices.jsonl")  # the retry's; no failure after it
    assert (notice["kind"], notice["try_number"]) == ("preemption", 1)
    assert notice["next_try"] == "Try 2 submits a fresh job (the preempted one is deleted)"
    assert notice["tpu_hours_lost"] == notice["tpu_hours"]  # all of try 1 was lost


def test_each_failure_has_its_kind() -> None:
    """The kinds the notice names, most specific first; anything else is "other"."""
    assert failure_kind(PathwaysPreempted("slice 1 preempted"))[0] == "preemption"
    assert failure_kind(PathwaysQueueTimeout("queued 45s"))[0] == "queue timeout"
    assert failure_kind(ValueError("bad"))[0] == "other"
    assert failure_kind(None)[0] == "other"
