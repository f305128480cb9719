"""A job submission, checked field by field before anything reaches the cluster.

``#SBATCH`` directives in a script's head and sbatch's output-file patterns; sbatch options, checked
once and mapped per transport (sbatch arguments, slurmrestd fields); the submission itself
(:class:`SubmitRequest`); and the arguments of the Slurm operators (the script, the environment
and, for the Pathways service job, its slices and bucket).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from airflow_provider_pathways.cache.location import bucket_name_error
from airflow_provider_pathways.slurm.settings import api_version_number

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


_A = re.ASCII
_DEPENDENCY_TYPES = "after|afterany|afterburstbuffer|aftercorr|afternotok|afterok"
_DEPENDENCY_ITEM = rf"(?:(?:{_DEPENDENCY_TYPES})(?::[0-9]+(?:_[0-9]+)?(?:\+[0-9]+)?)+|singleton)"
_OPTION_VALUES: dict[str, re.Pattern[str]] = {
    # sbatch(1) and src/common/slurm_opt.c / proc_args.c of Slurm 22.05 to 26.05.
    "dependency": re.compile(
        rf"{_DEPENDENCY_ITEM}(?:,{_DEPENDENCY_ITEM})*|{_DEPENDENCY_ITEM}(?:\?{_DEPENDENCY_ITEM})+", _A
    ),
    "exclusive": re.compile(r"|user|mcs|topo", _A),
    "nodes": re.compile(r"[1-9][0-9]*(?:-[1-9][0-9]*)?", _A),
    "ntasks": re.compile(r"[1-9][0-9]*", _A),
    "cpus-per-task": re.compile(r"[1-9][0-9]*", _A),
    "ntasks-per-node": re.compile(r"[1-9][0-9]*", _A),
    "mem": re.compile(r"[0-9]+[KMGTkmgt]?", _A),  # str_to_mbytes: MB by default, K rounded up
    "mem-per-cpu": re.compile(r"[0-9]+[KMGTkmgt]?", _A),
    "gres": re.compile(
        r"none|(?:gres/)?[A-Za-z][A-Za-z0-9_.-]*(?::[A-Za-z0-9_.-]+)*(?:,(?:gres/)?[A-Za-z][A-Za-z0-9_.-]*(?::[A-Za-z0-9_.-]+)*)*",
        _A,
    ),
    "constraint": re.compile(r"[A-Za-z0-9_.:*&|!()\[\]-]+", _A),
    "reservation": re.compile(r"[A-Za-z0-9_.+@-]+(?:,[A-Za-z0-9_.+@-]+)*", _A),
    "hold": re.compile(r"", _A),
}
#: Signal names sbatch knows (proc_args.c ``signals_mapping``), with or without ``SIG``, any case.
SIGNAL_NAMES = {
    "HUP": 1, "INT": 2, "QUIT": 3, "ABRT": 6, "KILL": 9, "USR1": 10, "USR2": 12, "PIPE": 13, "ALRM": 14,
    "TERM": 15, "CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22, "URG": 23, "XCPU": 24,
}  # fmt: skip
_SIGNAL = re.compile(r"(?:(B|R|BR|RB):)?(?:SIG)?([A-Z][A-Z0-9]*|[0-9]+)(?:@([0-9]+))?", _A | re.IGNORECASE)
# ``now+N[unit]`` (Slurm's parse_time: seconds by default).
_BEGIN_UNITS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
    **dict.fromkeys(("w", "week", "weeks"), 604800),
}
_BEGIN_RELATIVE = re.compile(
    rf"now(?:\+([0-9]+)({'|'.join(sorted(_BEGIN_UNITS, key=len, reverse=True))})?)?", _A
)
#: sbatch options the hook maps to every transport and API version (or refuses before submission
#: when one version cannot express a value); more pass through to ``sbatch`` over SSH only.
MAPPED_OPTIONS = frozenset({*_OPTION_VALUES, "begin", "signal"})
# A job record's option value after checking: what each transport needs.
_MEM = re.compile(r"([0-9]+)([KMGTkmgt]?)", _A)


@dataclass(frozen=True)
class Signal:
    """``--signal=[{R|B}:]<sig>[@<sig_time>]``: which signal, how long before the end, to whom."""

    number: int
    name: str
    seconds: int = 60
    batch_only: bool = False
    reservation: bool = False

    @property
    def sbatch(self) -> str:
        prefix = ("B" if self.batch_only else "") + ("R" if self.reservation else "")
        return f"{prefix}{':' if prefix else ''}{self.name}@{self.seconds}"


def parse_signal(value: str) -> Signal:
    """A ``--signal`` value as sbatch reads it (``get_signal_opts`` in proc_args.c): a signal name
    or number from 1 to 64, sent ``sig_time`` seconds (default 60, at most 65535) before the end."""
    match = _SIGNAL.fullmatch(value)
    if not match:
        raise ValueError(f"signal {value!r} is not [{{B|R}}:]<signal>[@<seconds>] (e.g. 'B:USR1@300')")
    scope, signal, seconds = match.groups()
    if signal.isdigit():
        number = int(signal)
        if not 1 <= number <= 64:
            raise ValueError(f"signal {value!r}: signal numbers go from 1 to 64")
        name = next((k for k, v in SIGNAL_NAMES.items() if v == number), str(number))
    else:
        name = signal.upper()
        if name not in SIGNAL_NAMES:
            raise ValueError(f"signal {value!r}: unknown signal name (known: {', '.join(SIGNAL_NAMES)})")
        number = SIGNAL_NAMES[name]
    delay = int(seconds) if seconds is not None else 60
    if delay > 0xFFFF:
        raise ValueError(f"signal {value!r}: at most 65535 seconds before the end")
    scope = (scope or "").upper()
    return Signal(number, name, delay, batch_only="B" in scope, reservation="R" in scope)


def parse_begin(value: str, now: float | None = None) -> float:
    """Epoch seconds of a ``--begin`` value: ``now``, ``now+N[unit]`` (seconds by default; units
    seconds, minutes, hours, days, weeks) or an ISO 8601 time with its UTC offset
    (``2026-01-01T10:00:00+00:00``; without an offset the cluster's time zone would decide, so it is
    refused)."""
    now = time.time() if now is None else now
    match = _BEGIN_RELATIVE.fullmatch(value)
    if match:
        count, unit = match.groups()
        if count is None:
            return now
        return now + int(count) * _BEGIN_UNITS[unit or "s"]
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or not re.fullmatch(r"[0-9T:.+Z -]+", value, _A):
        raise ValueError(
            f"begin {value!r} is not 'now', 'now+<N>[seconds|minutes|hours|days|weeks]' or an ISO 8601 "
            "time with a UTC offset (e.g. '2026-01-01T10:00:00+00:00')"
        )
    if moment.tzinfo is None:
        raise ValueError(
            f"begin {value!r} has no UTC offset: the cluster's time zone would decide; add one "
            "(e.g. '+00:00')"
        )
    return moment.timestamp()


def check_option(name: str, value: str) -> None:
    """Refuse a bad value of a mapped sbatch option, naming the option (before any submission)."""
    if name == "begin":
        parse_begin(value)
    elif name == "signal":
        parse_signal(value)
    elif name in _OPTION_VALUES and not _OPTION_VALUES[name].fullmatch(value):
        shown = "a flag ('')" if name == "hold" else "not valid"
        raise ValueError(f"extra_options[{name!r}] = {value!r} is {shown} for sbatch --{name}")


def _mbytes(value: str) -> int:
    """``str_to_mbytes``: MB by default, K rounded up, G and T multiplied."""
    match = _MEM.fullmatch(value)
    if not match:
        raise ValueError(f"{value!r} is not a memory size")
    number, unit = int(match.group(1)), match.group(2).upper()
    if unit == "K":
        return -(-number // 1024)
    return number * {"": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]


def sbatch_option_args(options: Mapping[str, str], *, now: float | None = None) -> list[str]:
    """``--name=value`` arguments for sbatch; ``begin`` becomes ``now+<seconds>`` (an absolute time
    needs no time zone on the login node), ``signal`` its canonical form."""
    args = []
    for key, value in options.items():
        if key == "begin":
            delay = max(0, math.ceil(parse_begin(value, now) - (time.time() if now is None else now)))
            value = f"now+{delay}" if delay else "now"
        elif key == "signal":
            value = parse_signal(value).sbatch
        args.append(f"--{key}={value}" if value != "" else f"--{key}")
    return args


def rest_option_fields(
    options: Mapping[str, str], api_version: str, *, now: float | None = None
) -> dict[str, Any]:
    """Job fields of ``POST /slurm/vX/job/submit`` for the mapped sbatch options, as that API
    version's job description names them (the served OpenAPI documents of Slurm 22.05: v0.0.38
    takes sbatch's own option strings; 24.11 and 26.05: v0.0.40 to v0.0.45 take typed fields).
    Raises ValueError naming the option when this version cannot express it."""
    version = api_version_number(api_version)
    new = version >= 39
    clock = time.time() if now is None else now
    fields_: dict[str, Any] = {}

    def struct(number: int) -> dict[str, Any]:
        return {"set": True, "infinite": False, "number": number}

    for key, value in options.items():
        if key not in MAPPED_OPTIONS:
            raise ValueError(
                f"extra_options[{key!r}]: slurmrestd {api_version} submissions cannot carry sbatch --{key} "
                f"(mapped: {', '.join(sorted(MAPPED_OPTIONS))}); use the SSH transport or drop it"
            )
        if key == "begin":
            moment = max(clock, parse_begin(value, clock))
            if new:
                fields_["begin_time"] = struct(math.ceil(moment))
            else:
                delay = math.ceil(moment - clock)
                fields_["begin_time"] = f"now+{delay}" if delay > 0 else "now"
        elif key == "signal":
            signal = parse_signal(value)
            if new:
                fields_["kill_warning_signal"] = signal.name
                fields_["kill_warning_delay"] = struct(signal.seconds)
                flags = ["BATCH_JOB"] * signal.batch_only + ["RESERVATION_JOB"] * signal.reservation
                if flags:
                    fields_["kill_warning_flags"] = flags
            elif signal.batch_only:
                # slurm_opt.c takes "B:" only inside sbatch (get_signal_opts: run_in_daemon("sbatch")),
                # so slurmrestd 22.05 refuses it ("Invalid SIGNAL specification").
                raise ValueError(
                    f"extra_options['signal'] = {value!r}: slurmrestd {api_version} cannot signal the batch "
                    "shell only ('B:'); use the SSH transport or a signal for the job's steps"
                )
            else:
                fields_["signal"] = signal.sbatch
        elif key == "exclusive":
            if value == "topo" and version < 41:
                raise ValueError(
                    f"extra_options['exclusive'] = 'topo' needs slurmrestd v0.0.41 (Slurm 24.05) or later, "
                    f"not {api_version}"
                )
            if new:
                fields_["shared"] = [value or "none"]
            else:
                fields_["exclusive"] = value or "exclusive"
        elif key in ("nodes", "dependency", "reservation"):
            fields_[key] = value
        elif key == "constraint":
            fields_["constraints"] = value
        elif key == "ntasks":
            fields_["tasks" if new else "ntasks"] = int(value)
        elif key == "ntasks-per-node":
            fields_["tasks_per_node" if new else "ntasks_per_node"] = int(value)
        elif key == "cpus-per-task":
            fields_["cpus_per_task"] = int(value)
        elif key in ("mem", "mem-per-cpu"):
            name = "memory_per_node" if key == "mem" else "memory_per_cpu"
            fields_[name] = struct(_mbytes(value)) if new else value
        elif key == "gres":
            if value == "none":
                continue
            if new:  # sbatch turns --gres into the job's tres_per_node, each item prefixed "gres/"
                items = value.split(",")
                fields_["tres_per_node"] = ",".join(
                    i if i.startswith("gres/") else f"gres/{i}" for i in items
                )
            else:
                fields_["gres"] = value
        elif key == "hold":
            fields_["hold"] = True
    return fields_


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ARRAY_SPEC = re.compile(r"[0-9]+(-[0-9]+(:[0-9]+)?)?(,[0-9]+(-[0-9]+(:[0-9]+)?)?)*(%[0-9]+)?")
_SIMPLE_NAME = re.compile(r"[A-Za-z0-9_.,+@-]+")
_OPTION_NAME = re.compile(r"[a-z][a-z0-9-]*")
_TIME_LIMIT = re.compile(r"(?:([0-9]+)-)?([0-9]+)(?::([0-9]+))?(?::([0-9]+))?")
DEFAULT_JOB_NAME = "airflow-slurm-job"
# sbatch options that have their own parameter or that the hook controls.
_RESERVED_OPTIONS = frozenset(
    {"parsable", "job-name", "partition", "account", "qos", "time", "chdir", "output", "error", "array"}
    | {"comment", "requeue", "no-requeue", "open-mode", "wrap", "export", "export-file", "help", "usage"}
)


def parse_time_limit(value: str | int) -> int | None:
    """Minutes of a Slurm time limit (``90``, ``1:30:00``, ``2-12``, ``UNLIMITED``); None = unlimited.

    Seconds round up to whole minutes, as Slurm does.
    """
    if isinstance(value, bool):
        raise ValueError("time_limit must be minutes (int) or a Slurm time string, not a bool")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"time_limit must be a positive number of minutes, got {value}")
        return value
    text = str(value)
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    match = _TIME_LIMIT.fullmatch(text)
    if not match:
        raise ValueError(
            f"time_limit {value!r} is not a Slurm time "
            "(minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED)"
        )
    days, a, b, c = match.groups()
    if days is not None:
        hours, minutes, seconds = int(a), int(b or 0), int(c or 0)
        total = int(days) * 86400 + hours * 3600 + minutes * 60 + seconds
    elif c is not None:
        total = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:
        total = int(a) * 60 + int(b)
    else:
        total = int(a) * 60
    minutes_total = -(-total // 60)
    if minutes_total <= 0:
        raise ValueError(f"time_limit {value!r} must be longer than zero")
    return minutes_total


@dataclass(frozen=True)
class SubmitRequest:
    """Validated input of ``SlurmHook.submit_job`` (see there); build it with :meth:`build`."""

    script: str | None
    script_path: str | None
    job_name: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None
    time_limit_minutes: int | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    working_directory: str | None = None
    output: str | None = None
    error: str | None = None
    array: str | None = None
    comment: str | None = None
    requeue: bool | None = None
    open_mode_append: bool = True
    extra_options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        *,
        script: str | None = None,
        script_path: str | None = None,
        job_name: str | None = None,
        partition: str | None = None,
        account: str | None = None,
        qos: str | None = None,
        time_limit: str | int | None = None,
        environment: Mapping[str, str] | None = None,
        working_directory: str | None = None,
        output: str | None = None,
        error: str | None = None,
        array: str | None = None,
        comment: str | None = None,
        requeue: bool | None = None,
        open_mode_append: bool = True,
        extra_options: Mapping[str, str] | None = None,
    ) -> SubmitRequest:
        """Check every field; raises ValueError/TypeError naming the bad field."""
        if (script is None) == (script_path is None):
            raise ValueError(
                "give exactly one of script (the script text) or script_path (a path on the cluster)"
            )
        if script is not None:
            _check_str("script", script, allow_newlines=True)
            if not script.strip():
                raise ValueError("script is empty")
            if not script.startswith("#!"):
                raise ValueError(
                    "script must start with a '#!' line (e.g. '#!/bin/bash'), as sbatch requires"
                )
        if script_path is not None:
            _check_str("script_path", script_path)
            if not script_path.strip():
                raise ValueError("script_path is empty")
        if job_name is not None:
            _check_str("job_name", job_name)
        for name, value in (("partition", partition), ("account", account), ("qos", qos)):
            if value is not None and not _SIMPLE_NAME.fullmatch(str(value)):
                raise ValueError(f"{name} {value!r} is not a valid Slurm name")
        limit_text: str | None = None
        limit_minutes: int | None = None
        if time_limit is not None:
            limit_minutes = parse_time_limit(time_limit)
            limit_text = str(time_limit)
        env = dict(environment or {})
        for key, value in env.items():
            if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
                raise ValueError(f"environment variable name {key!r} is not valid (letters, digits, _)")
            if not isinstance(value, str):
                raise TypeError(f"environment[{key!r}] must be a string, got {type(value).__name__}")
            if "\0" in value:
                raise ValueError(f"environment[{key!r}] contains a NUL byte")
        for name, value in (("working_directory", working_directory), ("output", output), ("error", error)):
            if value is not None:
                _check_str(name, value)
        if array is not None and not _ARRAY_SPEC.fullmatch(str(array)):
            raise ValueError(f"array {array!r} is not a Slurm array spec (e.g. '0-7', '1,3,5-9:2', '0-15%4')")
        if comment is not None:
            _check_str("comment", comment)
        if requeue is not None and not isinstance(requeue, bool):
            raise TypeError("requeue must be True, False or None")
        options = dict(extra_options or {})
        for key, value in options.items():
            if not isinstance(key, str) or not _OPTION_NAME.fullmatch(key):
                raise ValueError(
                    f"extra_options key {key!r} must be an sbatch long option name like 'cpus-per-task'"
                )
            if key in _RESERVED_OPTIONS:
                raise ValueError(
                    f"extra_options[{key!r}] is not allowed: use the submit_job parameter instead"
                )
            if not isinstance(value, str):
                raise TypeError(f"extra_options[{key!r}] must be a string ('' for a flag)")
            _check_str(f"extra_options[{key!r}]", value)
            if key in MAPPED_OPTIONS:
                check_option(key, value)
        return cls(
            script=script,
            script_path=script_path,
            job_name=job_name,
            partition=partition,
            account=account,
            qos=qos,
            time_limit=limit_text,
            time_limit_minutes=limit_minutes,
            environment=env,
            working_directory=working_directory,
            output=output,
            error=error,
            array=str(array) if array is not None else None,
            comment=comment,
            requeue=requeue,
            open_mode_append=open_mode_append,
            extra_options=options,
        )

    @property
    def display_name(self) -> str:
        """The job name Slurm will show when no ``#SBATCH`` directive sets one."""
        if self.job_name:
            return self.job_name
        return os.path.basename(self.script_path) if self.script_path else DEFAULT_JOB_NAME

    def shown(self) -> dict[str, Any]:
        """The submission as a user reads it (nothing masked): the job's name, the script's text or
        its path on the cluster, sbatch's arguments (with the defaults the script's own ``#SBATCH``
        lines leave; a script on the cluster is not read) and the environment."""
        script = {"script": self.script} if self.script is not None else {"script_path": self.script_path}
        directives = parse_sbatch_directives(self.script) if self.script is not None else {}
        return {
            "job_name": self.display_name,
            **script,
            "sbatch_options": self.sbatch_options(directives),
            "environment": dict(self.environment),
        }

    def as_kwargs(self) -> dict[str, Any]:
        """The arguments of :meth:`build` that produce this request."""
        kwargs = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "time_limit_minutes"}
        kwargs["environment"] = dict(self.environment)
        kwargs["extra_options"] = dict(self.extra_options)
        return kwargs

    def sbatch_options(self, directives: Mapping[str, str] | None = None) -> list[str]:
        """``sbatch`` arguments (without the script); paths must already be expanded.

        Parameters given to ``submit_job`` become options (they override ``#SBATCH`` lines, as on
        the command line); the defaults (job name of script text, ``--open-mode=append``) are only
        added when no directive in ``directives`` sets that option.
        """
        directives = directives or {}
        args = ["--parsable"]
        if self.job_name is not None:
            args.append(f"--job-name={self.job_name}")
        elif self.script is not None and "job-name" not in directives:
            args.append(f"--job-name={DEFAULT_JOB_NAME}")
        for option, value in (
            ("partition", self.partition),
            ("account", self.account),
            ("qos", self.qos),
            ("time", self.time_limit),
            ("chdir", self.working_directory),
            ("output", self.output),
            ("error", self.error),
            ("array", self.array),
            ("comment", self.comment),
        ):
            if value is not None:
                args.append(f"--{option}={value}")
        if self.requeue is not None:
            args.append("--requeue" if self.requeue else "--no-requeue")
        if not self.open_mode_append:
            args.append("--open-mode=truncate")
        elif "open-mode" not in directives:
            args.append("--open-mode=append")
        args += sbatch_option_args(self.extra_options)
        return args

    def with_directives(self, directives: Mapping[str, str]) -> tuple[SubmitRequest, list[str]]:
        """For slurmrestd, which ignores ``#SBATCH`` lines: fill the parameters not given to
        ``submit_job`` from the directives it can express. Returns the request and the
        directives it could not apply (``--name`` strings)."""
        kwargs = self.as_kwargs()
        ignored = []
        for name, value in directives.items():
            target = DIRECTIVE_FIELDS.get(name)
            if target == "requeue":
                if kwargs["requeue"] is None:
                    kwargs["requeue"] = name == "requeue"
            elif target == "open_mode_append":
                if kwargs["open_mode_append"] and value.strip().lower() == "truncate":
                    kwargs["open_mode_append"] = False
            elif target is not None:
                if kwargs[target] is None:
                    kwargs[target] = value
            elif name in MAPPED_OPTIONS:
                kwargs["extra_options"].setdefault(name, value)
            else:
                ignored.append(f"--{name}")
        try:
            return SubmitRequest.build(**kwargs), ignored
        except (ValueError, TypeError) as err:
            raise ValueError(
                f"an #SBATCH line of {self.script_path or 'the script'} is not usable: {err}"
            ) from None


