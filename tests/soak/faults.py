"""How the soak injects each fault through the deployment harness, and what it keeps of each."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Any

import psutil

from sandbox.airflow.api import AirflowApiError
from sandbox.kube.launcher import KubeStandinError
from tests.deployment.harness import ConditionTimeout, RunRef, _q
from tests.soak.plan import Fault, RunPlan
from tests.soak.stage import SoakStage

ACTIVE_TI = frozenset(
    {"running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule", "restarting"}
)


class Missed(Exception):
    """The fault had nothing to act on at its moment (the task was not there yet, or any more)."""


class Injector:
    """Applies faults; one triggerer fault and one outage of each gate at a time."""

    def __init__(self, stage: SoakStage) -> None:
        self.stage = stage
        self.triggerer_busy = threading.Lock()
        self.gate_busy = {name: threading.Lock() for name in stage.gates}
        self.injected = 0

    # ---- helpers ---------------------------------------------------------------------------------

    def ti(self, plan: RunPlan, map_index: int) -> dict[str, Any]:
        return self.stage.airflow.task_instance(plan.dag_id, plan.run_id, "train", map_index)

    def live_jobset(self, plan: RunPlan, map_index: int) -> tuple[str, str]:
        records = self.stage.records
        index = None if map_index < 0 else map_index
        for job in reversed(records.jobs_of(plan.dag_id, plan.run_id, index)):
            if records.active(job):
                jobset = records.jobset_of(job)
                return job.namespace, (jobset.name if jobset else job.name)
        raise Missed("no live job")

    # ---- faults ----------------------------------------------------------------------------------

    def apply(self, plan: RunPlan, fault: Fault, actions: list[tuple[str, int, float]]) -> None:
        """Apply ``fault`` now; its ``result`` says what became of it. ``actions`` gets (kind,
        map index, time) of what was done, for the invariants."""
        try:
            detail = getattr(self, f"_{fault.kind}")(plan, fault)
        except Missed as why:
            fault.result = f"missed: {why}"
            return
        except (AirflowApiError, KubeStandinError, ConditionTimeout, AssertionError, psutil.Error) as err:
            fault.result = f"missed: {str(err).splitlines()[0][:160]}"
            return
        self.injected += 1
        actions.append((fault.kind, fault.map_index, time.monotonic()))
        fault.result = f"done{(' ' + detail) if detail else ''}"

    def _worker_kill(self, plan: RunPlan, fault: Fault) -> str:
        ti = self.ti(plan, fault.map_index)
        if ti["state"] != "running":
            raise Missed(f"task {ti['state']}")
        killed = self.stage.airflow.kill_process_of(plan.dag_id, plan.run_id, "train", fault.map_index)
        return f"try {ti['try_number']} pid {killed['task']}"

    def _deferred_on(self, plan: RunPlan, fault: Fault) -> tuple[int, int]:
        ti = self.ti(plan, fault.map_index)
        job = (ti.get("triggerer_job") or {}).get("id")
        if ti["state"] != "deferred" or not job:
            raise Missed(f"task {ti['state']}, not deferred on a triggerer")
        number = self.stage.deployment.triggerer_number(int(job))
        if number is None:
            raise Missed(f"its triggerer job {job} is not a live one")
        return int(job), number

    def _triggerer_kill(self, plan: RunPlan, fault: Fault) -> str:
        if not self.triggerer_busy.acquire(blocking=False):
            raise Missed("another triggerer fault under way")
        try:
            job, number = self._deferred_on(plan, fault)
            airflow = self.stage.airflow
            with airflow.user_acting():  # no user action meets a triggerer half dead
                airflow.kill_triggerer(number)
            time.sleep(2)
            airflow.restart_triggerer(number)
            return f"triggerer {number} (job {job})"
        finally:
            self.triggerer_busy.release()

    def _triggerer_stop(self, plan: RunPlan, fault: Fault) -> str:
        if not self.triggerer_busy.acquire(blocking=False):
            raise Missed("another triggerer fault under way")
        try:
            job, number = self._deferred_on(plan, fault)
            component = self.stage.deployment.triggerer(number)
            procs = [psutil.Process(component.pid), *component.descendants()] if component.pid else []
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(signal.SIGSTOP)
            try:
                time.sleep(fault.seconds)
            finally:
                for proc in procs:
                    with contextlib.suppress(psutil.Error):
                        proc.send_signal(signal.SIGCONT)
            return f"triggerer {number} (job {job})"
        finally:
            self.triggerer_busy.release()

    def _outage(self, plan: RunPlan, fault: Fault) -> str:
        name = "kube" if plan.platform == "gke" else plan.conf.get("transport", "rest")
        gate = self.stage.gates[name]
        if not self.gate_busy[name].acquire(blocking=False):
            raise Missed(f"another {name} outage under way")
        try:
            gate.down()
            try:
                time.sleep(fault.seconds)
            finally:
                gate.up()
            return f"gate {name}"
        finally:
            self.gate_busy[name].release()

    def _lost_answer(self, plan: RunPlan, fault: Fault) -> str:
        namespace = plan.dag_id.replace("_", "-")
        self.stage.standin.control("lose-answers", namespace=namespace, resource="pathwaysjobs", count=1)
        return "armed"

    def _kube_action(self, plan: RunPlan, fault: Fault, action: str, **params: Any) -> str:
        namespace, name = self.live_jobset(plan, fault.map_index)
        self.stage.standin.action(namespace, name, action, **params)
        return name

    def _preempt(self, plan: RunPlan, fault: Fault) -> str:
        return self._kube_action(plan, fault, "preempt-slice", slice=0)

    def _fail_program(self, plan: RunPlan, fault: Fault) -> str:
        return self._kube_action(plan, fault, "fail-program", exit_code=1)

    def _suspend(self, plan: RunPlan, fault: Fault) -> str:
        return self._kube_action(plan, fault, "suspend")

    def _evict(self, plan: RunPlan, fault: Fault) -> str:
        return self._kube_action(plan, fault, "evict", reason="Preempted", readmit="auto")

    def _clear(self, plan: RunPlan, fault: Fault) -> str:
        airflow = self.stage.airflow
        ti = self.ti(plan, fault.map_index)
        if ti["state"] in (None, "none", "scheduled", "queued", "removed"):
            raise Missed(f"task {ti['state']}")
        task = ["train", fault.map_index] if fault.map_index >= 0 else "train"
        with airflow.user_acting():
            airflow.api.post(
                f"dags/{_q(plan.dag_id)}/clearTaskInstances",
                {
                    "dry_run": False,
                    "task_ids": [task],
                    "dag_run_id": plan.run_id,
                    "only_failed": False,
                    "reset_dag_runs": True,
                },
            )
        airflow._snapshots.reopen(RunRef(plan.dag_id, plan.run_id))
        return f"was {ti['state']} try {ti['try_number']}"

    def _mark(self, plan: RunPlan, fault: Fault, state: str) -> str:
        airflow = self.stage.airflow
        ti = self.ti(plan, fault.map_index)
        if ti["state"] not in ACTIVE_TI:
            raise Missed(f"task {ti['state']}")
        if state == "failed":
            airflow.mark_task_failed(plan.dag_id, plan.run_id, "train", fault.map_index)
        else:
            suffix = f"/{fault.map_index}" if fault.map_index >= 0 else ""
            with airflow.user_acting():
                airflow.api.patch(
                    f"{RunRef(plan.dag_id, plan.run_id).path}/taskInstances/train{suffix}",
                    {"new_state": state},
                )
        return f"was {ti['state']} try {ti['try_number']}"

    def _mark_failed(self, plan: RunPlan, fault: Fault) -> str:
        return self._mark(plan, fault, "failed")

    def _mark_success(self, plan: RunPlan, fault: Fault) -> str:
        return self._mark(plan, fault, "success")
