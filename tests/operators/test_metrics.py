"""The provider's metrics as a StatsD server receives them, and each try's TPU-hours: a GKE job
preempted and retried under ``dag.test()`` against the Kubernetes stand-in, with Airflow's
``[metrics]`` settings (StatsD, InfluxDB-style tags) given through the environment and a UDP socket
on 127.0.0.1 receiving the datagrams."""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_pathways import metrics
from tests.airflow_runs import load_dag, run_dag
from tests.airflow_versions import RETRY_AFTER_DEFERRAL, TASK_LOG_IN_OUTPUT
from tests.kube_jobs import act_when, stand_in_objects
from tests.operators.test_pathways_job import running_jobset

pytestmark = pytest.mark.usefixtures("kube")
PREFIX = "pathways_test"
# "<prefix>.<name>,<tag>=<value>,...:<value>|<type>", as statsd_influxdb_enabled sends them
DATAGRAM = re.compile(r"^(?P<name>[^,:]+)(?P<tags>(?:,[^,=:]+=[^,:]*)*):(?P<value>[^|]+)\|(?P<type>\w+)$")


class StatsdListener:
    """A StatsD server's socket: every datagram that arrives, as lines."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            self.lines.extend(data.decode().splitlines())

    def metrics(self, name: str) -> list[tuple[dict[str, str], float, str]]:
        """(tags, value, type) of each datagram of the provider's metric ``name``."""
        found = []
        for line in list(self.lines):
            match = DATAGRAM.match(line)
            if match and match["name"] == f"{PREFIX}.{name}":
                tags = dict(pair.split("=", 1) for pair in match["tags"].split(",")[1:])
                found.append((tags, float(match["value"]), match["type"]))
        return found

    def wait_for(
        self, name: str, count: int, timeout: float = 10.0
    ) -> list[tuple[dict[str, str], float, str]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.metrics(name)
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError(f"{count} x {name} expected, got {self.metrics(name)}; all: {self.lines}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def _reset_airflow_stats() -> None:
    """Make Airflow's Stats read ``[metrics]`` again (it builds its client once per process)."""
    try:
        from airflow.sdk.configuration import conf
        from airflow.sdk.observability import stats
        from airflow.sdk.observability.metrics import stats_utils
    except ImportError:  # Airflow before 3.3: the Stats class keeps its client as ``instance``
        from airflow.stats import Stats

        Stats.instance = None
        return
    stats.initialize(
        factory=stats_utils.get_stats_factory(),
        export_legacy_names=conf.getboolean("metrics", "legacy_names_on"),
    )


@pytest.fixture
def statsd() -> Iterator[StatsdListener]:
    """Airflow's metrics sent over StatsD (with tags) to a listener for the test's length."""
    listener = StatsdListener()
    settings = {
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(listener.port),
        "AIRFLOW__METRICS__STATSD_PREFIX": PREFIX,
        "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
    }
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    _reset_airflow_stats()
    try:
        yield listener
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _reset_airflow_stats()
        listener.close()


@RETRY_AFTER_DEFERRAL
def test_a_preempted_and_retried_job_sends_its_metrics_and_reports_tpu_hours(
    kube: Any, statsd: StatsdListener, capfd: pytest.CaptureFixture[str]
) -> None:
    namespace = "metrics-preempted"
    watcher = act_when(
        lambda: running_jobset(kube, namespace, 2),
        lambda name: kube.action(namespace, name, "preempt-slice", slice=1),
    )
    outcome = run_dag(load_dag("gke_scenarios.py", "gke_metrics_preempted"))["train"]
    watcher.join(5)
    logs = capfd.readouterr().out
    assert watcher.failures == []  # type: ignore[attr-defined]
    assert outcome.state == "success" and outcome.try_number == 2

    tags = {
        "dag_id": "gke_metrics_preempted",
        "task_id": "train",
        "backend": "gke",
        "tpu_type": "v5litepod-16",
    }
    # each try's job ended (preempted, then succeeded); the second was seen running and ready (the
    # first may have been preempted before its trigger's first look)
    ended = statsd.wait_for(metrics.TIME_TO_FINISH.name, 2)
    for metric in (metrics.QUEUE_WAIT, metrics.TIME_TO_READY):
        assert len(statsd.wait_for(metric.name, 1)) in (1, 2), metric.name
    for metric in (metrics.QUEUE_WAIT, metrics.TIME_TO_READY, metrics.TIME_TO_FINISH):
        sent = statsd.metrics(metric.name)
        assert {(tuple(sorted(t.items())), kind) for t, _, kind in sent} == {
            (tuple(sorted(tags.items())), "ms")
        }
        assert all(0 <= value < 120_000 for _, value, _ in sent), sent
    assert len(ended) == 2
    (preempted,) = statsd.wait_for(metrics.PREEMPTIONS.name, 1)
    assert preempted == (tags, 1.0, "c")
    hours = statsd.wait_for(metrics.TPU_HOURS.name, 2)
    assert [(t, kind) for t, _, kind in hours] == [(tags, "g")] * 2

    usage = outcome.xcom["tpu_hours"]
    first, second = usage["tries"]
    assert (first["try_number"], first["preempted"]) == (1, True)
    assert (second["try_number"], second["preempted"]) == (2, False)
    for one in (first, second):  # v5litepod-16: 16 chips a slice, 2 slices
        assert (one["chips_per_slice"], one["slices"], one["tpu_type"]) == (16, 2, "v5litepod-16")
        assert one["unknown"] is None and one["tpu_hours"] > 0
        assert one["tpu_hours"] == pytest.approx(32 * (one["ended"] - one["started"]) / 3600)
    assert [value for _, value, _ in hours] == pytest.approx(
        [first["tpu_hours"], second["tpu_hours"]], rel=1e-3
    )
    assert usage["total"] == pytest.approx(first["tpu_hours"] + second["tpu_hours"], abs=1e-5)
    assert usage["complete"] is True
    assert usage["lost_to_preemption"] == pytest.approx(first["tpu_hours"], abs=1e-5)
    assert 0 < usage["lost_share"] < 1
    if TASK_LOG_IN_OUTPUT:
        assert "TPU-hours: try 2 " in logs and "lost to preempted tries" in logs
    assert stand_in_objects(kube, "pathwaysjobs", namespace) == []


def test_a_metric_that_cannot_be_sent_is_dropped_and_only_its_tags_go(statsd: StatsdListener) -> None:
    """A metric whose value cannot be sent is dropped, not raised."""
    metrics.emit(metrics.PREEMPTIONS, float("nan"), {"dag_id": "d"})
    metrics.emit(metrics.CACHE_BYTES_FREED, 5, {"dag_id": "d", "task_id": "t", "backend": "dropped"})
    (sent,) = statsd.wait_for(metrics.CACHE_BYTES_FREED.name, 1)
    assert sent == ({"dag_id": "d", "task_id": "t"}, 5.0, "c")  # only the metric's own tags
