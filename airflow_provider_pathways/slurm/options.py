"""sbatch options: checked once, mapped per transport (sbatch arguments, slurmrestd fields)."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_pathways.slurm.settings import api_version_number

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
