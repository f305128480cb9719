"""A job submission, validated field by field before anything reaches the cluster."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from airflow_provider_pathways.slurm.directives import DIRECTIVE_FIELDS
from airflow_provider_pathways.slurm.options import MAPPED_OPTIONS, check_option, sbatch_option_args

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
