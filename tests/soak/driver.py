"""Runs many soak DAG runs at once (bounded), injects each run's faults at their moments, waits for
each run within its bound, and checks the invariants against the stand-ins' records."""

from __future__ import annotations

import random
import sys
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from sandbox.airflow.api import AirflowApiError
from tests.deployment.harness import FINISHED_RUN_STATES, ConditionTimeout, RunRef, _q
from tests.soak.faults import Injector
from tests.soak.invariants import (
    Verdict,
    check_gke_run,
    check_slurm_pair,
    check_slurm_run,
    kept_by_design,
    pair_jobs,
    slurm_job_name,
    slurm_kept_by_design,
)
from tests.soak.plan import RunPlan, draw, run_seeds
from tests.soak.stage import SoakStage

#: seconds a finished run's jobs get to be deleted before the leftovers invariant is checked
SETTLE = 60.0
#: The GKE DAGs' maintenance sweep (tests/soak/dags/soak_gke.py).
#: The maintenance DAGs a deployment schedules beside its DAGs, per platform.
SWEEP_DAGS = {"gke": "soak_gke_sweep", "slurm": "soak_slurm_sweep"}


@dataclass
class Outcome:
    plan: RunPlan
    state: str = "?"
    seconds: float = 0.0
    verdict: Verdict = field(default_factory=Verdict)
    error: str = ""
    #: jobs of ended task instances still active when the run ended that went within ``SETTLE``
    #: (a trigger's or a kill's late delete, or the sweep's)
    late_jobs: int = 0


def bound(plan: RunPlan) -> float:
    """Seconds the run may take: generous (a hang detector), from its shape and its faults."""
    program = float(plan.conf.get("program_seconds", 20))
    cycles = 1 + sum(f.kind in ("clear", "preempt", "fail_program", "suspend", "evict") for f in plan.faults)
    if plan.conf.get("exit_code"):
        cycles += 3
    lasting = sum(f.seconds for f in plan.faults)
    admit = float(plan.conf.get("admit_after", 0) or 0)
    return 300 + cycles * (program + 90) + lasting + admit


