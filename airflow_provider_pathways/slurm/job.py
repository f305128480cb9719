"""One Slurm job (or array task) as the cluster reports it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from airflow_provider_pathways.outcomes import known_fields
from airflow_provider_pathways.slurm.states import REQUEUE_FLAGS, TERMINAL_STATES

#: Fields added after 0.1.0: a job's dict (trigger events, XCom) leaves them out when unset.
_ADDED_AFTER_0_1_0 = frozenset({"user"})


@dataclass(frozen=True)
class SlurmJob:
    """One Slurm job (or one array task) as the cluster reports it.

    ``exit_code``/``exit_signal`` are only set for ended jobs, ``start_time`` only once the job
    started (not Slurm's expected start of a pending job) and ``end_time`` only for ended jobs.
    Tasks of an array that Slurm has not started yet share the array's record: their ``job_id`` is
    that record's id until they get their own.
    """

    job_id: int
    name: str
    state: str
    flags: frozenset[str] = frozenset()
    reason: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    restarts: int = 0
    array_job_id: int | None = None
    array_task_id: int | None = None
    node_list: str | None = None
    start_time: datetime | None = None
    submit_time: datetime | None = None
    end_time: datetime | None = None
    comment: str | None = None
    std_out: str | None = None
    work_dir: str | None = None
    partition: str | None = None
    #: The user the job runs as (None when the record does not say).
    user: str | None = None
    #: Who reported the job: ``slurmctld`` (it still knows the job) or ``accounting`` (slurmdbd,
    #: after slurmctld forgot the finished job, MinJobAge later).
    source: str = "slurmctld"

    @property
    def terminal(self) -> bool:
        """The job ended and will not run again."""
        return self.state in TERMINAL_STATES

    @property
    def active(self) -> bool:
        """The job is queued, running or finishing."""
        return not self.terminal

    @property
    def requeued(self) -> bool:
        """The job was put back into the queue (preemption, node failure, ``scontrol requeue``)
        and has not started again yet."""
        if self.terminal:
            return False
        return bool(self.flags & REQUEUE_FLAGS) or (self.state == "PENDING" and self.restarts > 0)

    @property
    def display_id(self) -> str:
        """``12_3`` for an array task, else ``12``."""
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.job_id)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (datetimes as ISO 8601 strings, flags as a sorted list)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, frozenset):
                value = sorted(value)
            elif value is None and f.name in _ADDED_AFTER_0_1_0:
                continue  # left out when unknown, as 0.1.0 wrote the job
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SlurmJob:
        """Inverse of :meth:`to_dict`; unknown keys are ignored."""
        values = known_fields(cls, data)
        for key in ("start_time", "submit_time", "end_time"):
            if isinstance(values.get(key), str):
                values[key] = datetime.fromisoformat(values[key])
        values["flags"] = frozenset(values.get("flags") or ())
        return cls(**values)


#: What a submitted job's ``--comment`` starts with: the task instance that submitted it.
TASK_INSTANCE_MARKER = "airflow-task-instance="


def task_instance_marker(dag_id: str, task_id: str, run_id: str, map_index: int | None) -> str:
    """The ``--comment`` every job a task instance submits carries (a digest: run ids are long, and
    comments are shown to everyone on the cluster), so that a later try finds a job whose
    submission answer never reached the try that submitted it."""
    identity = "\0".join((dag_id, task_id, run_id, str(-1 if map_index is None else map_index)))
    return TASK_INSTANCE_MARKER + hashlib.sha256(identity.encode()).hexdigest()[:24]


def is_marked(comment: str | None, marker: str) -> bool:
    """Whether a job's comment names the task instance of ``marker`` (with or without a try)."""
    return comment is not None and (comment == marker or comment.startswith(marker + " "))


def following_comment(marker: str, try_number: int) -> str:
    """The comment of a job that try ``try_number`` of the marker's task instance follows: an older
    try of it (superseded, then killed) leaves the job alone."""
    return f"{marker} try={try_number}"


def followed_by_try(comment: str | None, marker: str) -> int | None:
    """The try of the marker's task instance that follows the job, from its comment; None when no
    try marked it."""
    if not is_marked(comment, marker):
        return None
    _, _, rest = (comment or "").partition(" try=")
    return int(rest) if rest.isdigit() else None


def expand_task_ids(task_string: str) -> list[int]:
    """Task ids of an array expression such as ``0-7``, ``1,3,5-9:2`` or ``2-3%2``."""
    spec = task_string.split("%", 1)[0].strip()
    ids: list[int] = []
    if not spec:
        return ids
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        step = 1
        if ":" in part:
            part, step_text = part.split(":", 1)
            step = int(step_text)
        if "-" in part:
            first, last = (int(x) for x in part.split("-", 1))
            ids.extend(range(first, last + 1, max(step, 1)))
        else:
            ids.append(int(part))
    return ids
