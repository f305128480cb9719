"""How the soak injects each fault through the deployment harness, and what it keeps of each."""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from typing import Any

import psutil

from sandbox.airflow.api import AirflowApiError
from sandbox.kube.launcher import KubeStandinError
from tests.deployment.harness import ConditionTimeout, RunRef, _q, wait_for
from tests.soak.invariants import slurm_job_name
from tests.soak.plan import Fault, RunPlan
from tests.soak.records import SLURM_ENDED, SlurmJobRecord
from tests.soak.stage import SoakStage

ACTIVE_TI = frozenset(
    {"running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule", "restarting"}
)

#: The reasons for which Kueue evicts an admitted Workload that the soak draws (the stand-in's
#: ``evict`` action: sandbox/kube/README.md)
EVICTION_REASONS = ("Preempted", "PodsReadyTimeout")


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

    def ti(self, plan: RunPlan, fault: Fault) -> dict[str, Any]:
        return self.stage.airflow.task_instance(
            fault.dag or plan.dag_id, plan.run_id, fault.task, fault.map_index
        )

    def live_jobset(self, plan: RunPlan, map_index: int) -> tuple[str, str]:
        records = self.stage.records
        index = None if map_index < 0 else map_index
        for job in reversed(records.jobs_of(plan.dag_id, plan.run_id, index)):
            if records.active(job):
                jobset = records.jobset_of(job)
                return job.namespace, (jobset.name if jobset else job.name)
        raise Missed("no live job")

    def live_slurm_job(self, plan: RunPlan, map_index: int) -> SlurmJobRecord:
        """The RUNNING job of the task instance, as slurmctld reports it now."""
        records, cluster = self.stage.slurm_records, self.stage.slurm
        assert records is not None and cluster is not None
        records.poll()
        name = slurm_job_name(plan.dag_id, plan.run_id, cluster.tag)
        jobs = records.jobs_of(name, records.marker(plan.dag_id, "train", plan.run_id, map_index))
        for job in reversed(jobs):
            if job.state == "RUNNING":
                return job
        raise Missed("no running job")

    # ---- faults ----------------------------------------------------------------------------------

    def apply(self, plan: RunPlan, fault: Fault, actions: list[tuple[str, int, float]]) -> None:
        """Apply ``fault`` now; its ``result`` says what became of it. ``actions`` gets (kind,
        map index, time) of what was done, for the invariants."""
        began = time.monotonic()
        try:
            detail = getattr(self, f"_{fault.kind}")(plan, fault)
        except Missed as why:
            fault.result = f"missed: {why}"
            return
        except (AirflowApiError, KubeStandinError, ConditionTimeout, AssertionError, psutil.Error) as err:
            fault.result = f"missed: {str(err).splitlines()[0][:160]}"
            return
        self.injected += 1
        kind = f"{fault.kind}@{fault.dag}.{fault.task}" if fault.dag else fault.kind
        # Slurm: the moment it began (a requeue is done before its hold is released and it reruns)
        actions.append((kind, fault.map_index, began if plan.platform == "slurm" else time.monotonic()))
        fault.result = f"done{(' ' + detail) if detail else ''}"

    def _worker_kill(self, plan: RunPlan, fault: Fault) -> str:
        ti = self.ti(plan, fault)
        if ti["state"] != "running":
            raise Missed(f"task {ti['state']}")
        dag = fault.dag or plan.dag_id
        killed = self.stage.airflow.kill_process_of(dag, plan.run_id, fault.task, fault.map_index)
        return f"try {ti['try_number']} pid {killed['task']}"

    def _deferred_on(self, plan: RunPlan, fault: Fault) -> tuple[int, int]:
        ti = self.ti(plan, fault)
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
        name = "kube" if plan.platform == "gke" else plan.transport
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
        if plan.platform == "slurm":  # the run's first submission through slurmrestd (by its job name)
            relay = self.stage.rest_relay
            assert relay is not None and plan.transport == "rest"
            relay.drop("/job/submit", 1, body_part=f"-{plan.run_id}-".encode())
            return "armed"
        namespace = plan.dag_id.replace("_", "-")
        self.stage.standin.control("lose-answers", namespace=namespace, resource="pathwaysjobs", count=1)
        return "armed"

    def _kube_action(self, plan: RunPlan, fault: Fault, action: str, **params: Any) -> str:
        namespace, name = self.live_jobset(plan, fault.map_index)
        self.stage.standin.action(namespace, name, action, **params)
        return name

    def _preempt(self, plan: RunPlan, fault: Fault) -> str:
        if plan.platform == "slurm":
            return self._slurm_requeue(plan, fault)
        return self._kube_action(plan, fault, "preempt-slice", slice=0)

    def _fail_program(self, plan: RunPlan, fault: Fault) -> str:
        if plan.platform == "slurm":
            return self._slurm_fail_program(plan, fault)
        return self._kube_action(plan, fault, "fail-program", exit_code=1)

    def _slurm_requeue(self, plan: RunPlan, fault: Fault) -> str:
        """``scontrol requeue`` of the running job: what slurmctld does to a job preempted in
        ``PreemptMode=REQUEUE`` (slurm.conf(5)); the job keeps its id and runs again. Slurm then
        holds it about two minutes (``BeginTime``); the soak lets it start at once, not within the
        second of the requeue, whose revoked credential slurmd still holds (sandbox/slurm/README.md,
        Pitfalls), as Cluster Director recreating the nodes does."""
        cluster = self.stage.slurm
        assert cluster is not None
        job = self.live_slurm_job(plan, fault.map_index)
        cluster.run("scontrol", "requeue", job.job_id)
        requeued = int(time.time())

        def held() -> str:
            state = cluster.state(job.job_id)
            passed = time.time() >= requeued + 1
            return state if passed and (state == "PENDING" or state in SLURM_ENDED) else ""

        state = wait_for(held, f"job {job.job_id} requeued and pending", 60, 0.3)
        if state == "PENDING":
            cluster.run("scontrol", "update", f"jobid={job.job_id}", "starttime=now", check=False)
        return f"job {job.job_id} (then {state})"

    def _slurm_fail_program(self, plan: RunPlan, fault: Fault) -> str:
        """Ask the running program to fail (``soak_slurm.PROGRAM``): exit 1, or SIGTERM itself."""
        cluster = self.stage.slurm
        assert cluster is not None
        job = self.live_slurm_job(plan, fault.map_index)
        runs = cluster.workdir / f"{plan.run_id}.runs"
        starts = runs.read_text().splitlines() if runs.exists() else []
        mine = [line for line in starts if f"job={job.job_id} " in line + " "]
        if not mine:
            raise Missed(f"the program of job {job.job_id} has not started")
        restart = mine[-1].rsplit("restart=", 1)[1].strip()
        how = "TERM" if random.Random(f"{plan.seed}:{fault.at}").random() < 0.3 else "1"
        target = cluster.workdir / f"fail-{job.job_id}.{restart}"
        tmp = target.with_suffix(".tmp")
        tmp.write_text(f"{how}\n")
        tmp.chmod(0o644)
        tmp.replace(target)
        return f"job {job.job_id} restart {restart}: {how}"

    def _suspend(self, plan: RunPlan, fault: Fault) -> str:
        return self._kube_action(plan, fault, "suspend")

    def _evict(self, plan: RunPlan, fault: Fault) -> str:
        """Kueue evicts the admitted job: preempted by a workload of higher priority, or its pods not
        all ready within ``waitForPodsReady``'s timeout (on by default since Kueue 0.19; requeued
        after its backoff). Which one follows from the fault's moment, so a seed replays it."""
        reason = EVICTION_REASONS[round(fault.at * 10) % len(EVICTION_REASONS)]
        return f"{self._kube_action(plan, fault, 'evict', reason=reason, readmit='auto')} ({reason})"

    def _clear(self, plan: RunPlan, fault: Fault) -> str:
        airflow = self.stage.airflow
        ti = self.ti(plan, fault)
        if ti["state"] in (None, "none", "scheduled", "queued", "removed"):
            raise Missed(f"task {ti['state']}")
        task = [fault.task, fault.map_index] if fault.map_index >= 0 else fault.task
        dag = fault.dag or plan.dag_id
        with airflow.user_acting():
            airflow.api.post(
                f"dags/{_q(dag)}/clearTaskInstances",
                {
                    "dry_run": False,
                    "task_ids": [task],
                    "dag_run_id": plan.run_id,
                    "only_failed": False,
                    "reset_dag_runs": True,
                },
            )
        airflow._snapshots.reopen(RunRef(dag, plan.run_id))
        return f"was {ti['state']} try {ti['try_number']}"

    def _mark(self, plan: RunPlan, fault: Fault, state: str) -> str:
        airflow = self.stage.airflow
        ti = self.ti(plan, fault)
        if ti["state"] not in ACTIVE_TI:
            raise Missed(f"task {ti['state']}")
        dag = fault.dag or plan.dag_id
        # the user acts on a task still under way: one that ended while the action waited for
        # its turn (a triggerer fault under way) is another story (a succeeded setup marked
        # failed, say, whose teardown Airflow then skips)
        if state == "failed":
            if not airflow.mark_task_failed(
                dag, plan.run_id, fault.task, fault.map_index, only_while=ACTIVE_TI
            ):
                raise Missed("task ended before it could be marked")
        else:
            suffix = f"/{fault.map_index}" if fault.map_index >= 0 else ""
            with airflow.user_acting():
                if self.ti(plan, fault)["state"] not in ACTIVE_TI:
                    raise Missed("task ended before it could be marked")
                airflow.api.patch(
                    f"{RunRef(dag, plan.run_id).path}/taskInstances/{fault.task}{suffix}",
                    {"new_state": state},
                )
        return f"was {ti['state']} try {ti['try_number']}"

    def _mark_failed(self, plan: RunPlan, fault: Fault) -> str:
        return self._mark(plan, fault, "failed")

    def _mark_success(self, plan: RunPlan, fault: Fault) -> str:
        return self._mark(plan, fault, "success")
