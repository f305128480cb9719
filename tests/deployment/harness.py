"""Drive DAG runs of a running Airflow deployment through its REST API v2 and read what users see.

Every wait is a condition with a deadline. One background reader fetches the task instances of all
unfinished runs in a single request per interval, so that dozens of concurrent scenarios do not
each poll the API server.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import psutil

from airflow_provider_pathways.airflow_features import TRIGGER_ON_KILL
from sandbox.airflow.api import AirflowApiError
from sandbox.airflow.deployment import AirflowDeployment

FINISHED_RUN_STATES = frozenset({"success", "failed"})
#: The triggerer's log line for a user's kill (Airflow 3.3, with ``BaseTrigger.on_kill``; earlier
#: triggerers cancel the trigger without a word).
USER_CANCELLED = "Trigger cancelled by user action"
FINISHED_TI_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


#: Seconds a fail-over waits for the blocks that keep the triggerers (a deferred outage scenario).
STAY_TIMEOUT = 300.0
# A task log line at warning level or above (Airflow 2 and 3 write the level as a word).
_LOUD = re.compile(r"\b(WARNING|ERROR|CRITICAL|warning|error|critical)\b")


class ConditionTimeout(AssertionError):
    """A condition did not hold before its deadline (what a user would see as a hung or wrong run)."""


def wait_for(
    predicate: Callable[[], Any], what: str, timeout: float, interval: float = 0.2, describe: Any = None
) -> Any:
    """Call ``predicate`` until it returns something truthy; raise ``ConditionTimeout`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            detail = describe() if callable(describe) else last
            raise ConditionTimeout(
                f"timed out after {timeout:.0f}s waiting for {what}; last seen: {detail!r}"
            )
        time.sleep(interval)


def _q(value: str) -> str:
    return quote(value, safe="")


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class RunRef:
    """One DAG run."""

    dag_id: str
    run_id: str

    @property
    def path(self) -> str:
        return f"dags/{_q(self.dag_id)}/dagRuns/{_q(self.run_id)}"


class _Snapshots:
    """Task instances and run states of the watched runs, refreshed by one thread."""

    def __init__(self, airflow: Airflow, interval: float) -> None:
        self.airflow = airflow
        self.interval = interval
        self.runs: dict[RunRef, dict[str, Any]] = {}
        self.tis: dict[RunRef, list[dict[str, Any]]] = {}
        self.calls = 0
        self.call_seconds = 0.0
        self.scheduler_beats: set[str] = set()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="airflow-snapshots", daemon=True)
        self._thread.start()

    def watch(self, ref: RunRef) -> None:
        with self._cond:
            self.runs.setdefault(ref, {"state": "queued"})

    def reopen(self, ref: RunRef) -> None:
        """Follow a finished run again (a user cleared it): its snapshot is stale until refreshed."""
        with self._cond:
            self.runs[ref] = {"state": "queued"}
            self.tis.pop(ref, None)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            with contextlib.suppress(Exception):
                self._refresh()
            self.calls += 1
            self.call_seconds += time.monotonic() - started
            self._stop.wait(self.interval)

    def _refresh(self) -> None:
        jobs = self.airflow.deployment.jobs("SchedulerJob")[:10]
        with self._cond:
            self.scheduler_beats.update(j["latest_heartbeat"] for j in jobs if j.get("latest_heartbeat"))
            self._cond.notify_all()
        with self._cond:
            open_runs = [ref for ref, run in self.runs.items() if run.get("state") not in FINISHED_RUN_STATES]
        if not open_runs:
            return
        api = self.airflow.api
        runs = api.post(
            "dags/~/dagRuns/list",
            {"dag_ids": sorted({r.dag_id for r in open_runs}), "page_limit": 1000},
        )["dag_runs"]
        by_ref = {RunRef(r["dag_id"], r["dag_run_id"]): r for r in runs}
        tis = api.post(
            "dags/~/dagRuns/~/taskInstances/list",
            {
                "dag_ids": sorted({r.dag_id for r in open_runs}),
                "dag_run_ids": sorted({r.run_id for r in open_runs}),
                "page_limit": 1000,
            },
        )["task_instances"]
        grouped: dict[RunRef, list[dict[str, Any]]] = {}
        for ti in tis:
            grouped.setdefault(RunRef(ti["dag_id"], ti["dag_run_id"]), []).append(ti)
        with self._cond:
            for ref in open_runs:
                if ref in by_ref:
                    self.runs[ref] = by_ref[ref]
                if ref in grouped:
                    self.tis[ref] = grouped[ref]
            self._cond.notify_all()

    def wait(self, check: Callable[[], Any], what: str, timeout: float, describe: Any = None) -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                result = check()
                if result:
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    detail = describe() if callable(describe) else None
                    raise ConditionTimeout(
                        f"timed out after {timeout:.0f}s waiting for {what}; last seen: {detail!r}"
                    )
                self._cond.wait(min(remaining, self.interval * 4))


class Airflow:
    """Trigger runs, wait for them, read task instances, XComs and logs, and break things on purpose."""

    def __init__(self, deployment: AirflowDeployment, poll_interval: float = 1.0) -> None:
        self.deployment = deployment
        self.api = deployment.api
        #: Airflow 2's REST API v1 (the webserver's) rather than Airflow 3's v2
        self.api_v1 = self.api.version == "v1"
        self._snapshots = _Snapshots(self, poll_interval)
        self._triggerer_lock = threading.RLock()
        #: Blocks inside :meth:`triggerers_stay` (no triggerer is killed while one runs).
        self._stays = 0
        self._stays_ended = threading.Condition()
        self.killed_triggerer_jobs: set[int] = set()
        self._scan_lock = threading.Lock()
        self._scan: set[str] = set()
        self._scan_time = 0.0
        self._triggered: dict[str, list[RunRef]] = {}

    def close(self) -> None:
        self._snapshots.stop()

    # ---- DAGs and runs -------------------------------------------------------------------------

    def unpause(self, dag_id: str) -> None:
        self.api.patch(f"dags/{_q(dag_id)}", {"is_paused": False})

    def wait_dag(self, dag_id: str, timeout: float = 180) -> None:
        """Wait until the dag-processor has parsed and serialized ``dag_id``."""

        def parsed() -> bool:
            try:
                self.api.get(f"dags/{_q(dag_id)}")
            except AirflowApiError as err:
                if err.status == 404:
                    return False
                raise
            return True

        wait_for(
            parsed,
            f"DAG {dag_id} to be parsed",
            timeout,
            0.5,
            describe=lambda: self.api.get("importErrors", limit=10)["import_errors"],
        )

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Wait for ``dag_id`` to be parsed, unpause it, trigger a run with ``conf``; returns the run id."""
        self.wait_dag(dag_id)
        self.unpause(dag_id)
        body: dict[str, Any] = {"conf": conf or {}}
        if not self.api_v1:  # API v2 asks for it; None: the run has no logical date
            body["logical_date"] = None
        run = self.api.post(f"dags/{_q(dag_id)}/dagRuns", body)
        ref = RunRef(dag_id, run["dag_run_id"])
        self._triggered.setdefault(threading.current_thread().name, []).append(ref)
        self._snapshots.watch(ref)
        return ref.run_id

    def report_runs(self, thread: str, lines: int = 40, width: int = 240) -> str:
        """The last ``lines`` lines (each cut at ``width`` characters: the message, not the context
        Airflow appends) of every try's log of the runs the thread ``thread`` triggered, with states
        (for a scenario that failed before it gathered its evidence)."""
        parts = []
        for ref in self._triggered.get(thread, []):
            for ti in self.task_instances(ref.dag_id, ref.run_id):
                task, index = ti["task_id"], int(ti.get("map_index", -1))
                for attempt in range(1, int(ti.get("try_number") or 0) + 1):
                    try:
                        text = self.task_log(ref.dag_id, ref.run_id, task, attempt, index)
                    except AirflowApiError as err:
                        text = f"(no log: {err})"
                    every = text.splitlines()
                    # what was said before the tail (why a supervisor ended the task, e.g.)
                    earlier = [line for line in every[:-lines] if _LOUD.search(line)][-10:]
                    parts.append(
                        f"----- {ref.dag_id}/{ref.run_id} {task}[{index}] try {attempt} "
                        f"(now {ti['state']} try {ti['try_number']})\n"
                        + "".join(f"{line[:width]}\n" for line in earlier)
                        + ("...\n" if earlier else "")
                        + "\n".join(line[:width] for line in every[-lines:])
                    )
                parts.append(self._component_lines(str(ti.get("id") or ""), width))
        return "\n".join(parts)

    def _component_lines(self, ti_id: str, width: int, most: int = 15) -> str:
        """The last ``most`` lines of each Airflow component's log that name the task instance
        ``ti_id`` (how the scheduler, executor and triggerer saw it, e.g. why it failed)."""
        found = []
        for component in getattr(self.deployment, "components", {}).values():
            try:
                text = component.log_path.read_text(errors="replace")
            except OSError:
                continue
            named = [line[:width] for line in text.splitlines() if ti_id and ti_id in line][-most:]
            if named:
                found.append(f"  ({component.name} on {ti_id})\n" + "\n".join(named))
        return "\n".join(found)

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self.api.get(RunRef(dag_id, run_id).path)

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> dict[str, Any]:
        """Wait until the run has finished; returns the dag run (``state`` is ``success`` or ``failed``)."""
        ref = RunRef(dag_id, run_id)
        self._snapshots.watch(ref)
        self._snapshots.wait(
            lambda: self._snapshots.runs.get(ref, {}).get("state") in FINISHED_RUN_STATES,
            f"run {dag_id}/{run_id} to finish",
            timeout,
            describe=lambda: self._describe(ref),
        )
        return self.dag_run(dag_id, run_id)

    def _describe(self, ref: RunRef) -> Any:
        run = self._snapshots.runs.get(ref, {})
        tis = [
            (ti["task_id"], ti["map_index"], ti["state"], ti["try_number"])
            for ti in self._snapshots.tis.get(ref, [])
        ]
        return {"run": run.get("state"), "task_instances": tis[:12]}

    # ---- task instances ---------------------------------------------------------------------------

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """Every task instance of the run (fresh from the API)."""
        ref = RunRef(dag_id, run_id)
        return self.api.get(f"{ref.path}/taskInstances", limit=1000)["task_instances"]

    def task_instance(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict[str, Any]:
        ref = RunRef(dag_id, run_id)
        suffix = f"/{map_index}" if map_index >= 0 else ""
        return self.api.get(f"{ref.path}/taskInstances/{_q(task_id)}{suffix}")

    def tries(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict[int, dict[str, Any]]:
        """Every try of the task instance (its state, hostname, pid...), by try number."""
        ref = RunRef(dag_id, run_id)
        suffix = f"/{map_index}" if map_index >= 0 else ""
        found = self.api.get(f"{ref.path}/taskInstances/{_q(task_id)}{suffix}/tries")["task_instances"]
        return {int(t["try_number"]): t for t in found}

    def wait_ti(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        what: str,
        predicate: Callable[[dict[str, Any]], Any],
        timeout: float,
        map_index: int = -1,
    ) -> dict[str, Any]:
        """Wait until the task instance satisfies ``predicate``; returns it (from the last snapshot)."""
        ref = RunRef(dag_id, run_id)
        self._snapshots.watch(ref)

        def current() -> dict[str, Any] | None:
            for ti in self._snapshots.tis.get(ref, []):
                if ti["task_id"] == task_id and ti["map_index"] == map_index:
                    return ti
            return None

        def check() -> dict[str, Any] | None:
            ti = current()
            return ti if ti is not None and predicate(ti) else None

        def describe() -> Any:
            ti = current()
            return ti and {k: ti.get(k) for k in ("state", "try_number", "pid", "hostname")}

        return self._snapshots.wait(check, f"{dag_id}.{task_id}[{map_index}] {what}", timeout, describe)

    def wait_tis(
        self,
        dag_id: str,
        run_id: str,
        what: str,
        predicate: Callable[[list[dict[str, Any]]], Any],
        timeout: float,
    ) -> list[dict[str, Any]]:
        """Wait until the run's task instances (all of them) satisfy ``predicate``."""
        ref = RunRef(dag_id, run_id)
        self._snapshots.watch(ref)

        def check() -> list[dict[str, Any]] | None:
            tis = self._snapshots.tis.get(ref, [])
            return tis if tis and predicate(tis) else None

        def describe() -> Any:
            states: dict[str, int] = {}
            for ti in self._snapshots.tis.get(ref, []):
                states[str(ti["state"])] = states.get(str(ti["state"]), 0) + 1
            return states

        return self._snapshots.wait(check, f"{dag_id} {what}", timeout, describe)

    def settle_deferred(
        self, dag_id: str, run_id: str, task_id: str, timeout: float = 180, map_index: int = -1
    ) -> dict[str, Any]:
        """Wait until the task is deferred and the scheduler has taken in the deferral; returns the TI.

        The executor reports the end of the try that deferred only once its worker has finished
        with it. Airflow 3.3 fails a task whose trigger fired before the scheduler took in that
        report ("finished with state success, but the task instance's state attribute is queued"),
        so the tests end a job only after it: the worker no longer runs the task instance, and the
        scheduler has gone through two more loops since.
        """
        ti = self.wait_ti(
            dag_id, run_id, task_id, "deferred", lambda t: t["state"] == "deferred", timeout, map_index
        )
        self.wait_workers_done([str(ti["id"])], timeout)
        return ti

    def wait_workers_done(self, ti_ids: list[str], timeout: float = 180) -> None:
        """Wait until no process works on these task instances and the scheduler looped twice since."""
        wanted = set(ti_ids)
        wait_for(
            lambda: not (wanted & self._busy_task_instances()),
            "the workers to finish with the deferred tries",
            timeout,
            0.5,
            describe=lambda: sorted(wanted & self._busy_task_instances()),
        )
        self.wait_scheduler_loops(time.time(), loops=2, timeout=timeout)

    def _busy_task_instances(self) -> set[str]:
        """Task instance ids in the titles of running processes (a LocalExecutor worker and a task
        process show the id of the task instance they run); one scan of the process table per
        second at most."""
        with self._scan_lock:
            if time.monotonic() - self._scan_time > 1.0:
                titles = set()
                for proc in psutil.process_iter(["cmdline"]):
                    line = " ".join(proc.info.get("cmdline") or [])
                    if "LocalExecutor:" in line:  # a LocalExecutor worker, while it supervises a try
                        titles.add(line.rsplit(":", 1)[1].strip())
                    elif line.startswith("airflow worker -- "):  # a task process (any executor)
                        titles.add(line.removeprefix("airflow worker -- ").strip())
                self._scan, self._scan_time = titles, time.monotonic()
            return set(self._scan)

    def wait_scheduler_loops(self, since: float, loops: int, timeout: float = 120) -> None:
        """Wait until the scheduler heartbeated ``loops`` times after ``since`` (at most once a loop)."""
        snapshots = self._snapshots

        def beats() -> list[str]:
            return sorted(b for b in snapshots.scheduler_beats if _epoch(b) > since)

        snapshots.wait(lambda: len(beats()) >= loops, f"{loops} scheduler loops", timeout, describe=beats)

    def xcom(
        self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1
    ) -> Any:
        """The XCom value (decoded JSON), or None if there is none."""
        ref = RunRef(dag_id, run_id)
        # API v1 sends the value's str() unless asked for the deserialized value as JSON
        as_json = {"deserialize": "true", "stringify": "false"} if self.api_v1 else {}
        try:
            entry = self.api.get(
                f"{ref.path}/taskInstances/{_q(task_id)}/xcomEntries/{_q(key)}",
                map_index=map_index,
                **as_json,
            )
        except AirflowApiError as err:
            if err.status == 404:
                return None
            raise
        value = entry.get("value")
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return json.loads(value)
        return value

    def state_store(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict[str, Any]:
        """The task instance's ``task_state_store`` (what an operator keeps across tries)."""
        ref = RunRef(dag_id, run_id)
        entries = self.api.get(
            f"{ref.path}/taskInstances/{_q(task_id)}/state-store", map_index=map_index, limit=100
        )["task_state_store"]
        return {e["key"]: e["value"] for e in entries}

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        """The task's log for one try (task and trigger lines), one event per line."""
        ref = RunRef(dag_id, run_id)
        path = f"{ref.path}/taskInstances/{_q(task_id)}/logs/{try_number}"
        if self.api_v1:  # API v1's JSON holds the str() of (host, text) pairs; plain text is the log
            params = {"full_content": "true", "map_index": map_index}
            return self.api.request("GET", path, params=params, headers={"Accept": "text/plain"}).text
        body = self.api.get(path, full_content=True, map_index=map_index)
        lines = []
        for item in body.get("content") or []:
            if isinstance(item, dict):
                event = str(item.get("event", ""))
                extra = {k: v for k, v in item.items() if k not in ("event", "timestamp", "level", "logger")}
                lines.append(f"{event} {extra}" if extra and event else event)
            else:
                lines.append(str(item))
        return "\n".join(lines)

    def run_finished(self, dag_id: str, run_id: str) -> bool:
        """Whether the run has finished (as of the last snapshot)."""
        return self._snapshots.runs.get(RunRef(dag_id, run_id), {}).get("state") in FINISHED_RUN_STATES

    def wait_log(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        try_number: int,
        text: str | re.Pattern[str],
        timeout: float,
        map_index: int = -1,
        until_finished: bool = True,
    ) -> str:
        """Wait until ``text`` (a string or a pattern) is in the log of try ``try_number``; returns the
        log. With ``until_finished`` it gives up (returning the log without it) once the run has
        finished, so that the caller can judge the outcome."""
        seen: list[str] = [""]

        def check() -> bool:
            try:
                seen[0] = self.task_log(dag_id, run_id, task_id, try_number, map_index)
            except AirflowApiError:
                return False
            found = text.search(seen[0]) if isinstance(text, re.Pattern) else text in seen[0]
            return bool(found) or (until_finished and self.run_finished(dag_id, run_id))

        wait_for(
            check,
            f"{text!r} in the log of {dag_id}.{task_id} try {try_number}",
            timeout,
            2.0,
            describe=lambda: seen[0][-1500:],
        )
        return seen[0]

    @contextlib.contextmanager
    def user_acting(self) -> Iterator[None]:
        """No triggerer is killed in this block: a user's kill of a deferred task runs the trigger's
        ``on_kill`` on the triggerer that took it in, and a triggerer killed meanwhile cuts it off (Airflow
        does not run it again elsewhere), which is another story than the user's action."""
        with self._triggerer_lock:
            yield

    @contextlib.contextmanager
    def triggerers_stay(self) -> Iterator[None]:
        """No triggerer is killed while this block runs (:meth:`fail_over` waits for it to end): a
        trigger that must ride out an outage as one trigger is not moved to another triggerer in the
        middle of it, which is another story (the one that took it over saw no outage). It starts
        once a fail-over under way has ended (its trigger taken over, its triggerer back)."""
        with self._triggerer_lock, self._stays_ended:
            self._stays += 1
        try:
            yield
        finally:
            with self._stays_ended:
                self._stays -= 1
                self._stays_ended.notify_all()

    def wait_trigger_held(
        self, dag_id: str, run_id: str, task_id: str, map_index: int = -1, timeout: float = 120
    ) -> None:
        """Wait until a live triggerer holds the deferred task's trigger (one that no fail-over
        killed), or the task no longer defers."""
        self.wait_ti(
            dag_id,
            run_id,
            task_id,
            "deferred on a live triggerer",
            lambda t: (
                t["state"] != "deferred"
                or (t.get("triggerer_job") or {}).get("id") not in (None, *self.killed_triggerer_jobs)
            ),
            timeout,
            map_index,
        )

    def mark_task_failed(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int = -1,
        *,
        only_while: frozenset[str] | None = None,
    ) -> bool:
        """Set the task instance's state to failed through the API, as a user in the UI does.

        Not while a triggerer is being killed: a deferred task is marked failed while a live
        triggerer runs its trigger, and no triggerer is killed until that triggerer has taken in the
        user's action (a user acting while no triggerer holds the trigger is another story). Before
        Airflow 3.3 the triggerer logs nothing when it takes it in: the caller waits for its effect.
        ``only_while``: only if the task instance is still in one of these states once it may be
        marked (it may have ended while the marking waited); whether it was marked.
        """
        with self._triggerer_lock:
            deferred = self.task_instance(dag_id, run_id, task_id, map_index)["state"] == "deferred"
            if deferred:
                self.wait_trigger_held(dag_id, run_id, task_id, map_index)
            state = self.task_instance(dag_id, run_id, task_id, map_index)["state"]
            if only_while is not None and state not in only_while:
                return False
            ref = RunRef(dag_id, run_id)
            suffix = f"/{map_index}" if map_index >= 0 else ""
            try_number = self.task_instance(dag_id, run_id, task_id, map_index)["try_number"]
            body: dict[str, Any] = {"new_state": "failed"}
            if self.api_v1:  # API v1 only shows what it would do unless told otherwise
                body["dry_run"] = False
            self.api.patch(f"{ref.path}/taskInstances/{_q(task_id)}{suffix}", body)
            if deferred and TRIGGER_ON_KILL:
                with contextlib.suppress(ConditionTimeout):
                    self.wait_log(
                        dag_id,
                        run_id,
                        task_id,
                        try_number,
                        USER_CANCELLED,
                        60,
                        map_index,
                        until_finished=False,
                    )
        return True

    def clear(
        self, dag_id: str, run_id: str, task_id: str, states: tuple[str, ...] = ("success", "failed")
    ) -> int:
        """Clear a task instance in one of ``states`` through the API, as a user does in the UI (a
        running one is killed first; its run runs again); returns the try number the cleared task
        will run as."""
        ti = self.task_instance(dag_id, run_id, task_id)
        assert ti["state"] in states, f"{dag_id}.{task_id} is {ti['state']}, not one of {states}"
        self.api.post(
            f"dags/{_q(dag_id)}/clearTaskInstances",
            {
                "dry_run": False,
                "task_ids": [task_id],
                "dag_run_id": run_id,
                "only_failed": False,
                "reset_dag_runs": True,
            },
        )
        self._snapshots.reopen(RunRef(dag_id, run_id))
        return int(ti["try_number"]) + 1

    # ---- breaking things --------------------------------------------------------------------------

    def freeze_process_of(
        self, dag_id: str, run_id: str, task_id: str, map_index: int = -1
    ) -> list[psutil.Process]:
        """SIGSTOP the running task's supervisor (the executor's worker), the task process and its
        children, as a worker cut off by a network partition: no heartbeats, nothing done, until
        :meth:`thaw`. Returns the frozen processes, the supervisor first, then the task process."""
        ti = self.task_instance(dag_id, run_id, task_id, map_index)
        assert ti["state"] == "running", f"{dag_id}.{task_id} is {ti['state']}, not running"
        task = psutil.Process(int(ti["pid"]))
        supervisor = task.parent()
        assert supervisor is not None, f"task process {task.pid} has no parent"
        frozen = [supervisor, task, *task.children(recursive=True)]
        for proc in frozen:
            proc.send_signal(signal.SIGSTOP)
        return frozen

    @staticmethod
    def thaw(frozen: list[psutil.Process]) -> None:
        """SIGCONT what :meth:`freeze_process_of` froze (the partition heals)."""
        for proc in frozen:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGCONT)

    def kill_process_of(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict[str, int]:
        """SIGKILL the running task's process and its supervisor (the executor's worker), as a lost worker.

        The supervisor is frozen first so that it cannot report the task's death: the task is left
        ``running`` without heartbeats, for the scheduler to notice.
        """
        ti = self.task_instance(dag_id, run_id, task_id, map_index)
        assert ti["state"] == "running", f"{dag_id}.{task_id} is {ti['state']}, not running"
        pid = int(ti["pid"])
        task = psutil.Process(pid)
        supervisor = task.parent()
        assert supervisor is not None, f"task process {pid} has no parent"
        title = " ".join(supervisor.cmdline())
        # Airflow 2: the task's parent is the "airflow task supervisor" the LocalExecutor's worker forked
        supervisors = ("airflow worker", "LocalExecutor", "airflow task supervisor")
        assert any(s in title for s in supervisors), f"unexpected parent of {pid}: {title!r}"
        os.kill(supervisor.pid, signal.SIGSTOP)
        victims = [task, *task.children(recursive=True)]
        for proc in victims:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        os.kill(supervisor.pid, signal.SIGKILL)
        psutil.wait_procs([*victims, supervisor], timeout=10)
        return {"task": pid, "supervisor": supervisor.pid}

    def kill_triggerer(self, n: int) -> int:
        """SIGKILL triggerer ``n`` (and its trigger runner); returns the job id it had."""
        job_id = self.deployment.kill_triggerer(n)
        self.killed_triggerer_jobs.add(job_id)
        return job_id

    def restart_triggerer(self, n: int) -> int:
        return self.deployment.start_triggerer(n)

    def fail_over(self, dag_id: str, run_id: str, task_id: str, timeout: float = 90) -> dict[str, int]:
        """Make sure the triggerer running this deferred task's trigger dies (SIGKILL) and another one
        takes the trigger over; the killed triggerer is started again afterwards.

        One fail-over at a time: two triggerers must not be down together; none while a
        :meth:`triggerers_stay` block runs.
        """
        with self._triggerer_lock:
            with self._stays_ended:
                if not self._stays_ended.wait_for(lambda: self._stays == 0, STAY_TIMEOUT):
                    raise ConditionTimeout(f"triggerers kept for {STAY_TIMEOUT}s: no fail-over of {dag_id}")
            ti = self.wait_ti(
                dag_id,
                run_id,
                task_id,
                "deferred on a triggerer",
                lambda t: t["state"] == "deferred" and (t.get("triggerer_job") or {}).get("id"),
                timeout,
            )
            killed = int(ti["triggerer_job"]["id"])
            restart: int | None = None
            if killed not in self.killed_triggerer_jobs:
                restart = self.deployment.triggerer_number(killed)
                assert restart is not None, f"the trigger runs on an unknown triggerer job {killed}"
                self.kill_triggerer(restart)
            taken = self.wait_ti(
                dag_id,
                run_id,
                task_id,
                f"its trigger taken over from the killed triggerer job {killed}",
                lambda t: (
                    t["state"] != "deferred" or (t.get("triggerer_job") or {}).get("id") not in (None, killed)
                ),
                timeout,
            )
            if restart is not None:
                self.restart_triggerer(restart)
            return {"killed_job": killed, "new_job": int((taken.get("triggerer_job") or {}).get("id") or 0)}

    def stall_triggerer(self, dag_id: str, run_id: str, task_id: str, timeout: float = 90) -> dict[str, Any]:
        """Stall the triggerer running this deferred task's trigger (SIGSTOP, its children too: a
        stopped container, a long pause) until its heartbeat has lapsed and another triggerer has
        taken the trigger over, then let it go on (SIGCONT), as it was; returns once it heartbeats
        again, i.e. once it has run a loop since (a loop starts by cancelling the triggers it no
        longer owns).

        As :meth:`fail_over`: one at a time, none while a :meth:`triggerers_stay` block runs; every
        trigger of the stalled triggerer moves, not only this one.
        """
        with self._triggerer_lock:
            with self._stays_ended:
                if not self._stays_ended.wait_for(lambda: self._stays == 0, STAY_TIMEOUT):
                    raise ConditionTimeout(f"triggerers kept for {STAY_TIMEOUT}s: no stall of {dag_id}")
            ti = self.wait_ti(
                dag_id,
                run_id,
                task_id,
                "deferred on a triggerer",
                lambda t: t["state"] == "deferred" and (t.get("triggerer_job") or {}).get("id"),
                timeout,
            )
            stalled = int(ti["triggerer_job"]["id"])
            number = self.deployment.triggerer_number(stalled)
            assert number is not None, f"the trigger runs on an unknown triggerer job {stalled}"
            frozen = self.deployment.freeze_triggerer(number)
            frozen_at = time.time()
            started = time.monotonic()
            try:
                taken = self.wait_ti(
                    dag_id,
                    run_id,
                    task_id,
                    f"its trigger taken over from the stalled triggerer job {stalled}",
                    lambda t: (
                        t["state"] != "deferred"
                        or (t.get("triggerer_job") or {}).get("id") not in (None, stalled)
                    ),
                    timeout,
                )
            finally:
                self.thaw(frozen)
            thawed_at = time.time()
            stalled_for = time.monotonic() - started
            wait_for(
                lambda: stalled in self.deployment._alive_triggerer_ids(),
                f"the stalled triggerer job {stalled} to heartbeat again",
                timeout,
                0.5,
            )
            return {
                "stalled_job": stalled,
                "stalled_triggerer": number,
                "new_job": int((taken.get("triggerer_job") or {}).get("id") or 0),
                "frozen_at": frozen_at,
                "thawed_at": thawed_at,
                "stalled_for": stalled_for,
            }


@dataclass
class TaskOutcome:
    """What a user sees of one task instance once its run is over."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    run_state: str
    state: str
    try_number: int
    xcom: dict[str, Any]
    logs: dict[int, str]
    extra: dict[str, Any]

    def log(self, try_number: int | None = None) -> str:
        """The log of one try, or of every try."""
        if try_number is not None:
            return self.logs.get(try_number, "")
        return "\n".join(self.logs[t] for t in sorted(self.logs))


def outcome(
    airflow: Airflow,
    dag_id: str,
    run_id: str,
    task_id: str = "train",
    *,
    xcom_keys: Iterable[str] = ("return_value",),
    map_index: int = -1,
) -> TaskOutcome:
    """Final state, try number, XComs and logs of every try of one task instance."""
    run = airflow.dag_run(dag_id, run_id)
    ti = airflow.task_instance(dag_id, run_id, task_id, map_index)
    logs = {}
    for attempt in range(1, int(ti["try_number"]) + 1):
        with contextlib.suppress(AirflowApiError):
            logs[attempt] = airflow.task_log(dag_id, run_id, task_id, attempt, map_index)
    return TaskOutcome(
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=map_index,
        run_state=run["state"],
        state=str(ti["state"]),
        try_number=int(ti["try_number"]),
        xcom={key: airflow.xcom(dag_id, run_id, task_id, key, map_index) for key in xcom_keys},
        logs=logs,
        extra={},
    )
