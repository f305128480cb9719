"""The interface every way of talking to Slurm (slurmrestd, SSH) implements."""

from __future__ import annotations

from typing import Protocol

from airflow_provider_pathways.slurm.errors import SlurmError
from airflow_provider_pathways.slurm.job import SlurmJob
from airflow_provider_pathways.slurm.submit import SubmitRequest


class FileAccess(Protocol):
    """Reading files of the cluster: this machine's filesystem (shared FS) or SFTP."""

    description: str

    async def home(self) -> str | None: ...

    async def read(self, path: str, tail_bytes: int | None) -> bytes | None: ...

    async def stat(self, path: str) -> tuple[float, int] | None: ...

    async def close(self) -> None: ...


class SlurmTransport(Protocol):
    """One way of talking to Slurm. Paths given to it are already ``~``-expanded."""

    @property
    def files(self) -> FileAccess | None:
        """How this transport reads the cluster's files (None: it cannot)."""
        ...

    async def submit(self, request: SubmitRequest) -> int: ...

    async def jobs(self, job_id: int) -> list[SlurmJob]:
        """Every record Slurm has under that id (all tasks of an array); empty when unknown."""
        ...

    async def jobs_named(self, name: str) -> list[SlurmJob]:
        """Every record slurmctld has of the connection user's jobs with exactly that name (all
        tasks of arrays)."""
        ...

    async def user_jobs(self) -> list[SlurmJob]:
        """Every record slurmctld has of the connection user's jobs, whatever their names (all
        tasks of arrays)."""
        ...

    async def cancel(self, job_id: int) -> None: ...

    async def set_comment(self, job_id: int, comment: str) -> None:
        """Replace the job's comment (``scontrol update Comment=``, slurmrestd's job update)."""
        ...

    async def accounting_jobs(self, job_id: int) -> list[SlurmJob] | None:
        """Every accounting record (slurmdbd) under that id, one per attempt of a requeued job;
        None when the cluster keeps no accounting."""
        ...

    async def max_array_size(self) -> int | None:
        """The cluster's ``MaxArraySize``, or None when this transport cannot read it."""
        ...

    async def describe(self) -> str:
        """Check the connection and say what answered."""
        ...

    async def refresh_token(self) -> bool:
        """The credentials were refused: take fresh ones where there is a source; whether there is
        something new to try."""
        ...

    async def close(self) -> None: ...


def expand_user(path: str, home: str | None, login: str) -> str:
    """Expand ``~``, ``~/...`` and ``~<login>/...`` to the cluster user's home."""
    if not path.startswith("~"):
        return path
    head, sep, rest = path.partition("/")
    if head not in ("~", f"~{login}"):
        raise ValueError(f"cannot expand {head!r} in {path!r}: only the cluster user's home ('~') is known")
    if not home:
        raise SlurmError(f"cannot expand '~' in {path!r}: the cluster user's home directory is unknown")
    return home.rstrip("/") + (("/" + rest) if sep and rest else "")