class Soak:
    def __init__(self, stage: SoakStage, *, concurrency: int, platforms: tuple[str, ...]) -> None:
        self.stage = stage
        self.concurrency = concurrency
        self.platforms = platforms
        self.injector = Injector(stage)
        self.outcomes: list[Outcome] = []
        self._ready: set[str] = set()
        self._ready_lock = threading.Lock()
        self._print = threading.Lock()

    def say(self, text: str) -> None:
        with self._print:
            print(text, flush=True)

    # ---- one run -------------------------------------------------------------------------------

    def _dag_ready(self, dag_id: str) -> None:
        with self._ready_lock:
            if dag_id in self._ready:
                return
        airflow = self.stage.airflow
        airflow.wait_dag(dag_id, timeout=300)
        airflow.unpause(dag_id)
        with self._ready_lock:
            self._ready.add(dag_id)

    def _trigger(self, plan: RunPlan) -> None:
        for dag in plan.dag_ids:
            self._dag_ready(dag)
        airflow = self.stage.airflow
        conf = dict(plan.conf)
        if plan.platform == "slurm":  # where this soak's cluster user keeps its files, and its tag
            cluster = self.stage.slurm
            assert cluster is not None
            scripts = cluster.settings["SLURM_SANDBOX_SCRIPTS_DIR"]
            conf.update(workdir=str(cluster.workdir), tag=cluster.tag, scripts=scripts)
        for dag in plan.dag_ids:  # the two DAGs of a shared-user shape start together
            airflow.api.post(
                f"dags/{_q(dag)}/dagRuns",
                {"dag_run_id": plan.run_id, "conf": conf, "logical_date": None},
            )
            airflow._snapshots.watch(RunRef(dag, plan.run_id))

    def _run_state(self, plan: RunPlan) -> str:
        states = [str(self.stage.airflow.dag_run(dag, plan.run_id)["state"]) for dag in plan.dag_ids]
        return states[0] if len(set(states)) == 1 else "+".join(states)

    def _over(self, plan: RunPlan) -> bool:
        runs = self.stage.airflow._snapshots.runs
        return all(
            runs.get(RunRef(dag, plan.run_id), {}).get("state") in FINISHED_RUN_STATES for dag in plan.dag_ids
        )

    def run(self, plan: RunPlan) -> Outcome:
        outcome = Outcome(plan)
        actions: list[tuple[str, int, float]] = []
        airflow = self.stage.airflow
        limit = bound(plan)
        try:
            for fault in plan.faults:  # armed before the run starts
                if fault.at == 0.0:
                    self.injector.apply(plan, fault, actions)
            self._trigger(plan)
            start = time.monotonic()
            threads = []
            for fault in plan.faults:
                if fault.at == 0.0:
                    continue
                if not self._until(plan, start + fault.at):
                    if fault.kind != "clear":
                        fault.result = "missed: the run was over"
                        continue
                    time.sleep(max(0.0, start + fault.at - time.monotonic()))  # a user clears it then
                thread = threading.Thread(
                    target=self.injector.apply,
                    args=(plan, fault, actions),
                    name=f"fault-{plan.seed}",
                    daemon=True,
                )
                thread.start()
                threads.append(thread)
            for thread in threads:
                thread.join(max(1.0, start + limit - time.monotonic()))
            try:
                airflow._snapshots.wait(
                    lambda: self._over(plan),
                    f"run {plan.run_id}",
                    max(1.0, start + limit - time.monotonic()),
                )
                ended = True
            except ConditionTimeout:
                ended = False
            outcome.seconds = round(time.monotonic() - start, 1)
            # the state from the API, not the snapshot (a clear may have reopened it meanwhile)
            outcome.state = self._run_state(plan)
            finished = all(s in FINISHED_RUN_STATES for s in outcome.state.split("+"))
            outcome.verdict.check(
                ended and finished,
                f"the run did not end within its bound of {limit:.0f}s (it is {outcome.state}; "
                f"tasks {self._tis(plan)})",
            )
            if not ended:
                self._give_up(plan)
            tis = self._settle(plan, actions, outcome)
            if plan.pair:
                assert self.stage.slurm_records is not None and self.stage.slurm is not None
                check_slurm_pair(
                    plan,
                    self.stage.slurm_records,
                    self.stage.slurm.tag,
                    tis,
                    self._pair_reports(plan),
                    actions,
                    outcome.verdict,
                )
                return outcome
            final = {int(t["map_index"]): t for t in tis[plan.dag_id]}
            if plan.platform == "slurm":
                assert self.stage.slurm_records is not None and self.stage.slurm is not None
                check_slurm_run(
                    plan, self.stage.slurm_records, self.stage.slurm.tag, final, actions, outcome.verdict
                )
            else:
                check_gke_run(plan, self.stage.records, final, actions, outcome.verdict)
        except Exception as err:  # the harness itself failed: reported, never counted as a pass
            outcome.error = f"{type(err).__name__}: {err}"
            outcome.verdict.check(False, f"soak error: {outcome.error}\n{traceback.format_exc(limit=6)}")
        return outcome

    def _pair_reports(self, plan: RunPlan) -> dict[str, dict[str, Any]]:
        """What each DAG's service pushed (``job_id``, ``worker_array_job_id``) and its teardown
        returned (``stop``)."""
        airflow = self.stage.airflow
        return {
            dag: {
                "job_id": airflow.xcom(dag, plan.run_id, "service", "job_id"),
                "worker_array_job_id": airflow.xcom(dag, plan.run_id, "service", "worker_array_job_id"),
                "stop": airflow.xcom(dag, plan.run_id, "stop"),
            }
            for dag in plan.pair
        }

    def _until(self, plan: RunPlan, moment: float) -> bool:
        """Wait until ``moment``; False (at once) if the run ended first."""
        while time.monotonic() < moment:
            if self._over(plan):
                return False
            time.sleep(min(1.0, max(0.0, moment - time.monotonic())))
        return True

    def _tis(self, plan: RunPlan) -> list[tuple[Any, ...]]:
        found = []
        for dag in plan.dag_ids:
            try:
                tis = self.stage.airflow.task_instances(dag, plan.run_id)
            except AirflowApiError:
                continue
            found += [(t["dag_id"], t["task_id"], t["map_index"], t["state"], t["try_number"]) for t in tis]
        return found

    def _give_up(self, plan: RunPlan) -> None:
        """Fail a run that overran its bound, as a user would, so that its jobs are let go."""
        try:
            for dag in plan.dag_ids:
                for ti in self.stage.airflow.task_instances(dag, plan.run_id):
                    if ti["state"] not in ("success", "failed", "skipped", "upstream_failed", "removed"):
                        self.stage.airflow.mark_task_failed(dag, plan.run_id, ti["task_id"], ti["map_index"])
        except (AirflowApiError, ConditionTimeout, AssertionError):
            pass

    def _settle(
        self, plan: RunPlan, actions: list[tuple[str, int, float]], outcome: Outcome
    ) -> dict[str, list[dict[str, Any]]]:
        """Each DAG's task instances once the run ended; waits (at most ``SETTLE``: longer than the
        GKE sweep's period) for the jobs of ended tasks to go, as the invariants expect, and counts
        those that went meanwhile."""
        deadline = time.monotonic() + SETTLE
        tis: dict[str, list[dict[str, Any]]] = {}
        first: int | None = None
        while True:
            tis = {dag: self.stage.airflow.task_instances(dag, plan.run_id) for dag in plan.dag_ids}
            left = len(self._left(plan, tis, actions))
            first = left if first is None else first
            if time.monotonic() > deadline or not left:
                outcome.late_jobs = first - left
                break
            time.sleep(2)
        return tis

    def _left(
        self, plan: RunPlan, tis: dict[str, list[dict[str, Any]]], actions: list[tuple[str, int, float]]
    ) -> list[Any]:
        """The jobs of ended task instances still active that their task does not leave by design."""
        if plan.platform == "slurm":
            records, cluster = self.stage.slurm_records, self.stage.slurm
            assert records is not None and cluster is not None
            records.poll()
            left: list[Any] = []
            for dag in plan.dag_ids:
                if plan.pair:
                    services, arrays = pair_jobs(plan, records, cluster.tag, dag)
                    left += [j for j in services + arrays if j.active]
                name = slurm_job_name(dag, plan.run_id, cluster.tag)
                for ti in tis[dag]:
                    if ti["task_id"] != "train":
                        continue
                    index = int(ti["map_index"])
                    kinds = {k for k, i, _ in actions if i in (index, -1)}
                    if not plan.pair and slurm_kept_by_design(plan, str(ti["state"]), kinds):
                        continue
                    marker = records.marker(dag, "train", plan.run_id, index)
                    left += [j for j in records.jobs_of(name, marker) if j.active]
            return left
        kube = self.stage.records
        return [
            j
            for ti in tis[plan.dag_id]
            for j in kube.jobs_of(plan.dag_id, plan.run_id, None if ti["map_index"] < 0 else ti["map_index"])
            if kube.active(j) and not kept_by_design(plan, str(ti["state"]))
        ]

    # ---- many runs -----------------------------------------------------------------------------

    def soak(self, seed: int, runs: int, minutes: float, seeds: list[int] | None = None) -> list[Outcome]:
        """``runs`` runs drawn from ``seed`` (or the runs of ``seeds``, each drawn from its own)."""
        seeds = seeds if seeds is not None else run_seeds(seed, runs)
        for platform in self.platforms:
            self._dag_ready(SWEEP_DAGS[platform])
        deadline = time.monotonic() + minutes * 60
        pending: dict[Future[Outcome], RunPlan] = {}
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="soak-run") as pool:
            queue = list(enumerate(seeds))
            while queue or pending:
                while queue and len(pending) < self.concurrency and time.monotonic() < deadline:
                    index, run_seed = queue.pop(0)
                    plan = draw(run_seed, index, self.platforms)
                    self.say(f"start {plan.describe()}")
                    pending[pool.submit(self.run, plan)] = plan
                    time.sleep(random.Random(run_seed).uniform(0.5, 3))  # staggered starts
                if time.monotonic() >= deadline:
                    queue.clear()
                if not pending:
                    break
                done, _ = wait(list(pending), timeout=5, return_when=FIRST_COMPLETED)
                for future in done:
                    plan = pending.pop(future)
                    outcome = future.result()
                    self.outcomes.append(outcome)
                    self.report(outcome)
        return self.outcomes

    def report(self, outcome: Outcome) -> None:
        plan, verdict = outcome.plan, outcome.verdict
        faults = sum(f.result.startswith("done") for f in plan.faults)
        line = (
            f"end run {plan.index} seed {plan.seed} {' + '.join(plan.dag_ids)}: {outcome.state} "
            f"after {outcome.seconds}s, "
            f"{faults}/{len(plan.faults)} faults, {verdict.checks} checks, "
            f"{len(verdict.violations)} violations"
        )
        line += "".join(f"\n    {f.describe()}" for f in plan.faults)
        if verdict.violations:
            line += "\n" + violation_report(outcome)
        self.say(line)


