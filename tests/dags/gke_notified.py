"""DAGs whose failures and retries are told by PathwaysFailureNotifier (tests/notifications)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pendulum
from airflow.providers.common.compat.sdk import DAG

from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.notifications.failure import FailureNotice, PathwaysFailureNotifier
from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator
from tests.dags.fast_retry import fast_retry

START = pendulum.datetime(2026, 1, 1, tz="UTC")
CONN = "gke_sandbox"
KNOB = "sandbox.pathways.dev/"
#: where the notices go, one JSON line each (set by the test)
NOTICES_ENV = "PATHWAYS_TEST_NOTICES"


def keep(notice: FailureNotice) -> None:
    with Path(os.environ[NOTICES_ENV]).open("a") as out:
        out.write(json.dumps(notice.to_dict()) + "\n")


def spec() -> PathwaysJobSpec:
    return PathwaysJobSpec.from_tpu_type(
        "v5litepod-16",
        num_slices=2,
        pathways_dir="gs://pathways-test-bucket/scratch",
        template={"spec": {"containers": [{"name": "main", "image": "python:3.12", "command": ["train"]}]}},
    )


NOTIFIER = PathwaysFailureNotifier(send=keep)

with DAG("gke_notified_program_fails", schedule=None, start_date=START) as program_fails:
    PathwaysJobOperator(
        task_id="train",
        job=spec(),
        namespace="notified-fails",
        kubernetes_conn_id=CONN,
        deferrable=False,
        poll_interval=0.1,
        retries=2,
        **fast_retry(),
        annotations={KNOB + "program-exit-code": "3"},
        on_failure_callback=NOTIFIER,
        on_retry_callback=NOTIFIER,
    )

with DAG("gke_notified_preempted", schedule=None, start_date=START) as preempted:
    PathwaysJobOperator(
        task_id="train",
        job=spec(),
        namespace="notified-preempted",
        kubernetes_conn_id=CONN,
        deferrable=False,
        poll_interval=0.1,
        retries=1,
        **fast_retry(),
        annotations={KNOB + "program-seconds": "1.5"},
        on_failure_callback=NOTIFIER,
        on_retry_callback=NOTIFIER,
    )
