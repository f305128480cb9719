"""The soak's random draws: a DAG run's shape and the faults that meet it, all from one seed.

A run's seed gives its shape (which soak DAG, and the conf of the run) and its fault schedule (each
fault a kind, a moment in seconds after the run was triggered, a target map index and, for faults
that last, a duration). The soak's seed gives every run's seed: run 0 has the soak's seed itself,
so ``SOAK_SEED=<a run's seed> SOAK_RUNS=1`` replays that run alone with the same schedule.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from tests.soak.dags import soak_gke

#: Faults and what they need of a shape. Moments are seconds after the run was triggered.
GKE_FAULTS = (
    "worker_kill",  # SIGKILL the polling task's worker (and its supervisor)
    "triggerer_kill",  # SIGKILL the triggerer running the deferred task's trigger; started again
    "triggerer_stop",  # SIGSTOP that triggerer for a while, then SIGCONT
    "outage",  # the GKE stand-in's gate is closed for a while (every gated client of it)
    "lost_answer",  # the answer to the task's first job creation is lost (armed before the run starts)
    "preempt",  # a slice of the running job is preempted
    "fail_program",  # the running program exits 1
    "suspend",  # the running JobSet is suspended
    "evict",  # Kueue evicts the job's workload (kueue variant only)
    "clear",  # the user clears the task instance
    "mark_failed",  # the user marks the task instance failed
    "mark_success",  # the user marks the task instance success
)
#: Faults that hold a service (one of each at a time, whichever run drew it).
LASTING = {"triggerer_stop": (4, 40), "outage": (4, 45)}


@dataclass
class Fault:
    kind: str
    at: float
    map_index: int = -1
    seconds: float = 0.0
    #: after the run: what became of it ("done ...", "missed: ...")
    result: str = ""

    def describe(self) -> str:
        index = f"[{self.map_index}]" if self.map_index >= 0 else ""
        lasting = f" for {self.seconds:.0f}s" if self.seconds else ""
        result = f" -> {self.result}" if self.result else ""
        return f"t+{self.at:5.1f}s {self.kind}{index}{lasting}{result}"


@dataclass
class RunPlan:
    seed: int
    index: int
    platform: str
    dag_id: str
    mode: str
    retries: str
    wait: str
    variant: str
    mapped: bool
    conf: dict[str, Any]
    faults: list[Fault] = field(default_factory=list)

    @property
    def map_indexes(self) -> list[int]:
        return list(range(soak_gke.MAPPED)) if self.mapped else [-1]

    @property
    def run_id(self) -> str:
        return f"soak-{self.seed}"

    def describe(self) -> str:
        conf = {k: v for k, v in self.conf.items() if k not in ("workdir", "scripts")}
        shape = f"{self.dag_id} conf={conf}"
        faults = "\n".join(f"    {f.describe()}" for f in self.faults) or "    (no faults)"
        return f"run {self.index} seed {self.seed}: {shape}\n  faults:\n{faults}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_seeds(seed: int, runs: int) -> list[int]:
    """The seeds of runs 0..runs-1: the first is ``seed`` itself."""
    rng = random.Random(seed)
    return [seed] + [rng.randrange(1, 2**31) for _ in range(runs - 1)]


def draw_gke(seed: int, index: int) -> RunPlan:
    rng = random.Random(seed)
    mode, retries, wait, variant, mapped = rng.choice(soak_gke.shapes())
    program_seconds = rng.choice((5, 10, 15, 25, 40))
    exit_code = 1 if rng.random() < 0.15 else 0
    admit_after = str(rng.choice((0, 3, 10, 30, 70))) if variant == "kueue" else "0"
    plan = RunPlan(
        seed=seed,
        index=index,
        platform="gke",
        dag_id=soak_gke.dag_id(mode, retries, wait, variant, mapped),
        mode=mode,
        retries=retries,
        wait=wait,
        variant=variant,
        mapped=mapped,
        conf={"program_seconds": program_seconds, "exit_code": exit_code, "admit_after": admit_after},
    )
    kinds = [k for k in GKE_FAULTS if applicable(k, plan)]
    count = rng.choice((0, 1, 1, 2, 2, 3))
    horizon = 15 + program_seconds + (int(admit_after) if variant == "kueue" else 0)
    for _ in range(count):
        kind = rng.choice(kinds)
        at = 0.0 if kind == "lost_answer" else round(rng.uniform(6, horizon + 10), 1)
        low, high = LASTING.get(kind, (0, 0))
        seconds = float(rng.randint(low, high)) if high else 0.0
        target = rng.choice(plan.map_indexes)
        plan.faults.append(Fault(kind, at, target, seconds))
    plan.faults.sort(key=lambda f: f.at)
    return plan


def applicable(kind: str, plan: RunPlan) -> bool:
    if kind == "worker_kill":
        return plan.mode == "polling"
    if kind in ("triggerer_kill", "triggerer_stop"):
        return plan.mode == "deferrable" and plan.wait != "created"
    if kind == "evict":
        return plan.variant == "kueue"
    return True


def draw(seed: int, index: int, platforms: tuple[str, ...] = ("gke",)) -> RunPlan:
    platform = random.Random(seed ^ 0x5EED).choice(platforms)
    if platform != "gke":
        raise ValueError(f"the soak draws GKE shapes only so far, not {platform!r} (SOAK_PLATFORMS=gke)")
    return draw_gke(seed, index)
