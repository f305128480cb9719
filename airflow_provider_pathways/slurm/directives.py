"""``#SBATCH`` directives in a script's head, and sbatch's output-file patterns."""

from __future__ import annotations

import re
import shlex
from typing import Any

_OUTPUT_PATTERN = re.compile(r"%(\d*)([%AajJNnstuxb])")


def expand_output_pattern(
    pattern: str,
    *,
    job_id: int,
    array_job_id: int | None,
    array_task_id: int | None,
    name: str,
    user: str | None,
    node: str | None,
) -> str:
    """Expand Slurm's filename patterns (``%j``, ``%A``, ``%a``, ``%x``, ``%u``, ``%N`` ...)."""

    def replace(match: re.Match[str]) -> str:
        width, letter = match.group(1), match.group(2)
        values: dict[str, Any] = {
            "%": "%",
            "A": array_job_id if array_job_id is not None else job_id,
            "a": array_task_id if array_task_id is not None else 4294967294,
            "j": job_id,
            "J": job_id,
            "N": node or "",
            "n": 0,
            "s": "batch",
            "t": 0,
            "u": user or "",
            "x": name,
            "b": (array_task_id or 0) % 10,
        }
        value = values[letter]
        if letter == "%":
            return "%"
        if isinstance(value, int) and width:
            return str(value).zfill(int(width))
        return str(value)

    return _OUTPUT_PATTERN.sub(replace, pattern)


_SHORT_OPTIONS = {
    "J": "job-name",
    "p": "partition",
    "A": "account",
    "q": "qos",
    "t": "time",
    "D": "chdir",
    "o": "output",
    "e": "error",
    "a": "array",
    "c": "cpus-per-task",
    "n": "ntasks",
    "C": "constraint",
    "d": "dependency",
    "H": "hold",
}
# Options without a value (a value only with "=": --exclusive=user).
_FLAG_OPTIONS = frozenset({"requeue", "no-requeue", "hold", "exclusive"})
DIRECTIVE_FIELDS = {
    "job-name": "job_name",
    "partition": "partition",
    "account": "account",
    "qos": "qos",
    "time": "time_limit",
    "chdir": "working_directory",
    "output": "output",
    "error": "error",
    "array": "array",
    "comment": "comment",
    "requeue": "requeue",
    "no-requeue": "requeue",
    "open-mode": "open_mode_append",
}


def parse_sbatch_directives(script_head: str) -> dict[str, str]:
    """Long option name → value of the ``#SBATCH`` lines sbatch would read (``""`` for flags;
    short options are translated for the common ones, a later line wins)."""
    options: dict[str, str] = {}
    for line in sbatch_directives(script_head):
        try:
            tokens = shlex.split(line[len("#SBATCH") :], comments=True)
        except ValueError:
            continue
        index = 0
        while index < len(tokens):
            token = tokens[index]
            index += 1
            if token.startswith("--"):
                name, equals, value = token[2:].partition("=")
            elif token.startswith("-") and len(token) >= 2:
                name = _SHORT_OPTIONS.get(token[1], f"-{token[1]}")
                value = token[2:].removeprefix("=")
                equals = "=" if value else ""
            else:
                continue
            takes_value = name not in _FLAG_OPTIONS
            if takes_value and not equals and index < len(tokens) and not tokens[index].startswith("-"):
                value = tokens[index]
                index += 1
            options[name] = value
    return options


def sbatch_directives(script_head: str) -> list[str]:
    """The ``#SBATCH`` lines sbatch would read: those before the first command line."""
    directives = []
    for index, line in enumerate(script_head.splitlines()):
        stripped = line.strip()
        if index == 0 and stripped.startswith("#!"):
            continue
        if not stripped or stripped.startswith("#"):
            if re.match(r"#SBATCH\s", stripped):
                directives.append(stripped)
            continue
        break
    return directives
