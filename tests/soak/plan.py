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

from tests.soak.dags import soak_gke, soak_slurm

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
    "evict",  # Kueue evicts the job's workload, Preempted or PodsReadyTimeout (kueue variant only)
    "clear",  # the user clears the task instance
    "mark_failed",  # the user marks the task instance failed
    "mark_success",  # the user marks the task instance success
)
#: The Slurm faults. Not drawn: ``suspend`` and ``evict`` (no Kueue; a suspended Slurm job keeps its
#: program, SIGSTOPped).
SLURM_FAULTS = (
    "worker_kill",  # SIGKILL the polling task's worker (and its supervisor)
    "triggerer_kill",  # SIGKILL the triggerer running the deferred task's trigger; started again
    "triggerer_stop",  # SIGSTOP that triggerer for a while, then SIGCONT
    "outage",  # the gate of the run's transport (slurmrestd or sshd) is closed for a while
    # the answer to the run's first submission through slurmrestd is lost (the relay of
    # tests/support/lost_answer.py, by the run's job names; armed before the run starts); REST runs only
    "lost_answer",
    "preempt",  # ``scontrol requeue`` of the running job, as a preemption in REQUEUE mode does
    "fail_program",  # the running program exits 1, or kills itself with SIGTERM
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
    #: the task it meets, and its DAG ("": the run's own; the two-DAG shapes name one of theirs)
    task: str = "train"
    dag: str = ""

    def describe(self) -> str:
        index = f"[{self.map_index}]" if self.map_index >= 0 else ""
        lasting = f" for {self.seconds:.0f}s" if self.seconds else ""
        result = f" -> {self.result}" if self.result else ""
        where = f" {self.dag}.{self.task}" if self.dag else ""
        return f"t+{self.at:5.1f}s {self.kind}{index}{where}{lasting}{result}"


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
    #: Slurm: ``rest`` or ``ssh``, the connection (and so the gate) of the run
    transport: str = ""
    #: the two DAGs of a shape whose services share one Slurm user (run together, same run id)
    pair: list[str] = field(default_factory=list)

    @property
    def dag_ids(self) -> list[str]:
        return list(self.pair) or [self.dag_id]

    @property
    def map_indexes(self) -> list[int]:
        return list(range(soak_gke.MAPPED)) if self.mapped else [-1]

    @property
    def run_id(self) -> str:
        return f"soak-{self.seed}"

    def describe(self) -> str:
        conf = {k: v for k, v in self.conf.items() if k not in ("workdir", "scripts")}
        shape = f"{' + '.join(self.dag_ids)} conf={conf}"
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
    horizon = 15 + program_seconds + (int(admit_after) if variant == "kueue" else 0)
    return schedule_faults(rng, plan, GKE_FAULTS, earliest=6, latest=horizon + 10)


#: Faults of the two-DAG shape: the task's worker or triggerer killed, the user's mark failed and
#: clear, on the service or the workload of either DAG
PAIR_FAULTS = ("kill", "mark_failed", "clear")
#: one Slurm run in this many is of the two-DAG shape
PAIR_ODDS = 5


def draw_slurm(seed: int, index: int) -> RunPlan:
    rng = random.Random(seed)
    if rng.randrange(PAIR_ODDS) == 0:
        return draw_slurm_pair(rng, seed, index)
    transport, mode, retries, variant, mapped = rng.choice(soak_slurm.shapes())
    program_seconds = rng.choice((5, 10, 15, 25, 40))
    exit_code = 1 if rng.random() < 0.15 else 0
    plan = RunPlan(
        seed=seed,
        index=index,
        platform="slurm",
        dag_id=soak_slurm.dag_id(transport, mode, retries, variant, mapped),
        mode=mode,
        retries=retries,
        wait="finished",
        variant=variant,
        mapped=mapped,
        conf={"program_seconds": program_seconds, "exit_code": exit_code},
        transport=transport,
    )
    # a Slurm job of the sandbox starts within seconds of the trigger (no image, no slices)
    horizon = 3 + program_seconds
    return schedule_faults(rng, plan, SLURM_FAULTS, earliest=3, latest=horizon + 5)


def schedule_faults(
    rng: random.Random, plan: RunPlan, faults: tuple[str, ...], *, earliest: float, latest: float
) -> RunPlan:
    """Draw 0 to 3 of the ``faults`` that apply to ``plan``, each at a moment between ``earliest``
    and ``latest`` seconds (a lost answer at 0: it is armed before the run), on one of its map
    indexes, lasting faults for a drawn while."""
    kinds = [k for k in faults if applicable(k, plan)]
    for _ in range(rng.choice((0, 1, 1, 2, 2, 3))):
        kind = rng.choice(kinds)
        at = 0.0 if kind == "lost_answer" else round(rng.uniform(earliest, latest), 1)
        low, high = LASTING.get(kind, (0, 0))
        seconds = float(rng.randint(low, high)) if high else 0.0
        target = rng.choice(plan.map_indexes)
        plan.faults.append(Fault(kind, at, target, seconds))
    plan.faults.sort(key=lambda f: f.at)
    return plan


def draw_slurm_pair(rng: random.Random, seed: int, index: int) -> RunPlan:
    variant, mode = rng.choice(soak_slurm.pair_shapes())
    program_seconds = rng.choice((10, 15, 25, 40))
    dags = soak_slurm.pair_dag_ids(variant, mode)
    plan = RunPlan(
        seed=seed,
        index=index,
        platform="slurm",
        dag_id=dags[0],
        mode=mode,
        retries="budget",
        wait="finished",
        variant=f"pair_{variant}",
        mapped=False,
        conf={"program_seconds": program_seconds, "exit_code": 0},
        transport=soak_slurm.PAIR_MODES[mode],
        pair=dags,
    )
    kill = "worker_kill" if mode == "polling" else "triggerer_kill"
    for _ in range(rng.choice((1, 2, 2, 3))):
        kind = rng.choice(PAIR_FAULTS)
        task = rng.choice(("service", "service", "train"))
        at = round(rng.uniform(1, 6) if task == "service" else rng.uniform(4, program_seconds + 10), 1)
        fault = Fault(kill if kind == "kill" else kind, at, -1, 0.0, task=task, dag=rng.choice(dags))
        plan.faults.append(fault)
    plan.faults.sort(key=lambda f: f.at)
    return plan


def applicable(kind: str, plan: RunPlan) -> bool:
    if kind == "worker_kill":
        return plan.mode == "polling"
    if kind in ("triggerer_kill", "triggerer_stop"):
        return plan.mode == "deferrable" and plan.wait != "created"
    if kind == "evict":
        return plan.variant == "kueue"
    if kind == "lost_answer" and plan.platform == "slurm":
        return plan.transport == "rest"
    return True


def draw(seed: int, index: int, platforms: tuple[str, ...] = ("gke",)) -> RunPlan:
    platform = random.Random(seed ^ 0x5EED).choice(platforms)
    if platform == "gke":
        return draw_gke(seed, index)
    if platform == "slurm":
        return draw_slurm(seed, index)
    raise ValueError(f"no such platform {platform!r} (SOAK_PLATFORMS: gke, slurm)")
