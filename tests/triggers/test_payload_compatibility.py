"""A triggerer and a worker on different provider versions understand each other.

``tests/data/payloads/<version>/`` holds what a released version sends: its triggers' serialized
keyword arguments (what the triggerer rebuilds a trigger from) and its triggers' events (what the
resumed task reads). Each must still load into this version and mean the same thing; and what a
newer version may add (keys this version does not know) must be ignored, not refused. A release
adds its own directory, written from its triggers' ``serialize()`` and events; a released one is
never edited.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pathways.failures import (
    PathwaysInfrastructureFailure,
    PathwaysOutcomeUnknown,
    PathwaysUserProgramFailed,
)
from airflow_provider_pathways.gke.status import PathwaysJobStatus
from airflow_provider_pathways.operators.slurm import PathwaysSlurmServiceOperator, SlurmJobOperator
from airflow_provider_pathways.sensors.pathways_job import PathwaysJobReadySensor
from airflow_provider_pathways.sensors.slurm import PathwaysClusterEnvSensor
from airflow_provider_pathways.slurm.job import SlurmJob
from airflow_provider_pathways.slurm.service import Readiness

PAYLOADS = Path(__file__).resolve().parent.parent / "data" / "payloads"
VERSIONS = sorted(path.name for path in PAYLOADS.iterdir())
TRIGGERS = sorted(PAYLOADS.glob("*/triggers/*.json"))
EVENTS = sorted(PAYLOADS.glob("*/events/*/*.json"))
#: How the task reads the objects inside each trigger's events, by event key.
EVENT_OBJECTS: dict[str, dict[str, Any]] = {
    "pathways_job": {"job": PathwaysJobStatus},
    "slurm_job": {"job": SlurmJob},
    "pathways_cluster_env": {"job": SlurmJob, "readiness": Readiness},
}
#: What a newer version might add, at any level of a payload.
NEWER = {"added_by_a_newer_version": {"any": ["value"]}}


def name(path: Path) -> str:
    return str(path.relative_to(PAYLOADS))


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def rebuild(classpath: str, kwargs: dict[str, Any]) -> Any:
    """The trigger as the triggerer makes it from its serialized form."""
    module, _, cls = classpath.rpartition(".")
    return getattr(importlib.import_module(module), cls)(**kwargs)


def event_objects(path: Path) -> dict[str, Any]:
    return EVENT_OBJECTS[path.parent.name]


def test_every_released_version_has_frozen_payloads() -> None:
    assert VERSIONS, "no frozen payloads"
    for version in VERSIONS:
        assert list((PAYLOADS / version / "triggers").glob("*.json")), version
        assert list((PAYLOADS / version / "events").glob("*/*.json")), version
    assert {path.parent.name for path in EVENTS} == set(EVENT_OBJECTS)


@pytest.mark.parametrize("path", TRIGGERS, ids=name)
def test_serialized_trigger_rebuilds_with_every_argument_as_written(path: Path) -> None:
    frozen = load(path)
    trigger = rebuild(frozen["classpath"], frozen["kwargs"])
    assert trigger.serialize() == (frozen["classpath"], frozen["kwargs"])


@pytest.mark.parametrize("path", TRIGGERS, ids=name)
def test_trigger_arguments_a_newer_version_added_are_ignored(path: Path) -> None:
    frozen = load(path)
    trigger = rebuild(frozen["classpath"], {**frozen["kwargs"], **NEWER})
    assert trigger.serialize() == (frozen["classpath"], frozen["kwargs"])


@pytest.mark.parametrize("path", EVENTS, ids=name)
def test_event_objects_read_back_as_written(path: Path) -> None:
    event = load(path)
    assert isinstance(event["status"], str)
    for key, cls in event_objects(path).items():
        if event.get(key) is not None:
            assert cls.from_dict(event[key]).to_dict() == event[key], key


@pytest.mark.parametrize("path", EVENTS, ids=name)
def test_event_keys_a_newer_version_added_are_ignored(path: Path) -> None:
    event = load(path)
    for key, cls in event_objects(path).items():
        if event.get(key) is not None:
            assert cls.from_dict({**event[key], **NEWER}) == cls.from_dict(event[key]), key


def test_a_failure_class_a_newer_version_added_reads_as_unknown() -> None:
    job = load(PAYLOADS / "0.1.0" / "events" / "pathways_job" / "done_preempted.json")["job"]
    status = PathwaysJobStatus.from_dict({**job, "failure": "a_class_added_later"})
    assert status.failure is not None and status.failure.value == "unknown"
    assert status.terminal


def with_newer_keys(event: dict[str, Any]) -> dict[str, Any]:
    """The event as a newer version might send it: extra keys at the top and in every object."""
    return {
        **{key: {**value, **NEWER} if isinstance(value, dict) else value for key, value in event.items()},
        **NEWER,
    }


class _TaskInstance:
    """What a resumed task's context holds as ``ti``: its identity and XCom."""

    dag_id, task_id, run_id, map_index, try_number = "compat", "train", "manual__1", -1, 1

    def xcom_push(self, key: str, value: Any) -> None:
        pass

    def xcom_pull(self, *args: Any, **kwargs: Any) -> Any:
        return None


