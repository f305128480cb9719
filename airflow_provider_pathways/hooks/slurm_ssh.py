"""SSH transport (asyncssh): Slurm commands on a login node, files over SFTP."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import posixpath
import re
import shlex
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import asyncssh

from airflow_provider_pathways.slurm.accounting import SACCT_DELIMITER, SACCT_FIELDS, jobs_from_sacct
from airflow_provider_pathways.slurm.errors import (
    SlurmAuthError,
    SlurmCommandError,
    SlurmConnectionError,
    SlurmError,
    SlurmHostKeyError,
)
from airflow_provider_pathways.slurm.job import SlurmJob, jobs_from_scontrol
from airflow_provider_pathways.slurm.submit import SubmitRequest, parse_sbatch_directives

if TYPE_CHECKING:
    from airflow_provider_pathways.slurm.settings import SlurmSettings

# asyncssh logs every channel at INFO (commands included); keep task logs readable unless the
# deployment configured that logger itself.
if logging.getLogger("asyncssh").level == logging.NOTSET:
    logging.getLogger("asyncssh").setLevel(logging.WARNING)

#: Where submissions are staged in the cluster user's home (scripts and env files, mode 0700).
STAGING_DIR = ".airflow-pathways/submit"
_HEAD_BYTES = 64 * 1024
_GONE = ("Invalid job id specified", "already completing or completed", "Job/step already completing")
_NO_FILE = (asyncssh.sftp.FX_NO_SUCH_FILE, asyncssh.sftp.FX_NO_SUCH_PATH)
#: Seconds to wait for a closed connection and its SFTP channel to finish.
_CLOSE_WAIT = 5.0
_DROPPED = (asyncssh.ConnectionLost, asyncssh.ChannelOpenError, BrokenPipeError, ConnectionResetError)


_KEY_TYPE = re.compile(r"(?:^|\s)(?:ssh-|ecdsa-|sk-|@cert-authority|@revoked)")


def _looks_like_known_hosts_text(value: str) -> bool:
    """known_hosts content (``host key-type key`` lines) rather than a path; no filesystem access."""
    return "\n" in value.strip() or bool(_KEY_TYPE.search(value))


class SshSession:
    """One SSH connection (and its SFTP client), opened on first use and reopened after a drop.

    Host keys are checked strictly against the connection's ``known_hosts`` (text or path; else
    ``~/.ssh/known_hosts``) unless ``strict_host_key_checking`` is false.
    """

    def __init__(self, settings: SlurmSettings, host: str, port: int) -> None:
        self._settings = settings
        self.host = host
        self.port = port
        self._conn: asyncssh.SSHClientConnection | None = None
        self._sftp: asyncssh.SFTPClient | None = None
        self._lock: asyncio.Lock | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _options(self) -> dict[str, Any]:
        s = self._settings
        options: dict[str, Any] = {
            "username": s.login,
            "port": self.port,
            "config": None,
            "connect_timeout": s.connect_timeout,
            "login_timeout": max(s.connect_timeout, 30.0),
            "keepalive_interval": 30,
        }
        if not s.strict_host_key_checking:
            options["known_hosts"] = None
        elif s.known_hosts:
            if _looks_like_known_hosts_text(s.known_hosts):
                options["known_hosts"] = asyncssh.import_known_hosts(s.known_hosts)
            else:
                options["known_hosts"] = s.known_hosts
        try:
            if s.private_key:
                options["client_keys"] = [
                    asyncssh.import_private_key(s.private_key, s.private_key_passphrase)
                ]
            elif s.key_file:
                key = await asyncio.to_thread(asyncssh.read_private_key, s.key_file, s.private_key_passphrase)
                options["client_keys"] = [key]
        except (asyncssh.KeyImportError, ValueError) as err:
            source = "private_key" if s.private_key else f"key_file {s.key_file!r}"
            raise SlurmAuthError(
                f"the SSH {source} of connection {s.conn_id!r} could not be loaded "
                f"(wrong format or passphrase): {type(err).__name__}"
            ) from None
        except OSError as err:
            raise SlurmAuthError(f"cannot read key_file {s.key_file!r}: {err.strerror}") from None
        if s.private_key or s.key_file:
            options["agent_path"] = None
        if s.transport == "ssh" and s.password:
            options["password"] = s.password
        return options

    async def connection(self) -> asyncssh.SSHClientConnection:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            self._sftp = None
            s = self._settings
            try:
                self._conn = await asyncssh.connect(self.host, **(await self._options()))
            except asyncssh.HostKeyNotVerifiable as err:
                raise SlurmHostKeyError(
                    f"the SSH host key of {self.address} is not trusted ({err.reason}); add it to the "
                    f"known_hosts of connection {s.conn_id!r} (strict host key checking is on)"
                ) from None
            except asyncssh.PermissionDenied:
                raise SlurmAuthError(
                    f"SSH login as {s.login!r} at {self.address} was refused: "
                    "the key or password was not accepted"
                ) from None
            except asyncssh.DisconnectError as err:
                raise SlurmConnectionError(f"SSH connection to {self.address} failed: {err.reason}") from None
            except (asyncio.TimeoutError, TimeoutError):
                raise SlurmConnectionError(
                    f"cannot reach the SSH server at {self.address}: no answer within {s.connect_timeout:g}s"
                ) from None
            except OSError as err:
                reason = err.strerror or type(err).__name__
                raise SlurmConnectionError(
                    f"cannot reach the SSH server at {self.address}: {reason}"
                ) from None
            return self._conn

    async def run(self, command: str, *, retry: bool = True) -> tuple[int | None, str, str]:
        """Run a command line (already quoted); ``(exit status, stdout, stderr)``. A dropped
        connection is reopened and the command retried once when ``retry`` (idempotent commands).

        A connection cut while the command runs ends in asyncssh either with an exception or with
        a channel closed before sshd sent an exit status or signal (RFC 4254 6.10): both are a lost
        connection, never the command's own failure."""
        for attempt in (1, 2):
            conn = await self.connection()
            try:
                result = await conn.run(
                    command, check=False, timeout=self._settings.command_timeout, errors="replace"
                )
                lost = "no exit status" if result.exit_status is None and result.exit_signal is None else None
            except _DROPPED as err:
                lost = type(err).__name__
            except asyncssh.TimeoutError:
                raise SlurmCommandError(
                    f"command on {self.address} did not finish within {self._settings.command_timeout:g}s: "
                    f"{command.split(' ', 1)[0]}"
                ) from None
            if lost is None:
                return result.exit_status, str(result.stdout or ""), str(result.stderr or "")
            await self.close()
            if not retry or attempt == 2:
                raise SlurmConnectionError(f"SSH connection to {self.address} was lost: {lost}")
        raise AssertionError("unreachable")

    async def sftp(self) -> asyncssh.SFTPClient:
        conn = await self.connection()
        if self._sftp is None:
            try:
                self._sftp = await conn.start_sftp_client()
            except _DROPPED:
                await self.close()
                conn = await self.connection()
                self._sftp = await conn.start_sftp_client()
            except asyncssh.Error as err:
                raise SlurmConnectionError(f"SFTP is not available at {self.address}: {err.reason}") from None
        return self._sftp

    async def close(self) -> None:
        """Forget the connection (lost, replaced or done with) and close it; the next use reopens it."""
        conn, sftp, self._conn, self._sftp = self._conn, self._sftp, None, None
        if sftp is not None:
            sftp.exit()
        if conn is not None:
            conn.close()
            # Closing aborts the socket, so this returns at once even across a partition; the wait
            # lets the SFTP client's reader task end instead of being destroyed with the loop.
            with contextlib.suppress(asyncio.TimeoutError, asyncssh.Error, OSError):
                await asyncio.wait_for(conn.wait_closed(), _CLOSE_WAIT)
                if sftp is not None:
                    await asyncio.wait_for(sftp.wait_closed(), _CLOSE_WAIT)


