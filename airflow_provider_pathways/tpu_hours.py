"""How long a job waited and ran, and the TPU-hours its tries held, in the terms every backend
shares (no Airflow here).

A :class:`Timeline` keeps the moments a try saw its job reach a milestone (epoch seconds): submitted
(the job's own creation time), running (admitted and placed: no longer queued or pending), ready
(``min_slices`` slices and the head ready) and ended. :func:`tpu_hours` turns the tries' records
(:class:`TryUsage`) into TPU-hours by the rules in its docstring.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from itertools import pairwise
from typing import Any

from airflow_provider_pathways.reattach_rules import known_fields

#: The XCom key (and ``task_state_store`` key) of a task's tries' TPU-hours.
TPU_HOURS_KEY = "tpu_hours"
#: The milestones of a job, in the order it reaches them (after ``submitted``).
MILESTONES = ("running", "ready", "ended")
SECONDS_PER_HOUR = 3600.0
#: The changes of the ready-slice count a timeline keeps (the first ones: a job that flaps for
#: days does not grow a trigger event or an XCom without bound).
MAX_SLICE_CHANGES = 200

#: Seconds: Kubernetes records condition times in whole seconds (``metav1.Time``, RFC 3339).
RECORD_PRECISION = 1.0

#: (epoch seconds, slices ready from then on)
SliceCount = tuple[float, int]


def slice_changes(data: Any) -> tuple[SliceCount, ...]:
    """The ``slices_ready`` series of a payload; anything unreadable is left out."""
    if not isinstance(data, list | tuple):
        return ()
    changes = []
    for item in data:
        if isinstance(item, list | tuple) and len(item) == 2:
            at, count = item
            if isinstance(at, int | float) and isinstance(count, int):
                changes.append((float(at), count))
    return tuple(changes)


@dataclass
class Timeline:
    """When a try saw its job submitted, running, ready and ended (epoch seconds; None: not seen)."""

    submitted: float | None = None
    running: float | None = None
    ready: float | None = None
    ended: float | None = None
    #: The job waits for admission (Kueue) before it runs: its submission is not its start.
    admitted_later: bool = False
    #: Each change of the number of slices ready, as this try saw it.
    slices_ready: tuple[SliceCount, ...] = ()

    def observe(
        self,
        *,
        now: float,
        running: bool,
        ready: bool,
        ended: bool,
        submitted: float | None = None,
        admitted_later: bool = False,
        slices_ready: int | None = None,
        recorded: Mapping[str, float | None] | None = None,
        slices_total: int | None = None,
    ) -> tuple[str, ...]:
        """Record the milestones first reached at ``now`` (a ready job is running; an ended one is
        past running only if it was seen running or its record says it ran) and a changed count of
        ready slices; the names of the milestones newly reached.

        ``recorded`` holds the moments the job's own records give for milestones (the cluster's
        clock, whoever watched; whole seconds, rounded down): a recorded moment counts as reached,
        and replaces the moment seen when that is :data:`RECORD_PRECISION` or more later (no one
        was watching then); within it, the moment seen is the finer one. A readiness known only
        from the record (never seen) adds its step to ``slices_total`` to the slice series. The
        milestones stay in order (:meth:`_keep_order`)."""
        if self.submitted is None and submitted is not None:
            self.submitted = submitted
        records = {name: at for name, at in (recorded or {}).items() if name in MILESTONES and at is not None}
        if "ready" in records:  # a ready job is running
            records["running"] = min(records.get("running", records["ready"]), records["ready"])
        ready_unseen = self.ready is None and not ready and "ready" in records
        if ready_unseen and slices_total and len(self.slices_ready) < MAX_SLICE_CHANGES:
            self.slices_ready = tuple(sorted({*self.slices_ready, (records["ready"], slices_total)}))
        last = self.slices_ready[-1][1] if self.slices_ready else None
        if slices_ready is not None and slices_ready != last and len(self.slices_ready) < MAX_SLICE_CHANGES:
            self.slices_ready = (*self.slices_ready, (now, slices_ready))
        self.admitted_later = self.admitted_later or admitted_later
        reached = {"running": running or ready, "ready": ready, "ended": ended}
        new = []
        for name in MILESTONES:
            current = getattr(self, name)
            seen = current if current is not None else now if reached[name] else None
            record = records.get(name)
            at = (
                record if record is not None and (seen is None or seen - record >= RECORD_PRECISION) else seen
            )
            if at is None:
                continue
            if current is None:
                new.append(name)
            setattr(self, name, at)
        self._keep_order()
        return tuple(new)

    def _keep_order(self) -> None:
        """Keep running <= ready <= ended. Of two milestones out of order, a later one recorded
        less than :data:`RECORD_PRECISION` before the earlier one was rounded down past it: it is
        raised to it (a job that ended in the second it was seen ready ended after that); further
        apart, the earlier one was seen late: it is lowered to the later one."""
        for _ in MILESTONES:  # a lowering can move the pair before it out of order
            known = [name for name in MILESTONES if getattr(self, name) is not None]
            moved = False
            for first, then in pairwise(known):
                before, after = getattr(self, first), getattr(self, then)
                if after >= before:
                    continue
                moved = True
                if before - after < RECORD_PRECISION:
                    setattr(self, then, before)
                else:
                    setattr(self, first, after)
            if not moved:
                return

    @property
    def started(self) -> float | None:
        """When the job started holding its chips: first seen running; for a job that ended before
        anyone saw it running and that no queue admits, its submission (it runs from creation)."""
        if self.running is not None:
            return self.running
        if self.ended is not None and not self.admitted_later:
            return self.submitted
        return None

    def since_submitted(self, milestone: str) -> float | None:
        """Seconds from submission to ``milestone``; None when either is unknown."""
        at = getattr(self, milestone)
        if at is None or self.submitted is None:
            return None
        return max(0.0, at - self.submitted)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "slices_ready": [list(change) for change in self.slices_ready]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Timeline:
        """Inverse of :meth:`to_dict`; an absent or unreadable payload is an empty timeline."""
        if not isinstance(data, Mapping):
            return cls()
        values: dict[str, Any] = {
            k: v for k, v in known_fields(cls, data).items() if isinstance(v, int | float)
        }
        return cls(**values, slices_ready=slice_changes(data.get("slices_ready")))

    def merged(self, other: Timeline) -> Timeline:
        """The earliest submission and start, and the latest end, of two views of one job."""

        def pick(a: float | None, b: float | None, choose: Any) -> float | None:
            known = [x for x in (a, b) if x is not None]
            return choose(known) if known else None

        return Timeline(
            submitted=pick(self.submitted, other.submitted, min),
            running=pick(self.running, other.running, min),
            ready=pick(self.ready, other.ready, min),
            ended=pick(self.ended, other.ended, max),
            admitted_later=self.admitted_later or other.admitted_later,
            slices_ready=tuple(sorted(set(self.slices_ready) | set(other.slices_ready))),
        )


@dataclass(frozen=True)
class TryUsage:
    """What one try's job held: ``chips_per_slice`` * ``slices`` TPU chips from ``started`` to
    ``ended`` (epoch seconds); any of them None when not known."""

    try_number: int
    job: str
    tpu_type: str | None = None
    chips_per_slice: int | None = None
    slices: int | None = None
    started: float | None = None
    ended: float | None = None
    preempted: bool = False
    #: When the job was submitted and first seen ready, and each change of its ready slices (the
    #: timeline's; not part of TPU-hours).
    submitted: float | None = None
    ready: float | None = None
    slices_ready: tuple[SliceCount, ...] = ()
    #: The job waited for admission (Kueue): ``started`` is its admission.
    admitted_later: bool = False
    #: Earlier tries that followed this job before this try took it over (reattached to it).
    replaced_tries: tuple[int, ...] = ()
    #: Slurm: the slices' own time in hours, from the worker array's records (each slice runs from
    #: its array task's start to its end); when set, chips are held per slice-hour, not for
    #: ``slices`` * the job's wall time.
    slice_hours: float | None = None
    #: Slurm: why ``slice_hours`` is not known (the try's TPU-hours are then unknown).
    slice_hours_unknown: str | None = None

    @property
    def chips(self) -> int | None:
        if self.chips_per_slice is None or self.slices is None:
            return None
        return self.chips_per_slice * self.slices

    @property
    def hours(self) -> float | None:
        """Wall time in hours from start to end; None when either is unknown."""
        if self.started is None or self.ended is None:
            return None
        return max(0.0, self.ended - self.started) / SECONDS_PER_HOUR

    @property
    def by_slice(self) -> bool:
        """Measured per slice (Slurm's worker array), not as slices * wall time."""
        return self.slice_hours is not None or self.slice_hours_unknown is not None

    @property
    def tpu_hours(self) -> float | None:
        """Chips * wall hours, or chips per slice * slice-hours; None when a factor is unknown."""
        if self.by_slice:
            if self.chips_per_slice is None or self.slice_hours is None:
                return None
            return self.chips_per_slice * self.slice_hours
        chips, hours = self.chips, self.hours
        return None if chips is None or hours is None else chips * hours

    def unknown(self) -> str | None:
        """Why the try's TPU-hours are not known; None when they are."""
        missing = []
        if self.chips_per_slice is None:
            missing.append("chips per slice")
        if self.by_slice:
            if self.slice_hours is None:
                missing.append(self.slice_hours_unknown or "slice time")
            return ", ".join(missing) or None
        if self.slices is None:
            missing.append("slice count")
        if self.started is None:
            missing.append("start (never seen running)")
        if self.ended is None:
            missing.append("end (the job had not ended when the try did)")
        return ", ".join(missing) or None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["slices_ready"] = [list(change) for change in self.slices_ready]
        data["replaced_tries"] = list(self.replaced_tries)
        data["tpu_hours"] = self.tpu_hours
        data["unknown"] = self.unknown()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TryUsage:
        replaced = data.get("replaced_tries")
        tries = tuple(n for n in replaced if isinstance(n, int)) if isinstance(replaced, list | tuple) else ()
        values = known_fields(cls, data)
        return cls(
            **{**values, "slices_ready": slice_changes(data.get("slices_ready")), "replaced_tries": tries}
        )


@dataclass(frozen=True)
class TpuHours:
    """TPU-hours of a task's tries (:func:`tpu_hours`); ``unrecorded`` earlier tries left no record
    (where the scheduler keeps nothing across tries)."""

    tries: tuple[TryUsage, ...] = field(default=())
    unrecorded: int = 0

    @property
    def total(self) -> float:
        """The sum over the tries whose TPU-hours are known."""
        return sum(t.tpu_hours or 0.0 for t in self.tries)

    @property
    def complete(self) -> bool:
        """Every try is recorded and its TPU-hours known (else :attr:`total` is a lower bound)."""
        return self.unrecorded == 0 and all(t.tpu_hours is not None for t in self.tries)

    @property
    def lost_to_preemption(self) -> float:
        return sum(t.tpu_hours or 0.0 for t in self.tries if t.preempted)

    @property
    def lost_share(self) -> float | None:
        """:attr:`lost_to_preemption` over :attr:`total`; None when the total is 0."""
        return self.lost_to_preemption / self.total if self.total > 0 else None

    def to_dict(self) -> dict[str, Any]:
        """The XCom value: each try, the total, and what preempted tries spent."""
        return {
            "unit": "TPU chip-hours",
            "tries": [t.to_dict() for t in self.tries],
            "total": round(self.total, 6),
            "complete": self.complete,
            "unrecorded_tries": self.unrecorded,
            "lost_to_preemption": round(self.lost_to_preemption, 6),
            "lost_share": None if self.lost_share is None else round(self.lost_share, 4),
        }

    def summary(self, try_number: int) -> str:
        """One log line: this try's TPU-hours (or why unknown), the task's total and the share lost."""
        this = next((t for t in self.tries if t.try_number == try_number), None)
        if this is None:
            head = f"TPU-hours: try {try_number} not known"
        elif this.tpu_hours is None:
            head = f"TPU-hours: try {try_number} unknown (no {this.unknown()})"
        elif this.slice_hours is not None:
            head = (
                f"TPU-hours: try {try_number} {this.tpu_hours:.4f} ({this.tpu_type or 'TPU'}: "
                f"{this.chips_per_slice} chips x {this.slice_hours * 60:.2f} slice-min)"
            )
        else:
            assert this.hours is not None
            head = (
                f"TPU-hours: try {try_number} {this.tpu_hours:.4f} ({this.tpu_type or 'TPU'}: "
                f"{this.chips_per_slice} chips x {this.slices} slices x {this.hours * 60:.2f} min)"
            )
        bound = "" if self.complete else "at least "
        tries = f"{len(self.tries)} tr{'y' if len(self.tries) == 1 else 'ies'}"
        tail = f"; task {bound}{self.total:.4f} over {tries}"
        if self.unrecorded:
            tail += f" ({self.unrecorded} earlier not recorded)"
        if self.lost_to_preemption > 0 and self.lost_share is not None:
            tail += f", {self.lost_to_preemption:.4f} ({self.lost_share:.0%}) lost to preempted tries"
        return head + tail


def tpu_hours(tries: Iterable[TryUsage], unrecorded: int = 0) -> TpuHours:
    """
    The TPU-hours (TPU chip-hours) of a task's tries.

    Rules:

    - on Slurm, where each slice is a worker array task with a start and an end of its own, a
      try's TPU-hours are chips per slice * the slices' time in hours (``slice_hours``,
      :func:`~airflow_provider_pathways.slurm.slice_time.slice_time`: a service's over its worker
      array's life, a workload's within its own run);
    - elsewhere, a try's TPU-hours are chips per slice * slices * the wall time from its job's
      start to its end, in hours: the moments the job recorded where it has them (``Timeline.observe``'s
      ``recorded``), else first seen running (admitted and placed, no longer queued; for a job no
      queue admits that ended before anyone saw it running, its creation) and first seen ended;
    - a quantity that is not known (no chip count, e.g. a Slurm job without ``SLICE_SHAPE``; a job
      never seen running; a try that ended before its job did, as with ``wait_until="ready"``) leaves
      that try's TPU-hours unknown (None), never guessed; the total then adds the known tries and is
      marked incomplete (a lower bound), as it is when ``unrecorded`` earlier tries left no record;
    - a job followed by several tries (a retry that reattached) counts once, under the latest of
      those tries (which lists the others in ``replaced_tries``), with the earliest start and the
      latest end any of them saw;
    - the tries whose job was preempted (failure class ``preempted``)
      make up ``lost_to_preemption``, and its share of the total.
    """
    by_job: dict[str, TryUsage] = {}
    for usage in sorted(tries, key=lambda t: t.try_number):
        earlier = by_job.pop(usage.job, None)
        if earlier is not None:
            usage = _merge(earlier, usage)
        by_job[usage.job] = usage
    return TpuHours(tuple(sorted(by_job.values(), key=lambda t: t.try_number)), unrecorded)


def _merge(earlier: TryUsage, later: TryUsage) -> TryUsage:
    def first(a: Any, b: Any) -> Any:
        return b if b is not None else a

    ends = [e for e in (earlier.ended, later.ended) if e is not None]
    slice_hours = first(earlier.slice_hours, later.slice_hours)
    return replace(
        later,
        tpu_type=first(earlier.tpu_type, later.tpu_type),
        chips_per_slice=first(earlier.chips_per_slice, later.chips_per_slice),
        slices=first(earlier.slices, later.slices),
        started=_earliest(earlier.started, later.started),
        ended=max(ends) if ends else None,
        preempted=later.preempted,
        submitted=_earliest(earlier.submitted, later.submitted),
        ready=_earliest(earlier.ready, later.ready),
        slices_ready=tuple(sorted(set(earlier.slices_ready) | set(later.slices_ready))),
        admitted_later=earlier.admitted_later or later.admitted_later,
        replaced_tries=tuple(sorted({*earlier.replaced_tries, earlier.try_number, *later.replaced_tries})),
        slice_hours=slice_hours,
        slice_hours_unknown=(
            None if slice_hours is not None else first(earlier.slice_hours_unknown, later.slice_hours_unknown)
        ),
    )


def _earliest(a: float | None, b: float | None) -> float | None:
    known = [x for x in (a, b) if x is not None]
    return min(known) if known else None
