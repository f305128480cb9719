"""Scenarios run concurrently against one deployment; each test asserts on what its scenario saw.

A scenario is a function ``fn(stage, **params) -> evidence`` registered under a name with
``@scenario(...)``; a test names it with ``@pytest.mark.scenario(name)`` (``{param}`` fields are
filled from the test's parameters) and gets the evidence from the ``seen`` fixture. Every selected
scenario starts when the deployment is up, each in its own thread, so the suite takes about as long
as its slowest scenario. Scenarios that must act together (one outage for several waits, one
preemption for several jobs) meet in a :class:`Rendezvous`.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from tests.deployment.clusters import KubeCluster, SlurmCluster
from tests.deployment.harness import Airflow, ConditionTimeout
from tests.support.tcp_gate import Gate


@dataclass
class Registered:
    fn: Callable[..., Any]
    params: dict[str, Any]
    drill: str | None


REGISTRY: dict[str, Registered] = {}


def scenario(
    name: str, *, drill: str | Callable[..., str | None] | None = None, **matrix: tuple[Any, ...]
) -> Callable[..., Any]:
    """Register ``fn`` under ``name`` for every combination of ``matrix`` (``name`` formats them).

    ``drill`` names the rendezvous the scenario joins: a template, or a function of the parameters.
    """

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        keys = list(matrix)
        for values in itertools.product(*(matrix[k] for k in keys)):
            params = dict(zip(keys, values, strict=True))
            full = name.format(**params)
            if full in REGISTRY:
                raise ValueError(f"scenario {full} registered twice")
            joins = drill(**params) if callable(drill) else drill.format(**params) if drill else None
            REGISTRY[full] = Registered(fn, params, joins)
        return fn

    return register


class Rendezvous:
    """Parties arrive with an item; once all expected parties arrived or left, ``action(items)`` runs
    once and every arrived party gets its result (or its error)."""

    def __init__(self, name: str, parties: set[str], action: Callable[[dict[str, Any]], Any]) -> None:
        self.name = name
        self._pending = set(parties)
        self._action = action
        self._items: dict[str, Any] = {}
        self._cond = threading.Condition()
        self._started = False
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None

    def arrive(self, party: str, item: Any, timeout: float = 600) -> Any:
        with self._cond:
            self._items[party] = item
            self._pending.discard(party)
            lead = self._lead()
        if lead:
            self._fire()
        with self._cond:
            if not self._cond.wait_for(lambda: self._done, timeout):
                raise ConditionTimeout(f"{self.name}: still waiting for {sorted(self._pending)}")
        if self._error is not None:
            raise AssertionError(f"{self.name} failed: {self._error!r}") from self._error
        return self._result

    def leave(self, party: str) -> None:
        """``party`` will not arrive (it ended early); the others need not wait for it."""
        with self._cond:
            if party not in self._pending:
                return
            self._pending.discard(party)
            lead = self._lead()
        if lead:
            self._fire()

    def _lead(self) -> bool:
        if self._pending or self._started:
            return False
        self._started = True
        return True

    def _fire(self) -> None:
        try:
            result = self._action(dict(self._items)) if self._items else None
        except BaseException as err:
            error: BaseException | None = err
            result = None
        else:
            error = None
        with self._cond:
            self._result, self._error, self._done = result, error, True
            self._cond.notify_all()


@dataclass
class Stage:
    """Everything a scenario works with."""

    airflow: Airflow
    kube: KubeCluster
    slurm: SlurmCluster | None
    gates: dict[str, Gate]
    #: The stand-in of a GKE cluster reached with a Google identity (tokens of GOOGLE_TOKEN_LIFETIME s).
    google: Any = None
    #: The GCS emulator (``sandbox.gcs.launcher.GcsEmulator``) the deployment reaches, if any.
    gcs: Any = None
    #: The StatsD server (``tests.support.statsd_server.StatsdListener``) the deployment's metrics go to.
    statsd: Any = None
    #: The relay in front of slurmrestd behind the ``slurm_rest_held`` connection
    #: (``tests.support.lost_answer.LosingRelay``: it can hold a submission); one scenario uses it.
    held: Any = None
    outage_seconds: float = 20.0
    drills: dict[str, Rendezvous] = field(default_factory=dict)
    runner: Runner | None = None

    @property
    def slurm_conf(self) -> dict[str, str]:
        assert self.slurm is not None, "this deployment runs no Slurm cluster"
        return {
            "tag": self.slurm.tag,
            "workdir": str(self.slurm.workdir),
            "scripts": self.slurm.settings["SLURM_SANDBOX_SCRIPTS_DIR"],
        }

    def drill(self, name: str) -> Rendezvous:
        return self.drills[name]

    def after(self, prefixes: tuple[str, ...], timeout: float = 300) -> None:
        """Wait (at most ``timeout`` seconds) until the scenarios whose names start with one of
        ``prefixes`` have ended, whatever their outcome."""
        if self.runner is not None:
            self.runner.wait_ended(lambda name: name.startswith(prefixes), timeout)

    def make_drill(self, name: str, parties: set[str]) -> Rendezvous:
        if name == "preemption":
            slurm = self.slurm
            assert slurm is not None, "this deployment runs no Slurm cluster"
            return Rendezvous(name, parties, lambda items: slurm.preempt(list(items.values())))
        if name.startswith("outage:"):
            gate = self.gates[name.split(":", 1)[1]]
            return Rendezvous(name, parties, lambda items: self._outage(gate, items))
        raise ValueError(f"unknown drill {name}")

    def _outage(self, gate: Gate, during: dict[str, Callable[[], None]]) -> dict[str, float]:
        """Close ``gate`` for ``outage_seconds``; the parties' jobs are ended a few seconds into it."""
        started = time.monotonic()
        gate.down()
        try:
            time.sleep(3)  # the waits meet the outage while the jobs still run
            for end_job in during.values():
                end_job()
            time.sleep(max(self.outage_seconds - (time.monotonic() - started), 0))
        finally:
            gate.up()
        return {"seconds": time.monotonic() - started}