def violation_report(outcome: Outcome) -> str:
    plan = outcome.plan
    lines = ["VIOLATION " + plan.describe()]
    lines += [f"  ! {v}" for v in outcome.verdict.violations]
    lines.append(f"  replay: SOAK_SEED={plan.seed} SOAK_RUNS=1 make soak")
    return "\n".join(lines)


def summary(outcomes: list[Outcome], injected: int, seed: int) -> tuple[str, int]:
    checks = sum(o.verdict.checks for o in outcomes)
    violations = sum(len(o.verdict.violations) for o in outcomes)
    late = sum(o.late_jobs for o in outcomes)
    return (
        f"soak: {len(outcomes)} runs, {injected} faults, {checks} invariant checks, "
        f"{violations} violations, {late} jobs ended after their run (seed {seed})",
        violations,
    )


def main_loop(
    stage: SoakStage, *, seed: int, runs: int, minutes: float, concurrency: int, platforms: tuple[str, ...]
) -> int:
    soak = Soak(stage, concurrency=concurrency, platforms=platforms)
    outcomes = soak.soak(seed, runs, minutes)
    failed = [o for o in outcomes if o.verdict.violations]
    if failed:
        print("\n==== violations (each replays with its seed)", flush=True)
        for outcome in failed:
            print(violation_report(outcome), flush=True)
    line, violations = summary(outcomes, soak.injector.injected, seed)
    sys.stdout.flush()
    print(line, flush=True)
    return 1 if violations else 0