def _check_str(name: str, value: Any, *, allow_newlines: bool = False) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{name} contains a NUL byte")
    if not allow_newlines and ("\n" in value or "\r" in value):
        raise ValueError(f"{name} must be a single line")


def path_wrapper_script(script_path: str) -> str:
    """A batch script that ``exec``s ``script_path`` (REST has no ``sbatch <path>``)."""
    return f'#!/bin/bash\nexec {shlex.quote(script_path)} "$@"\n'


#: A TPU slice topology as ``start_pathways.sh`` takes it: ``2x4``, ``2x2x2``.
SLICE_SHAPE = re.compile(r"^[1-9][0-9]*x[1-9][0-9]*(x[1-9][0-9]*)?$")
#: The service job's variables, each set by its own argument.
SERVICE_VARIABLES = ("SLICE_SHAPE", "MIN_SLICES", "MAX_SLICES", "GCS_BUCKET")
_SCALARS = (str, int, float, bool)


def environment_problems(environment: Mapping[str, Any]) -> list[str]:
    """Variable names that are not names, values that are not text (or a number or bool)."""
    problems = []
    for key, value in environment.items():
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            problems.append(f"environment: {key!r} is not a valid variable name (letters, digits, _)")
        if not isinstance(value, _SCALARS):
            problems.append(
                f"environment[{key!r}]: must be a string (or a number or bool), got {type(value).__name__}"
            )
    return problems