class SftpFiles:
    """Files of the cluster read over SFTP (relative paths are relative to the user's home)."""

    def __init__(self, session: SshSession) -> None:
        self.session = session
        self.description = f"SFTP at {session.address}"
        self._home: str | None = None

    async def home(self) -> str | None:
        if self._home is None:
            sftp = await self.session.sftp()
            self._home = await sftp.realpath(".")
        return self._home

    async def read(self, path: str, tail_bytes: int | None) -> bytes | None:
        sftp = await self.session.sftp()
        try:
            async with sftp.open(path, "rb") as handle:
                if tail_bytes is not None:
                    size = (await handle.stat()).size or 0
                    await handle.seek(max(0, size - tail_bytes))
                data = await handle.read()
                return data if isinstance(data, bytes) else data.encode()
        except asyncssh.SFTPError as err:
            if err.code in _NO_FILE:
                return None
            raise SlurmError(
                f"cannot read {path!r} over SFTP at {self.session.address}: {err.reason}"
            ) from None

    async def stat(self, path: str) -> tuple[float, int] | None:
        sftp = await self.session.sftp()
        try:
            attrs = await sftp.stat(path)
        except asyncssh.SFTPError as err:
            if err.code in _NO_FILE:
                return None
            raise SlurmError(
                f"cannot stat {path!r} over SFTP at {self.session.address}: {err.reason}"
            ) from None
        return float(attrs.mtime or 0), int(attrs.size or 0)

    async def write(self, path: str, data: str, mode: int) -> None:
        sftp = await self.session.sftp()
        async with sftp.open(path, "w", asyncssh.SFTPAttrs(permissions=mode)) as handle:
            await handle.write(data)
        await sftp.chmod(path, mode)

    async def close(self) -> None:
        await self.session.close()


