"""Errors of talking to a Slurm cluster, by cause, and which of them are worth retrying."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_pathways.transient import TRANSIENT_HTTP_STATUSES


class SlurmError(RuntimeError):
    """Something went wrong talking to Slurm. Messages never contain tokens, keys or passwords."""


class SlurmConnectionError(SlurmError):
    """The cluster (slurmrestd or sshd) could not be reached or the SSH session failed."""


class SlurmHostKeyError(SlurmConnectionError):
    """The SSH server's host key is unknown or does not match known_hosts."""


class SlurmAuthError(SlurmError):
    """slurmrestd or sshd refused the credentials."""


class SlurmApiError(SlurmError):
    """slurmrestd answered with an error."""

    def __init__(self, message: str, *, status: int | None = None, errors: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.errors = list(errors)


class SlurmCommandError(SlurmError):
    """A Slurm command run over SSH failed."""

    def __init__(self, message: str, *, exit_status: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.exit_status = exit_status
        self.stderr = stderr


class SlurmJobLost(SlurmError):
    """A job this caller submitted is gone: slurmctld no longer knows it (MinJobAge after its end,
    300 s by default) and the cluster keeps no accounting, or accounting has no record of it. Its
    end is unknown, and so is whether its program ran: callers report an unknown outcome, never
    success, and never run the program again by themselves."""

    failure_class = "outcome_unknown"

    def __init__(self, job_id: int, *, accounting: bool) -> None:
        where = (
            "and accounting (slurmdbd) has no record of it"
            if accounting
            else "and the cluster keeps no accounting"
        )
        super().__init__(f"job {job_id} is no longer known to slurmctld {where}; its end is unknown")
        self.job_id = job_id
        self.accounting = accounting


# What Slurm's clients print when slurmctld is down or restarting (``slurm_strerror`` texts).
_CONTROLLER_UNREACHABLE = (
    "unable to contact slurm controller",
    "socket timed out",
    "zero bytes were transmitted",
    "connection refused",
)


def is_transient(err: BaseException) -> bool:
    """A Slurm error worth retrying: slurmrestd or sshd unreachable, an HTTP status of
    ``TRANSIENT_HTTP_STATUSES`` but 500 (slurmrestd answers 500 to a request it refused, too), or
    slurmctld down behind them; never a refused credential, host key or request."""
    if isinstance(err, (SlurmHostKeyError, SlurmAuthError)):
        return False
    if isinstance(err, SlurmConnectionError):
        return True
    text = str(err).lower()
    if isinstance(err, SlurmApiError):
        if err.status in TRANSIENT_HTTP_STATUSES - {500}:
            return True
        return any(words in text for words in _CONTROLLER_UNREACHABLE)
    if isinstance(err, SlurmCommandError):
        detail = f"{text} {err.stderr}".lower()
        return any(words in detail for words in _CONTROLLER_UNREACHABLE)
    return False
