"""Which of the provider's jobs no task instance follows any more, and the report of a sweep.

Every job the provider submits carries its task instance (GKE: the ``airflow.apache.org/
task-instance`` annotation; Slurm: the marker in the job's comment) and the task instance states in
which its task leaves it running on purpose (:func:`left_running_when`). A sweep lists the jobs
that are still active, reads their task instances' states, and ends a job only when no try of its
task instance follows it, or will (:data:`~airflow_provider_pathways.task_instance_state.A_TRY_FOLLOWS`,
or no state: cleared, a try is to come), and its task would not have left it running in that state.
It closes what no try can: a deferred task instance marked failed before any triggerer ran its
trigger (Airflow deletes the trigger unrun), a worker lost after its last try, a DAG run deleted
while its job ran. A job whose task instance is not found is ended only when its DAG has runs in
this deployment: a namespace or Slurm user that two Airflow deployments share holds jobs of DAGs
the other one runs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, replace
from enum import Enum

from airflow_provider_pathways.provider_info import DEPLOYMENT_OPTION, DEPLOYMENT_SECTION
from airflow_provider_pathways.task_instance_state import A_TRY_FOLLOWS, NOT_FOUND, TaskInstanceKey

#: A deployment's name: one word a Slurm comment and a Kubernetes annotation carry as it is.
_DEPLOYMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def deployment_name() -> str:
    """This Airflow deployment's ``[pathways] deployment_name`` (``AIRFLOW__PATHWAYS__DEPLOYMENT_NAME``),
    which every job it submits carries and a sweep compares; "" when unset. ValueError naming the
    option when it is not one word of letters, digits, ``.``, ``_`` and ``-`` (63 at most)."""
    from airflow.providers.common.compat.sdk import conf

    name = str(conf.get(DEPLOYMENT_SECTION, DEPLOYMENT_OPTION, fallback="") or "").strip()
    if name and not _DEPLOYMENT_NAME.fullmatch(name):
        raise ValueError(
            f"[{DEPLOYMENT_SECTION}] {DEPLOYMENT_OPTION}: {name!r} is not one word of letters, digits, "
            "'.', '_' and '-' (at most 63, starting with a letter or digit); rename the deployment"
        )
    return name


#: The states a user's kill leaves (mark failed, success, skipped).
KILLED_STATES = frozenset({"failed", "success", "skipped"})


def left_running_when(*, hands_on: bool, ends_on_kill: bool, ends_on_failure: bool) -> frozenset[str]:
    """The task instance states in which the task leaves its job running on purpose: ``success``
    when it hands the job on once ready or created (``wait_until``, a Slurm service); what a kill
    leaves when a kill keeps the job; ``failed`` when a failed job is kept."""
    states: set[str] = set()
    if hands_on:
        states.add("success")
    if not ends_on_kill:
        states |= KILLED_STATES
    if not ends_on_failure:
        states.add("failed")
    return frozenset(states)


def format_states(states: Collection[str]) -> str:
    """``states`` as the job carries them: sorted, comma-separated (empty: none)."""
    return ",".join(sorted(states))


def parse_states(text: str | None) -> frozenset[str] | None:
    """The states of :func:`format_states`; None when the job carries none (an older provider)."""
    if text is None:
        return None
    return frozenset(word for word in text.split(",") if word)


class Verdict(str, Enum):
    """What a sweep does with one active job."""

    END = "end"
    KEEP = "keep"


def judge(
    state: str | None,
    left_running: frozenset[str] | None,
    dag_has_runs: bool = True,
    deployments: tuple[str, str] = ("", ""),
) -> tuple[Verdict, str]:
    """Whether a sweep ends an active job whose task instance is in ``state`` (None: cleared;
    :data:`NOT_FOUND`: gone), and why. ``deployments``: the job's deployment name and this
    deployment's (:func:`deployment_name`); another deployment's job is kept, whatever a task
    instance of the same name here says. A task instance not found whose DAG has no run in this
    deployment (``dag_has_runs`` False) may be another unnamed deployment's: its job is kept."""
    theirs, ours = deployments
    if theirs != ours:
        return Verdict.KEEP, (
            f"it is another Airflow deployment's ({theirs or 'unnamed'}; this one is {ours or 'unnamed'})"
        )
    if state == NOT_FOUND and not dag_has_runs:
        return Verdict.KEEP, "its DAG has no run here (another Airflow deployment's job?): end it by hand"
    if state == NOT_FOUND:
        return Verdict.END, "its task instance no longer exists"
    if state is None:
        return Verdict.KEEP, "its task instance was cleared: the next try takes the job over"
    if state in A_TRY_FOLLOWS:
        return Verdict.KEEP, f"its task instance is {state}: a try follows the job"
    if left_running is None:
        return Verdict.KEEP, "it names no policy (submitted by an older provider version): end it by hand"
    if state in left_running:
        return Verdict.KEEP, f"its task leaves it running when {state}"
    return Verdict.END, f"its task instance is {state} and no try follows the job"


@dataclass(frozen=True)
class SweptJob:
    """One active job a sweep looked at, and what became of it."""

    #: ``GKE`` or ``Slurm``.
    platform: str
    #: The job as its platform names it (``PathwaysJob ns/name``, ``Slurm job 42``).
    job: str
    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    #: The task instance's state when the sweep read it (``not found``, or None: cleared).
    state: str | None
    verdict: str
    reason: str
    #: ``ended``, ``would end`` (dry run), ``kept``, ``gone`` or ``changed`` (left for the next sweep).
    outcome: str

    @classmethod
    def judged(
        cls,
        platform: str,
        job: str,
        key: TaskInstanceKey,
        state: str | None,
        left_running: frozenset[str] | None,
        dag_has_runs: bool = True,
        deployments: tuple[str, str] = ("", ""),
    ) -> SweptJob:
        """The job judged, not yet acted on (outcome ``kept`` or ``would end``)."""
        verdict, reason = judge(state, left_running, dag_has_runs, deployments)
        dag_id, task_id, run_id, map_index = key
        outcome = "would end" if verdict is Verdict.END else "kept"
        return cls(platform, job, dag_id, task_id, run_id, map_index, state, verdict.value, reason, outcome)

    def with_outcome(self, outcome: str) -> SweptJob:
        return replace(self, outcome=outcome)

    @property
    def task_instance(self) -> str:
        index = f"[{self.map_index}]" if self.map_index >= 0 else ""
        return f"{self.dag_id}.{self.task_id}{index} {self.run_id}"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


#: Outcomes of a sweep, as ``SweptJob.outcome`` names them.
ENDED, WOULD_END, KEPT, GONE, CHANGED = "ended", "would end", "kept", "gone", "changed"


def report(jobs: Iterable[SweptJob]) -> str:
    """The sweep as a table (one line per job) and a count per outcome."""
    rows = list(jobs)
    if not rows:
        return "No active job of this provider found."
    header = ("OUTCOME", "JOB", "TASK INSTANCE", "STATE", "WHY")
    table = [header] + [
        (row.outcome, row.job, row.task_instance, row.state or "none", row.reason) for row in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    lines = [
        "  ".join([*(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True)), line[-1]])
        for line in table
    ]
    counts = Counter(row.outcome for row in rows)
    lines.append(", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())))
    return "\n".join(lines)