_NO_ACCOUNTING = "accounting storage is disabled"
_MAX_ARRAY_SIZE = re.compile(r"MaxArraySize\s*=\s*([0-9]+)", re.ASCII)


async def scontrol_token(session: SshSession, bin_dir: str | None, lifespan: int) -> str:
    """A fresh JWT for the login user: ``scontrol token lifespan=N`` on the login node."""
    scontrol = posixpath.join(bin_dir, "scontrol") if bin_dir else "scontrol"
    status, out, err = await session.run(shlex.join([scontrol, "token", f"lifespan={lifespan}"]))
    token = out.strip().removeprefix("SLURM_JWT=").strip()
    if status != 0 or not token or any(c.isspace() for c in token):
        raise SlurmAuthError(
            f"scontrol token on {session.address} gave no token (exit {status}): {err.strip()[:300]}"
        )
    return token


async def scontrol_max_array_size(session: SshSession, bin_dir: str | None) -> int:
    """``MaxArraySize`` from ``scontrol show config`` on the login node."""
    scontrol = posixpath.join(bin_dir, "scontrol") if bin_dir else "scontrol"
    status, out, err = await session.run(shlex.join([scontrol, "show", "config"]))
    values = [
        int(m.group(1)) for line in out.splitlines() for m in [_MAX_ARRAY_SIZE.fullmatch(line.strip())] if m
    ]
    if status != 0 or len(values) != 1:
        raise SlurmCommandError(
            f"scontrol show config on {session.address} gave no MaxArraySize (exit {status}): {err.strip()}",
            exit_status=status,
            stderr=err,
        )
    return values[0]


