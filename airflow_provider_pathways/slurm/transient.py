"""Which Slurm errors are worth retrying."""

from __future__ import annotations

from airflow_provider_pathways.slurm.errors import (
    SlurmApiError,
    SlurmAuthError,
    SlurmCommandError,
    SlurmConnectionError,
    SlurmHostKeyError,
)
from airflow_provider_pathways.transient import TRANSIENT_HTTP_STATUSES

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