def environment_text(environment: Mapping[str, Any]) -> dict[str, str]:
    """The environment as strings: native templating renders ``"3"`` as ``3`` and ``"true"`` as
    ``True``; a variable always arrives as text (``3``, ``true``)."""
    return {
        key: ("true" if value else "false") if isinstance(value, bool) else str(value)
        for key, value in environment.items()
    }


def script_problems(script: str | None, script_path: str | None) -> list[str]:
    """Exactly one of the script's text or its path on the cluster."""
    if bool(script) == bool(script_path):
        return ["script / script_path: give exactly one (script text to upload, or a path on the cluster)"]
    return []


def slice_shape_problem(slice_shape: Any) -> str | None:
    """What is wrong with a ``SLICE_SHAPE`` value, naming the argument; None when it is a topology."""
    if not isinstance(slice_shape, str) or not SLICE_SHAPE.fullmatch(slice_shape):
        return f"slice_shape: {slice_shape!r} is not a topology like 2x4 or 2x2x2"
    return None


def service_problems(
    *, slice_shape: Any, min_slices: Any, max_slices: Any, gcs_bucket: Any, environment: Mapping[str, Any]
) -> list[str]:
    """Problems with the service job's own arguments, each naming the argument and the fix."""
    problems = [problem] if (problem := slice_shape_problem(slice_shape)) else []
    slices: list[int] = []
    for argument, value in (("min_slices", min_slices), ("max_slices", max_slices)):
        try:
            number = int(value)
        except (TypeError, ValueError):
            problems.append(f"{argument}: {value!r} is not an integer")
            continue
        if number < 1:
            problems.append(f"{argument}: {number} must be >= 1")
        slices.append(number)
    if len(slices) == 2 and slices[0] > slices[1]:
        problems.append(f"min_slices: {slices[0]} is more than max_slices ({slices[1]}); lower min_slices")
    bucket = str(gcs_bucket or "")
    if bucket.startswith("gs://"):
        problems.append(f"gcs_bucket: {bucket!r} must be a bucket name without gs://")
    elif error := bucket_name_error(bucket):
        problems.append(f"gcs_bucket: {bucket!r} {error}")
    for key in SERVICE_VARIABLES:
        if key in environment:
            problems.append(f"environment[{key!r}]: set it with the {key.lower()} argument instead")
    return problems


def service_environment(
    environment: Mapping[str, Any], *, slice_shape: str, min_slices: Any, max_slices: Any, gcs_bucket: str
) -> dict[str, str]:
    """The service job's environment: the user's, then the four variables of ``start_pathways.sh``."""
    return {
        **environment_text(environment),
        "SLICE_SHAPE": str(slice_shape),
        "MIN_SLICES": str(int(min_slices)),
        "MAX_SLICES": str(int(max_slices)),
        "GCS_BUCKET": str(gcs_bucket),
    }


def array_size_problem(max_slices: Any, limit: int | None) -> str | None:
    """``max_slices`` beyond the cluster's ``MaxArraySize`` (None: unknown, not checked)."""
    if limit is None or int(max_slices) <= limit:
        return None
    return (
        f"max_slices: {int(max_slices)} is more than the cluster's MaxArraySize ({limit}), the most "
        "array tasks (slices) one job array can have; lower max_slices or ask the cluster's "
        "administrators to raise MaxArraySize"
    )