class Runner:
    """Runs the selected scenarios in threads, all at once."""

    def __init__(self, stage: Stage, names: list[str]) -> None:
        self.stage = stage
        stage.runner = self
        unknown = sorted(set(names) - set(REGISTRY))
        if unknown:
            raise LookupError(f"no scenario registered as {unknown}")
        drills: dict[str, set[str]] = {}
        for name in names:
            if (drill := REGISTRY[name].drill) is not None:
                drills.setdefault(drill, set()).add(name)
        for drill, parties in drills.items():
            stage.drills[drill] = stage.make_drill(drill, parties)
        self.started = time.monotonic()
        self.took: dict[str, float] = {}
        self._pool = ThreadPoolExecutor(max_workers=max(len(names), 1), thread_name_prefix="scenario")
        self.futures: dict[str, Future[Any]] = {}
        self._submitted = threading.Event()
        for name in names:
            self.futures[name] = self._pool.submit(self._run, name)
        self._submitted.set()

    def _run(self, name: str) -> Any:
        registered = REGISTRY[name]
        try:
            return registered.fn(self.stage, name=name, **registered.params)
        except BaseException as err:
            with contextlib.suppress(Exception):  # the logs of its runs say what the scenario met
                err.add_note(self.stage.airflow.report_runs(threading.current_thread().name))
            raise
        finally:
            self.took[name] = round(time.monotonic() - self.started)
            if registered.drill is not None:
                self.stage.drills[registered.drill].leave(name)

    def wait_ended(self, selected: Callable[[str], bool], timeout: float) -> None:
        self._submitted.wait(timeout)
        futures = [f for name, f in self.futures.items() if selected(name)]
        wait(futures, timeout)

    def result(self, name: str, timeout: float = 900) -> Any:
        return self.futures[name].result(timeout)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
