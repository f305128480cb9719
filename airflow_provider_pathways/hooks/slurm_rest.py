"""slurmrestd transport (aiohttp), and reading the cluster's files from this machine's filesystem
when it shares the cluster's paths (``shared_fs``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import aiohttp

from airflow_provider_pathways.slurm.accounting import jobs_from_slurmdb
from airflow_provider_pathways.slurm.errors import (
    SlurmApiError,
    SlurmAuthError,
    SlurmConnectionError,
    SlurmError,
)
from airflow_provider_pathways.slurm.job import SlurmJob
from airflow_provider_pathways.slurm.rest import (
    ESLURM_ALREADY_DONE,
    ESLURM_INVALID_JOB_ID,
    jobs_from_rest,
    jwt_problem,
    ping_answered,
    rest_error_numbers,
    rest_errors_text,
    rest_submit_body,
)
from airflow_provider_pathways.slurm.settings import SUPPORTED_API_RANGE, SUPPORTED_API_VERSIONS
from airflow_provider_pathways.slurm.submit import SubmitRequest, parse_sbatch_directives, path_wrapper_script

if TYPE_CHECKING:
    from airflow_provider_pathways.slurm.settings import SlurmSettings
    from airflow_provider_pathways.slurm.transport import FileAccess

log = logging.getLogger(__name__)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_HEAD_BYTES = 64 * 1024
# A token_file is read again after this long, so a rotated token is picked up (and at once when
# slurmrestd refuses the token in use).
TOKEN_FILE_REREAD_SECONDS = 300.0
# A token minted with ``token_lifespan`` is replaced once this share of its lifespan has passed.
TOKEN_RENEW_SHARE = 0.8
# Errors that say nothing specific (unspecified, lost connection to slurmctld).
_VAGUE_ERRORS = frozenset({-1, 5005, 1001, 1007})
_VERSION_IN_PATH = re.compile(r"/slurm/(v0\.0\.\d+)/")


def _doubled_response(err: aiohttp.ClientResponseError) -> bool:
    """aiohttp's complaint about data after a ``Connection: close`` answer (slurmrestd 26.05's
    second answer to an error); nothing of the request or the answer is kept."""
    return "Data after `Connection: close`" in str(err.message)


async def _first_response(
    settings: SlurmSettings,
    method: str,
    path: str,
    body: Any,
    headers: Mapping[str, str],
    *,
    timeout: float,
) -> tuple[int, bytes]:
    """One HTTP/1.1 request on its own connection; returns the status and body of the first answer
    and ignores anything the server sends after it."""
    ssl_context: Any = None
    if settings.scheme == "https":
        import ssl

        ssl_context = ssl.create_default_context()
        if not settings.verify_ssl:
            ssl_context.check_hostname = False
            ssl_context.verify_mode = ssl.CERT_NONE
    data = json.dumps(body).encode() if body is not None else b""
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {settings.host}:{settings.port}",
        "Accept: application/json",
        "Connection: close",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode() + data

    async def exchange() -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection(settings.host, settings.port, ssl=ssl_context)
        try:
            writer.write(request)
            await writer.drain()
            status_line = (await reader.readline()).decode("latin-1")
            parts = status_line.split()
            if len(parts) < 2 or not re.fullmatch(r"[0-9]{3}", parts[1], re.ASCII):
                raise SlurmConnectionError(f"slurmrestd at {settings.address} sent no HTTP status line")
            length: int | None = None
            while True:
                line = (await reader.readline()).decode("latin-1").strip()
                if not line:
                    break
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length" and re.fullmatch(r"[0-9]+", value.strip()):
                    length = int(value.strip())
            payload = await (reader.readexactly(length) if length is not None else reader.read())
            return int(parts[1]), payload
        finally:
            writer.close()

    try:
        return await asyncio.wait_for(exchange(), timeout)
    except asyncio.TimeoutError:
        raise SlurmConnectionError(
            f"slurmrestd at {settings.address} did not answer {method} {path} within {timeout:g}s"
        ) from None
    except (OSError, asyncio.IncompleteReadError) as err:
        raise SlurmConnectionError(
            f"cannot read the answer of slurmrestd at {settings.address}: {type(err).__name__}"
        ) from None


class RestTransport:
    """slurmrestd over HTTP(S) with JWT auth (``X-SLURM-USER-NAME``/``X-SLURM-USER-TOKEN``).

    The API version is detected once (``/openapi/v3``, else ``/slurm/vX/ping`` from the newest down)
    unless the connection fixes it; parsing handles every supported version by the answer's shape.
    """

    def __init__(self, settings: SlurmSettings) -> None:
        self._settings = settings
        self._base = f"{settings.scheme}://{settings.host}:{settings.port}"
        self._session: aiohttp.ClientSession | None = None
        self._version: str | None = None if settings.api_version == "auto" else settings.api_version
        self._token: str | None = (
            settings.password if not (settings.token_file or settings.token_lifespan) else None
        )
        self._token_read_at = 0.0
        self._token_renew_at = 0.0
        self._version_lock: asyncio.Lock | None = None
        self._paths: frozenset[str] | None = None
        self._accounting: bool | None = None
        self.files: FileAccess | None
        if settings.shared_fs:
            self.files = LocalFiles(settings.login)
        elif settings.ssh_host:
            from airflow_provider_pathways.hooks.slurm_ssh import SftpFiles, SshSession

            self.files = SftpFiles(SshSession(settings, settings.ssh_host, settings.ssh_port))
        else:
            self.files = None

    # ---- HTTP -----------------------------------------------------------------------------

    async def _mint_token(self) -> str:
        """A fresh token from ``scontrol token`` on the SSH host for file access."""
        from airflow_provider_pathways.hooks.slurm_ssh import scontrol_token

        s = self._settings
        session = getattr(self.files, "session", None)
        if session is None or not s.token_lifespan:  # the settings refuse this; kept for mypy
            raise SlurmAuthError("minting tokens needs ssh_host and token_lifespan")
        self._token = await scontrol_token(session, s.slurm_bin_dir, s.token_lifespan)
        self._token_renew_at = time.monotonic() + s.token_lifespan * TOKEN_RENEW_SHARE
        return self._token

    async def refresh_token(self) -> bool:
        """slurmrestd refused the token in use: take a fresh one where there is a source of them
        (a new mint, the token_file read again); whether there is a different token to try."""
        s = self._settings
        old = self._token
        if s.token_lifespan:
            return await self._mint_token() != old
        if s.token_file:
            self._token_read_at = 0.0
            return await self._token_value() != old
        return False

    async def _token_value(self) -> str:
        if self._settings.token_lifespan:
            if self._token is None or time.monotonic() >= self._token_renew_at:
                return await self._mint_token()
            return self._token
        stale = time.monotonic() - self._token_read_at > TOKEN_FILE_REREAD_SECONDS
        if self._token is None or (self._settings.token_file and stale):
            path = self._settings.token_file or ""
            try:
                text = await asyncio.to_thread(read_local, path, None)
            except OSError as err:
                raise SlurmAuthError(f"cannot read the token_file {path!r}: {err.strerror}") from None
            if text is None:
                raise SlurmAuthError(f"the token_file {path!r} does not exist")
            # `scontrol token > file` writes `SLURM_JWT=<token>`: the line as printed is accepted.
            self._token = text.decode().strip().removeprefix("SLURM_JWT=").strip()
            self._token_read_at = time.monotonic()
            if not self._token:
                raise SlurmAuthError(f"the token_file {path!r} is empty")
        return self._token

    async def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            s = self._settings
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=s.request_timeout, sock_connect=s.connect_timeout),
                headers={"Accept": "application/json"},
            )
        return self._session

    async def _request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One request; returns ``(status, parsed JSON or None)``; transport errors become
        :class:`SlurmConnectionError` naming host:port, 401/403 :class:`SlurmAuthError`."""
        s = self._settings
        token = await self._token_value()
        session = await self._client()
        headers = {"X-SLURM-USER-NAME": s.login, "X-SLURM-USER-TOKEN": token}
        ssl: Any = None if s.verify_ssl else False
        try:
            async with session.request(
                method, self._base + path, json=body, headers=headers, ssl=ssl
            ) as response:
                status = response.status
                raw = await response.read()
        except aiohttp.ClientConnectorError as err:
            reason = err.os_error.strerror if err.os_error and err.os_error.strerror else str(err.os_error)
            raise SlurmConnectionError(f"cannot reach slurmrestd at {s.address}: {reason}") from None
        except asyncio.TimeoutError:
            raise SlurmConnectionError(
                f"slurmrestd at {s.address} did not answer {method} {path} within {s.request_timeout:g}s"
            ) from None
        except aiohttp.ClientResponseError as err:
            if not _doubled_response(err):
                raise SlurmConnectionError(
                    f"HTTP error talking to slurmrestd at {s.address}: {type(err).__name__}"
                ) from None
            # slurmrestd 26.05 follows an error answer (4xx/5xx, "Connection: Close") with a second,
            # plain-text one on the same connection, which aiohttp refuses: ask again, keep the first.
            status, raw = await _first_response(
                self._settings, method, path, body, headers, timeout=s.request_timeout
            )
        except aiohttp.ClientError as err:
            raise SlurmConnectionError(
                f"HTTP error talking to slurmrestd at {s.address}: {type(err).__name__}"
            ) from None
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = None
        # 511 (Network Authentication Required): slurmctld refused the token (slurmrestd 24.11+).
        if status in (401, 403, 511):
            raise SlurmAuthError(
                f"slurmrestd at {s.address} rejected the token ({status}) for user {s.login!r}: "
                f"{jwt_problem(token, s.login)}"
            )
        return status, payload

    async def _error(self, what: str, status: int, payload: Any, *, probe: bool = True) -> SlurmError:
        """The exception for a failed call. Slurm 22.05 lets slurmctld judge the token, which then
        answers HTTP 500 with "Unspecified error" (or a broken connection on submit): for a 5xx
        answer without a specific error, a ping tells whether the token is the problem."""
        s = self._settings
        errors = payload.get("errors") if isinstance(payload, Mapping) else None
        text = rest_errors_text(errors or ())
        numbers = rest_error_numbers(errors or ())
        # 22.05: HTTP 500 with only "Unspecified error" [-1]; 24.11 and later: HTTP 511 (Network
        # Authentication Required) with SLURM_PROTOCOL_AUTHENTICATION_ERROR [1007].
        rejected = (status >= 500 and bool(errors) and numbers <= {-1}) or status == 511
        if not rejected and probe and status >= 500 and numbers <= _VAGUE_ERRORS:
            version = await self.api_version()
            ping_status, ping_payload = await self._request("GET", f"/slurm/{version}/ping")
            ping_errors = ping_payload.get("errors") if isinstance(ping_payload, Mapping) else None
            rejected = (
                ping_status >= 500 and bool(ping_errors) and rest_error_numbers(ping_errors or ()) <= {-1}
            )
        if rejected:
            return SlurmAuthError(
                f"slurmrestd at {s.address} rejected the token of user {s.login!r} "
                f"(HTTP {status} while trying to {what}: {text}): {jwt_problem(self._token or '', s.login)}"
            )
        return SlurmApiError(
            f"slurmrestd at {s.address} could not {what} (HTTP {status}): {text}",
            status=status,
            errors=errors or (),
        )

    async def api_version(self) -> str:
        """The API version in use (detected on first call when ``auto``)."""
        if self._version is not None:
            return self._version
        if self._version_lock is None:
            self._version_lock = asyncio.Lock()
        async with self._version_lock:
            if self._version is None:
                self._version = await self._detect_version()
        return self._version

    async def _openapi_paths(self) -> frozenset[str]:
        """The paths of slurmrestd's OpenAPI document (read once; empty when it has none)."""
        if self._paths is None:
            paths: frozenset[str] = frozenset()
            for path in ("/openapi/v3", "/openapi.json", "/openapi"):
                status, payload = await self._request("GET", path)
                if (
                    status == 200
                    and isinstance(payload, Mapping)
                    and isinstance(payload.get("paths"), Mapping)
                ):
                    paths = frozenset(str(p) for p in payload["paths"])
                    break
            self._paths = paths
        return self._paths

    async def _offers(self, path: str) -> bool:
        """slurmrestd serves ``path`` (e.g. ``/slurmdb/v0.0.42/job/{job_id}``): known from its OpenAPI
        document, else by asking (404 = no such endpoint)."""
        paths = await self._openapi_paths()
        if paths:
            return path in paths or path.rstrip("/") + "/" in paths
        status, _payload = await self._request("GET", path.replace("{job_id}", "0"))
        return status != 404

    async def _detect_version(self) -> str:
        """The highest API version both slurmrestd and this hook speak."""
        paths = await self._openapi_paths()
        offered = {m.group(1) for p in paths for m in [_VERSION_IN_PATH.search(p)] if m}
        for version in SUPPORTED_API_VERSIONS:
            if version in offered:
                return version
        if offered:
            raise SlurmApiError(
                f"slurmrestd at {self._settings.address} offers {', '.join(sorted(offered))}; "
                f"this hook supports {SUPPORTED_API_RANGE}"
            )
        for version in SUPPORTED_API_VERSIONS:  # no OpenAPI document: probe
            status, _payload = await self._request("GET", f"/slurm/{version}/ping")
            if status != 404:
                return version
        raise SlurmApiError(f"slurmrestd at {self._settings.address} answers none of {SUPPORTED_API_RANGE}")

    # ---- transport API --------------------------------------------------------------------

    async def jobs(self, job_id: int) -> list[SlurmJob]:
        version = await self.api_version()
        status, payload = await self._request("GET", f"/slurm/{version}/job/{job_id}")
        errors = payload.get("errors") if isinstance(payload, Mapping) else None
        if status == 404 or ESLURM_INVALID_JOB_ID in rest_error_numbers(errors or ()):
            return []
        if status != 200 or not isinstance(payload, Mapping) or errors:
            raise await self._error(f"read job {job_id}", status, payload)
        return jobs_from_rest(payload)

    async def jobs_named(self, name: str) -> list[SlurmJob]:
        """``GET /slurm/vX/jobs`` (no version filters by user or name) narrowed to the login user's
        records with that name before they are read."""
        return await self._user_records(f"list the jobs named {name!r}", name)

    async def user_jobs(self) -> list[SlurmJob]:
        """``GET /slurm/vX/jobs`` narrowed to the login user's records before they are read."""
        return await self._user_records("list the jobs of the connection's user")

    async def _user_records(self, what: str, name: str | None = None) -> list[SlurmJob]:
        version = await self.api_version()
        status, payload = await self._request("GET", f"/slurm/{version}/jobs")
        errors = payload.get("errors") if isinstance(payload, Mapping) else None
        if status != 200 or not isinstance(payload, Mapping) or errors:
            raise await self._error(what, status, payload)
        login = self._settings.login
        records = [
            record
            for record in payload.get("jobs") or []
            if isinstance(record, Mapping)
            and record.get("user_name") == login
            and (name is None or record.get("name") == name)
        ]
        return jobs_from_rest({"jobs": records})

    async def cancel(self, job_id: int) -> None:
        version = await self.api_version()
        status, payload = await self._request("DELETE", f"/slurm/{version}/job/{job_id}")
        errors = payload.get("errors") if isinstance(payload, Mapping) else None
        if rest_error_numbers(errors or ()) & {ESLURM_INVALID_JOB_ID, ESLURM_ALREADY_DONE}:
            return
        if status != 200 or errors:
            raise await self._error(f"cancel job {job_id}", status, payload)

    async def set_comment(self, job_id: int, comment: str) -> None:
        version = await self.api_version()
        status, payload = await self._request("POST", f"/slurm/{version}/job/{job_id}", {"comment": comment})
        errors = payload.get("errors") if isinstance(payload, Mapping) else None
        if status != 200 or errors:
            raise await self._error(f"update the comment of job {job_id}", status, payload)

    async def submit(self, request: SubmitRequest) -> int:
        s = self._settings
        version = await self.api_version()
        home = await self.files.home() if self.files is not None else None
        if request.script is not None:
            head = request.script
        else:
            data = await self.files.read(request.script_path or "", None) if self.files is not None else None
            head = (data or b"")[:_HEAD_BYTES].decode("utf-8", errors="replace")
        # slurmrestd ignores #SBATCH lines (sbatch reads them client-side): apply what maps to fields.
        request, ignored = request.with_directives(parse_sbatch_directives(head))
        if ignored:
            log.warning(
                "slurmrestd cannot apply these #SBATCH options of %s; pass them as parameters: %s",
                request.script_path or "the script",
                " ".join(ignored),
            )
        script = (
            request.script if request.script is not None else path_wrapper_script(request.script_path or "")
        )
        environment = {"PATH": DEFAULT_PATH, "USER": s.login, "LOGNAME": s.login}
        if home:
            environment["HOME"] = home
        environment.update(request.environment)
        working_directory = request.working_directory or home
        if not working_directory:
            raise ValueError(
                "working_directory is required: slurmrestd needs one and the cluster user's home is unknown"
            )
        body = rest_submit_body(
            request,
            api_version=version,
            script=script,
            environment=environment,
            working_directory=working_directory,
        )
        status, payload = await self._request("POST", f"/slurm/{version}/job/submit", body)
        job_id = None
        if isinstance(payload, Mapping):
            job_id = payload.get("job_id")
            if job_id is None and isinstance(payload.get("result"), Mapping):
                job_id = payload["result"].get("job_id")
        # A submitted job may come with "errors" that are notes (e.g. 2042: held at submission).
        if status != 200 or not isinstance(job_id, int) or job_id <= 0:
            raise await self._error(f"submit job {request.display_name!r}", status, payload)
        return job_id

    async def accounting_jobs(self, job_id: int) -> list[SlurmJob] | None:
        """``GET /slurmdb/vX/job/{id}`` (every attempt of a requeued job), or None when this
        slurmrestd has no accounting endpoints (the cluster has no slurmdbd, or slurmrestd runs
        without ``openapi/slurmdbd``)."""
        version = await self.api_version()
        if self._accounting is None:
            self._accounting = await self._offers(f"/slurmdb/{version}/job/{{job_id}}")
        if not self._accounting:
            return None
        status, payload = await self._request("GET", f"/slurmdb/{version}/job/{job_id}")
        errors = payload.get("errors") if isinstance(payload, Mapping) else None
        if status == 404 or ESLURM_INVALID_JOB_ID in rest_error_numbers(errors or ()):
            return []
        if status != 200 or not isinstance(payload, Mapping) or errors:
            raise await self._error(f"read job {job_id} from accounting", status, payload)
        return jobs_from_slurmdb(payload)

    async def max_array_size(self) -> int | None:
        """``MaxArraySize`` from ``GET /slurm/vX/conf`` (v0.0.45 on), else over SSH when the connection
        has ``ssh_host``, else None."""
        version = await self.api_version()
        if await self._offers(f"/slurm/{version}/conf"):
            status, payload = await self._request("GET", f"/slurm/{version}/conf")
            errors = payload.get("errors") if isinstance(payload, Mapping) else None
            if status != 200 or not isinstance(payload, Mapping) or errors:
                raise await self._error("read the configuration", status, payload)
            conf = payload.get("slurm_conf")
            value = conf.get("MaxArraySize") if isinstance(conf, Mapping) else None
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            raise SlurmApiError(f"slurmrestd at {self._settings.address}: no MaxArraySize in {version}/conf")
        files = self.files
        if files is not None and hasattr(files, "session"):
            from airflow_provider_pathways.hooks.slurm_ssh import scontrol_max_array_size

            return await scontrol_max_array_size(files.session, self._settings.slurm_bin_dir)
        return None

    async def describe(self) -> str:
        s = self._settings
        version = await self.api_version()
        status, payload = await self._request("GET", f"/slurm/{version}/ping")
        errors = payload.get("errors") if isinstance(payload, Mapping) else None
        if status != 200 or errors:
            raise await self._error("answer ping", status, payload, probe=False)
        if not ping_answered(payload):
            # From 24.11 on, ping answers 200 even when slurmctld refused the token ("pinged": "DOWN",
            # or "status": "Protocol authentication error"): a call that needs the token tells.
            status, payload = await self._request("GET", f"/slurm/{version}/diag")
            errors = payload.get("errors") if isinstance(payload, Mapping) else None
            if status != 200 or errors:
                raise await self._error("answer diag", status, payload, probe=False)
            raise SlurmConnectionError(f"slurmrestd at {s.address} answers, but slurmctld does not")
        release = ""
        if isinstance(payload, Mapping):
            meta = payload.get("meta") or {}
            slurm = meta.get("Slurm") or meta.get("slurm") or {}
            release = (
                f" (Slurm {slurm.get('release')})"
                if isinstance(slurm, Mapping) and slurm.get("release")
                else ""
            )
        files = ""
        if self.files is not None:
            home = await self.files.home()
            files = f"; files via {self.files.description}" + (f", home {home}" if home else "")
        return f"slurmrestd {version} at {s.address}{release} accepted the token of user {s.login!r}{files}"

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self.files is not None:
            await self.files.close()


class LocalFiles:
    """Files on this machine, which shares the cluster's paths (REST with ``shared_fs``).

    Reads run in a worker thread so the event loop never blocks.
    """

    description = "this machine's filesystem (shared_fs)"

    def __init__(self, login: str) -> None:
        self._login = login
        self._home: str | None = None

    async def home(self) -> str | None:
        if self._home is None:
            try:
                self._home = (await asyncio.to_thread(pwd.getpwnam, self._login)).pw_dir
            except KeyError:
                return None
        return self._home

    async def read(self, path: str, tail_bytes: int | None) -> bytes | None:
        return await asyncio.to_thread(read_local, path, tail_bytes)

    async def stat(self, path: str) -> tuple[float, int] | None:
        try:
            st = await asyncio.to_thread(os.stat, path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st.st_mtime, st.st_size

    async def close(self) -> None:
        return None


def read_local(path: str, tail_bytes: int | None) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            if tail_bytes is not None:
                size = os.fstat(handle.fileno()).st_size
                handle.seek(max(0, size - tail_bytes))
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