class SshTransport:
    """Slurm commands over SSH: ``sbatch --parsable``, ``scontrol -o show job``, ``scancel``,
    ``sacct`` (accounting, once slurmctld forgot a job)."""

    def __init__(self, settings: SlurmSettings) -> None:
        self._settings = settings
        self.session = SshSession(settings, settings.host, settings.port)
        self.files = SftpFiles(self.session)
        self._bin = settings.slurm_bin_dir
        self._accounting: bool | None = None

    def _cmd(self, name: str) -> str:
        return posixpath.join(self._bin, name) if self._bin else name

    async def refresh_token(self) -> bool:
        """SSH logs in with a key or password: there is no token to refresh."""
        return False

    async def jobs(self, job_id: int) -> list[SlurmJob]:
        command = shlex.join(
            ["env", "SLURM_TIME_FORMAT=%s", self._cmd("scontrol"), "-o", "show", "job", str(job_id)]
        )
        status, out, err = await self.session.run(command)
        if status != 0:
            if any(marker in err for marker in _GONE):
                return []
            raise SlurmCommandError(
                f"scontrol show job {job_id} failed on {self.session.address} (exit {status}): {err.strip()}",
                exit_status=status,
                stderr=err,
            )
        return jobs_from_scontrol(out)

    async def jobs_named(self, name: str) -> list[SlurmJob]:
        """``squeue -u LOGIN -n NAME`` for the (array) job ids, then ``scontrol -o show job`` for each
        (every task of an array); records that ended in between are simply absent."""
        records = await self._user_records(["-n", name], f"squeue -n {name}")
        # squeue splits -n at commas: keep only this exact name.
        return [job for job in records if job.name == name]

    async def user_jobs(self) -> list[SlurmJob]:
        """``squeue -u LOGIN`` for the (array) job ids, then ``scontrol -o show job`` for each."""
        return await self._user_records([], "squeue -u")

    async def _user_records(self, narrow: list[str], what: str) -> list[SlurmJob]:
        login = self._settings.login
        command = shlex.join([self._cmd("squeue"), "-h", "-t", "all", "-u", login, *narrow, "-o", "%F"])
        status, out, err = await self.session.run(command)
        if status != 0:
            raise SlurmCommandError(
                f"{what} failed on {self.session.address} (exit {status}): {err.strip()}",
                exit_status=status,
                stderr=err,
            )
        ids = sorted({int(word) for word in out.split() if word.isdigit()})
        records = [job for job_id in ids for job in await self.jobs(job_id)]
        return [job for job in records if job.user in (None, login)]

    async def accounting_jobs(self, job_id: int) -> list[SlurmJob] | None:
        """``sacct -D`` (every attempt of a requeued job, no ``-X``: the first attempt reads
        ``REQUEUED``, the last one has the true end), or None when the cluster keeps no accounting
        ("Slurm accounting storage is disabled")."""
        if self._accounting is False:
            return None
        command = shlex.join(
            [
                "env",
                "SLURM_TIME_FORMAT=%s",
                self._cmd("sacct"),
                "-D",
                "-P",
                "-n",
                f"--delimiter={SACCT_DELIMITER}",
                f"--format={','.join(SACCT_FIELDS)}",
                f"--jobs={job_id}",
            ]
        )
        status, out, err = await self.session.run(command)
        if status != 0 or _NO_ACCOUNTING in out:
            if _NO_ACCOUNTING in err or _NO_ACCOUNTING in out:
                self._accounting = False
                return None
            raise SlurmCommandError(
                f"sacct --jobs={job_id} failed on {self.session.address} (exit {status}): {err.strip()}",
                exit_status=status,
                stderr=err,
            )
        self._accounting = True
        return jobs_from_sacct(out)

    async def max_array_size(self) -> int | None:
        """``MaxArraySize`` from ``scontrol show config``."""
        return await scontrol_max_array_size(self.session, self._bin)

    async def cancel(self, job_id: int) -> None:
        status, _out, err = await self.session.run(shlex.join([self._cmd("scancel"), str(job_id)]))
        if status != 0 and not any(marker in err for marker in _GONE):
            raise SlurmCommandError(
                f"scancel {job_id} failed on {self.session.address} (exit {status}): {err.strip()}",
                exit_status=status,
                stderr=err,
            )

    async def set_comment(self, job_id: int, comment: str) -> None:
        command = shlex.join([self._cmd("scontrol"), "update", f"JobId={job_id}", f"Comment={comment}"])
        status, _out, err = await self.session.run(command)
        if status != 0:
            raise SlurmCommandError(
                f"scontrol update JobId={job_id} Comment=... failed on {self.session.address} "
                f"(exit {status}): {err.strip()}",
                exit_status=status,
                stderr=err,
            )

    async def submit(self, request: SubmitRequest) -> int:
        """Stage the script (if text) and a launcher in ``~/.airflow-pathways/submit/<uuid>/`` over
        SFTP, run the launcher with ``/bin/sh``, remove the staging dir. Environment values only live
        in the launcher file (``export K='...'`` lines), never on a command line."""
        home = await self.files.home()
        if not home:
            raise SlurmError(f"cannot find the home directory of {self._settings.login!r} over SFTP")
        sftp = await self.session.sftp()
        staging = posixpath.join(home, STAGING_DIR, uuid.uuid4().hex)
        await sftp.makedirs(staging, attrs=asyncssh.SFTPAttrs(permissions=0o700), exist_ok=True)
        await sftp.chmod(staging, 0o700)
        try:
            if request.script is not None:
                target = posixpath.join(staging, "job.sh")
                await self.files.write(target, request.script, 0o700)
                head = request.script
            else:
                target = request.script_path or ""
                head = ((await self.files.read(target, None)) or b"")[:_HEAD_BYTES].decode(errors="replace")
            launcher = posixpath.join(staging, "submit.sh")
            directives = parse_sbatch_directives(head)
            await self.files.write(launcher, self._launcher(request, target, directives), 0o700)
            status, out, err = await self.session.run(shlex.join(["/bin/sh", launcher]), retry=False)
        finally:
            await self._remove_tree(staging)
        if status != 0:
            raise SlurmCommandError(
                f"sbatch refused job {request.display_name!r} on {self.session.address} "
                f"(exit {status}): {err.strip()}",
                exit_status=status,
                stderr=err,
            )
        lines = [line.strip() for line in out.splitlines() if line.strip()]
        first = lines[-1].split(";", 1)[0] if lines else ""
        if not re.fullmatch(r"[0-9]+", first, re.ASCII):
            raise SlurmCommandError(f"sbatch printed no job id: {out.strip()!r} {err.strip()!r}", stderr=err)
        return int(first)

    def _launcher(self, request: SubmitRequest, target: str, directives: Mapping[str, str]) -> str:
        sbatch = self._cmd("sbatch")
        lines = [
            "#!/bin/sh",
            "# Generated by airflow-provider-pathways: submit one job with this environment.",
            f"__airflow_sbatch=$(command -v {shlex.quote(sbatch)}) || "
            f"{{ echo {shlex.quote(sbatch + ' not found on PATH')} >&2; exit 127; }}",
        ]
        lines += [f"export {key}={shlex.quote(value)}" for key, value in request.environment.items()]
        args = [*request.sbatch_options(directives), target]
        lines.append('exec "$__airflow_sbatch" ' + " ".join(shlex.quote(arg) for arg in args))
        return "\n".join(lines) + "\n"

    async def _remove_tree(self, path: str) -> None:
        try:
            sftp = await self.session.sftp()
            for name in await sftp.listdir(path):
                if name not in (".", ".."):
                    await sftp.remove(posixpath.join(path, name))
            await sftp.rmdir(path)
        except (asyncssh.Error, SlurmError, OSError):
            pass  # best effort: a leftover staging dir is harmless

    async def describe(self) -> str:
        status, out, err = await self.session.run(shlex.join([self._cmd("scontrol"), "--version"]))
        if status != 0:
            raise SlurmCommandError(
                f"scontrol is not usable on {self.session.address} (exit {status}): {err.strip()}",
                exit_status=status,
                stderr=err,
            )
        home = await self.files.home()
        return (
            f"SSH {self._settings.login}@{self.session.address}: {out.strip()}; files via SFTP, home {home}"
        )

    async def close(self) -> None:
        await self.session.close()