@pytest.mark.parametrize("newer", [False, True], ids=["as-frozen", "with-newer-keys"])
def test_the_resumed_tasks_read_the_events_the_same_way(newer: bool) -> None:
    """The tasks that wait in the triggerer draw the same conclusions from each version's events."""

    def event(path: str) -> dict[str, Any]:
        frozen = load(PAYLOADS / "0.1.0" / "events" / path)
        return with_newer_keys(frozen) if newer else frozen

    extra = NEWER if newer else {}
    sensor = PathwaysJobReadySensor(task_id="ready", job_name="serve-5e6f7a8b", min_slices=2)
    address = sensor.execute_complete({}, event("pathways_job/done_ready.json"), **extra)  # type: ignore[arg-type]
    assert address == "grpc://serve-5e6f7a8b-pathways-head-0-0.serve-5e6f7a8b:29000"

    # a job the cluster forgot: its outcome is unknown (since 0.1.0, which read it as an
    # infrastructure failure, the rule for a forgotten workload changed; what the event says did not)
    workload = SlurmJobOperator(task_id="train", script="#!/bin/bash\ntrue\n", deferrable=True)
    with pytest.raises(PathwaysOutcomeUnknown, match="no longer known") as unknown:
        workload.execute_complete({"ti": _TaskInstance()}, event("slurm_job/done_lost.json"), **extra)  # type: ignore[arg-type]
    assert unknown.value.job == "4242"
    resubmitting = SlurmJobOperator(
        task_id="train", script="#!/bin/bash\ntrue\n", deferrable=True, resubmit_if_outcome_unknown=True
    )
    with pytest.raises(PathwaysInfrastructureFailure, match="no longer known") as lost:
        resubmitting.execute_complete({"ti": _TaskInstance()}, event("slurm_job/done_lost.json"), **extra)  # type: ignore[arg-type]
    assert lost.value.job == "4242"

    service_args = {"slice_shape": "2x4", "min_slices": 2, "max_slices": 2, "gcs_bucket": "b"}
    service = PathwaysSlurmServiceOperator(task_id="service", script_path="/s.sh", **service_args)
    with pytest.raises(PathwaysUserProgramFailed, match="ended before it was ready: FAILED") as ended:
        ended_event = event("pathways_cluster_env/service_ended.json")
        service.execute_complete({"ti": _TaskInstance()}, ended_event, **extra)  # type: ignore[arg-type]
    assert (ended.value.job, ended.value.exit_code) == ("4240", 7)

    env_sensor = PathwaysClusterEnvSensor(task_id="env", service_job_id=4240)
    with pytest.raises(PathwaysUserProgramFailed, match="exit code 7"):
        env_sensor.execute_complete({}, event("pathways_cluster_env/service_ended.json"), **extra)  # type: ignore[arg-type]


def test_the_stuck_job_bounds_reach_the_triggerer_only_when_set() -> None:
    """A trigger with the default bounds serializes as 0.1.0 did (a triggerer of 0.1.0 runs it); set
    bounds survive the trip to the triggerer."""
    from airflow_provider_pathways.triggers.slurm import SlurmJobTrigger

    _, defaults = SlurmJobTrigger(job_id=7, slurm_conn_id="slurm").serialize()
    assert not {"hold_timeout", "max_requeues"} & set(defaults)
    classpath, kwargs = SlurmJobTrigger(
        job_id=7, slurm_conn_id="slurm", hold_timeout=0, max_requeues=None
    ).serialize()
    again = rebuild(classpath, json.loads(json.dumps(kwargs)))
    assert (again.stuck_watch.hold_timeout, again.stuck_watch.max_requeues) == (0, None)
