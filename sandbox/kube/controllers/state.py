"""Simulation state that is not part of the API: container logs, start times, running programs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

MAX_LOG_LINES = 10000


@dataclass
class ProgramRun:
    """The user program running in a head pod: its log lines, when each is printed, and its exit."""

    lines: list[str]
    times: list[float]
    end: float
    exit_code: int
    emitted: int = 0


class LogBook:
    """Container log lines per pod uid and container name, with the time each was written."""

    def __init__(self) -> None:
        self._logs: dict[str, dict[str, list[tuple[float, str]]]] = {}

    def write(self, pod_uid: str, container: str, line: str, ts: float | None = None) -> None:
        lines = self._logs.setdefault(pod_uid, {}).setdefault(container, [])
        lines.append((time.time() if ts is None else ts, line))
        if len(lines) > MAX_LOG_LINES:
            del lines[: len(lines) - MAX_LOG_LINES]

    def read(self, pod_uid: str, container: str) -> list[tuple[float, str]]:
        return list(self._logs.get(pod_uid, {}).get(container, ()))

    def forget(self, pod_uid: str) -> None:
        self._logs.pop(pod_uid, None)

    def clear(self) -> None:
        self._logs.clear()


@dataclass
class SimState:
    """Side state shared by the simulated controllers (keyed by object uid)."""

    logs: LogBook = field(default_factory=LogBook)
    # pod uid -> time the pod starts running (inf: never, e.g. capped by max-ready-slices)
    pod_ready_at: dict[str, float] = field(default_factory=dict)
    # worker Job uid -> time its pods start (all pods of a slice come up together)
    slice_ready_at: dict[str, float] = field(default_factory=dict)
    # JobSet uid -> time the last slice was scheduled to come up (slices come up one by one)
    slice_cursor: dict[str, float] = field(default_factory=dict)
    # head pod uid -> running program
    programs: dict[str, ProgramRun] = field(default_factory=dict)
    # JobSet uid -> exit code the next program end must use (fail-program / complete-program)
    exit_overrides: dict[str, int] = field(default_factory=dict)
    # JobSet uid -> the last line the program prints when it is ended by a scenario
    exit_lines: dict[str, str] = field(default_factory=dict)
    # Job uid -> pod uids already counted in the Job's succeeded/failed counters
    counted: dict[str, set[str]] = field(default_factory=dict)

    def forget_pod(self, uid: str) -> None:
        self.pod_ready_at.pop(uid, None)
        self.programs.pop(uid, None)
        self.logs.forget(uid)

    def forget_job(self, uid: str) -> None:
        self.slice_ready_at.pop(uid, None)
        self.counted.pop(uid, None)

    def forget_jobset(self, uid: str) -> None:
        self.slice_cursor.pop(uid, None)
        self.exit_overrides.pop(uid, None)
        self.exit_lines.pop(uid, None)

    def clear(self) -> None:
        self.logs.clear()
        for table in (
            self.pod_ready_at,
            self.slice_ready_at,
            self.slice_cursor,
            self.programs,
            self.exit_overrides,
            self.exit_lines,
            self.counted,
        ):
            table.clear()
