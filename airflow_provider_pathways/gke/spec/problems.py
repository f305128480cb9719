"""The error type for invalid PathwaysJob specs: every problem, with its field path and fix."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PathwaysSpecError", "SpecProblem"]


@dataclass(frozen=True)
class SpecProblem:
    """One problem in a spec: the field path (e.g. ``spec.workers[0].topology``), what is wrong, the fix."""

    field: str
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}. Fix: {self.fix}"


class PathwaysSpecError(ValueError):
    """A spec that cannot be loaded, rendered or submitted; ``problems`` lists every problem found."""

    def __init__(self, problems: Iterable[SpecProblem]) -> None:
        self.problems: list[SpecProblem] = list(problems)
        count = len(self.problems)
        lines = [f"invalid PathwaysJob spec: {count} problem{'' if count == 1 else 's'}"]
        lines.extend(f"- {problem}" for problem in self.problems)
        super().__init__("\n".join(lines))

    def __reduce__(self) -> tuple[type[PathwaysSpecError], tuple[list[SpecProblem]]]:
        return self.__class__, (self.problems,)
