"""A StatsD server's socket for the tests: the datagrams Airflow's ``Stats`` sends with
``statsd_influxdb_enabled`` (``<prefix>.<name>,<tag>=<value>,...:<value>|<type>``), as lines."""

from __future__ import annotations

import importlib
import re
import socket
import threading
import time

from airflow_provider_pathways import metrics

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

    def metrics(self, name: str, **where: str) -> list[tuple[dict[str, str], float, str]]:
        """(tags, value, type) of each datagram of the provider's metric ``name`` whose tags hold
        ``where``."""
        found: list[tuple[dict[str, str], float, str]] = []
        for line in list(self.lines):
            match = DATAGRAM.match(line)
            if match and match["name"] == f"{PREFIX}.{name}":
                tags = dict(pair.split("=", 1) for pair in match["tags"].split(",")[1:])
                if where.items() <= tags.items():
                    found.append((tags, float(match["value"]), match["type"]))
        return found

    def wait_for(
        self, name: str, count: int, timeout: float = 10.0, **where: str
    ) -> list[tuple[dict[str, str], float, str]]:
        """The datagrams of :meth:`metrics` once ``count`` arrived (at most ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.metrics(name, **where)
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError(f"{count} x {name} {where} expected, got {self.metrics(name, **where)}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()

    def settings(self) -> dict[str, str]:
        """Airflow's ``[metrics]`` settings (environment variables) that send here, with tags."""
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": PREFIX,
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
        }


def reset_airflow_stats() -> None:
    """Make Airflow's Stats read ``[metrics]`` again: each Airflow builds its client once per process
    and chooses how at a different time (3.3: ``initialize()`` of the SDK's stats module; 3.2: the
    Stats class's ``initialize``; 2.11-3.1: when ``airflow.stats`` is first imported)."""
    stats_class = metrics._stats()
    try:  # Airflow 3.3
        from airflow.sdk.configuration import conf
        from airflow.sdk.observability import stats
        from airflow.sdk.observability.metrics import stats_utils

        stats.initialize(  # type: ignore[attr-defined]
            factory=stats_utils.get_stats_factory(),  # type: ignore[call-arg]
            export_legacy_names=conf.getboolean("metrics", "legacy_names_on"),
        )
        return
    except (ImportError, AttributeError):
        pass
    chooser = type(stats_class)
    if "initialize" in vars(chooser):  # Airflow 3.2: the SDK's or the core's stats_utils
        module = "airflow.sdk" if stats_class.__module__.startswith("airflow.sdk") else "airflow"
        stats_utils = importlib.import_module(f"{module}.observability.metrics.stats_utils")
        stats_class.initialize(factory=stats_utils.get_stats_factory(stats_class))
        return
    # Airflow 2.11-3.1: the metaclass chose its factory from [metrics] when it built the class
    if "factory" in vars(chooser):
        delattr(chooser, "factory")
    chooser.__init__(stats_class)  # type: ignore[misc]
    stats_class.instance = None
