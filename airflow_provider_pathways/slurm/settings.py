"""A Slurm connection's settings, read and checked from an Airflow connection's fields, and the
slurmrestd API versions the provider speaks."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk.definitions.connection import Connection


DEFAULT_REST_PORT = 6820
DEFAULT_SSH_PORT = 22
TRANSPORTS = ("rest", "ssh")


def api_version_number(version: str) -> int:
    """``v0.0.40`` → 40."""
    match = re.fullmatch(r"v0\.0\.(\d+)", version)
    if not match:
        raise ValueError(f"not a slurmrestd API version: {version!r} (expected e.g. 'v0.0.40')")
    return int(match.group(1))


#: slurmrestd API versions the provider speaks, newest first: v0.0.38 (Slurm 22.05) to v0.0.45 (26.05).
SUPPORTED_API_VERSIONS = tuple(f"v0.0.{n}" for n in range(45, 37, -1))
SUPPORTED_API_RANGE = f"{SUPPORTED_API_VERSIONS[-1]}..{SUPPORTED_API_VERSIONS[0]}"


def _positive_int(value: Any, name: str, fail: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        raise fail(f"extra {name!r} must be a whole number of seconds, got {value!r}") from None
    if number < 1:
        raise fail(f"extra {name!r} must be at least 1 second, got {number}")
    return number


def _bool(value: Any, default: bool, name: str) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"extra {name!r} must be true or false, got {value!r}")


@dataclass(frozen=True)
class SlurmSettings:
    """What the hook needs from the Airflow connection (secrets are kept out of ``repr``)."""

    conn_id: str
    host: str
    port: int
    login: str
    transport: str = "rest"
    password: str | None = dataclasses.field(default=None, repr=False)
    # REST
    api_version: str = "auto"
    scheme: str = "http"
    verify_ssl: bool = True
    token_file: str | None = None
    # Mint tokens of this lifespan (seconds) with ``scontrol token`` on ssh_host, renewed before
    # they expire and when slurmrestd refuses one.
    token_lifespan: int | None = None
    # Whether this machine sees the cluster's filesystem: never assumed (Airflow off the cluster,
    # e.g. Cloud Composer, does not).
    shared_fs: bool = False
    # SSH (the SSH transport, or file access for REST through ssh_host)
    ssh_host: str | None = None
    ssh_port: int = DEFAULT_SSH_PORT
    private_key: str | None = dataclasses.field(default=None, repr=False)
    private_key_passphrase: str | None = dataclasses.field(default=None, repr=False)
    key_file: str | None = None
    known_hosts: str | None = None
    strict_host_key_checking: bool = True
    slurm_bin_dir: str | None = None
    connect_timeout: float = 15.0
    command_timeout: float = 120.0
    request_timeout: float = 60.0

    @property
    def secrets(self) -> tuple[str, ...]:
        """Secret strings of this connection (to check messages against)."""
        return tuple(s for s in (self.password, self.private_key, self.private_key_passphrase) if s)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def from_connection(cls, conn: Connection) -> SlurmSettings:
        """Validate and read the connection; errors name the connection and the field."""
        conn_id = conn.conn_id or "?"
        raw_extra: Mapping[str, Any] = conn.extra_dejson or {}
        # Form fields may arrive prefixed (extra__pathways_slurm__<name>); a bare key wins.
        prefix = "extra__pathways_slurm__"
        extra = {k.removeprefix(prefix): v for k, v in raw_extra.items() if k.startswith(prefix)}
        extra.update({k: v for k, v in raw_extra.items() if not k.startswith(prefix)})

        def fail(message: str) -> ValueError:
            return ValueError(f"Slurm connection {conn_id!r}: {message}")

        transport = str(extra.get("transport") or default("transport")).strip().lower()
        if transport not in TRANSPORTS:
            raise fail(f"extra 'transport' must be 'rest' or 'ssh', got {transport!r}")
        host = (conn.host or "").strip()
        scheme = str(extra.get("scheme") or "").strip().lower() or None
        host_scheme = None
        if "://" in host:
            host_scheme, _, host = host.partition("://")
            host_scheme = host_scheme.lower()
            host = host.rstrip("/")
            if host_scheme not in ("http", "https"):
                raise fail("host must start with http:// or https:// when it names a scheme")
        if not host:
            raise fail("host is required")
        if scheme not in (None, "http", "https"):
            raise fail("extra 'scheme' must be 'http' or 'https'")
        login = (conn.login or "").strip()
        if not login:
            raise fail("login (the cluster user) is required")
        default_port = DEFAULT_REST_PORT if transport == "rest" else DEFAULT_SSH_PORT
        try:
            port = int(conn.port or extra.get("port") or default_port)
            ssh_port = int(extra.get("ssh_port") or (port if transport == "ssh" else DEFAULT_SSH_PORT))
            connect_timeout = float(extra.get("connect_timeout") or default("connect_timeout"))
            command_timeout = float(extra.get("command_timeout") or default("command_timeout"))
            request_timeout = float(extra.get("request_timeout") or default("request_timeout"))
        except (TypeError, ValueError) as err:
            raise fail(f"port and timeouts must be numbers ({err})") from None
        api_version = str(extra.get("api_version") or default("api_version")).strip()
        if api_version != "auto" and api_version not in SUPPORTED_API_VERSIONS:
            raise fail(
                f"extra 'api_version' must be 'auto' or one of {SUPPORTED_API_RANGE}, got {api_version!r}"
            )
        # TLS is never lost: https from the host's prefix or from the extra wins over http from the
        # other; with neither, port 443 means https.
        if "https" in (host_scheme, scheme):
            scheme = "https"
        scheme = scheme or host_scheme or ("https" if port == 443 else "http")
        ssh_host = (str(extra.get("ssh_host") or "").strip() or None) if transport == "rest" else host
        # REST files: an ssh_host is the file access when set; else this machine's filesystem when
        # shared_fs says it sees the cluster's paths; with neither, nothing could read a job's output
        # or cluster.env, so the connection is refused.
        declared_shared = _bool(extra.get("shared_fs"), default("shared_fs"), "shared_fs")
        shared_fs = transport == "rest" and declared_shared and not ssh_host
        if transport == "rest" and not ssh_host and not shared_fs:
            raise fail(
                "REST alone cannot read job files (output, cluster.env): set extra ssh_host (a login "
                "node; files over SFTP) or shared_fs=true (this machine sees the cluster's filesystem)"
            )
        token_file = str(extra.get("token_file") or "").strip() or None
        token_lifespan = _positive_int(extra.get("token_lifespan"), "token_lifespan", fail)
        if token_lifespan and (transport != "rest" or not ssh_host):
            raise fail(
                "extra 'token_lifespan' mints tokens with scontrol token over SSH: it needs transport "
                "'rest' and an ssh_host (the login node)"
            )
        password = conn.password or None
        if transport == "rest" and password:
            # ``scontrol token`` prints ``SLURM_JWT=<token>``: the line as printed is accepted.
            password = password.strip().removeprefix("SLURM_JWT=").strip() or None
        if transport == "rest" and not password and not token_file and not token_lifespan:
            raise fail(
                "REST needs the JWT in password or a token_file extra (or token_lifespan, to mint "
                "tokens over SSH)"
            )
        private_key = extra.get("private_key") or None
        key_file = str(extra.get("key_file") or "").strip() or None
        if private_key and key_file:
            raise fail("give private_key or key_file, not both")
        return cls(
            conn_id=conn_id,
            transport=transport,
            host=host,
            port=port,
            login=login,
            password=password,
            api_version=api_version,
            scheme=scheme,
            verify_ssl=_bool(extra.get("verify_ssl"), default("verify_ssl"), "verify_ssl"),
            token_file=token_file,
            token_lifespan=token_lifespan,
            shared_fs=shared_fs,
            ssh_host=ssh_host,
            ssh_port=ssh_port if transport == "rest" else port,
            private_key=private_key,
            private_key_passphrase=extra.get("private_key_passphrase") or None,
            key_file=key_file,
            known_hosts=extra.get("known_hosts") or None,
            strict_host_key_checking=_bool(
                extra.get("strict_host_key_checking"),
                default("strict_host_key_checking"),
                "strict_host_key_checking",
            ),
            slurm_bin_dir=str(extra.get("slurm_bin_dir") or "").strip() or None,
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
            request_timeout=request_timeout,
        )


def default(name: str) -> Any:
    """What an unset connection field means: the connection form shows the same default."""
    for field in dataclasses.fields(SlurmSettings):
        if field.name == name and field.default is not dataclasses.MISSING:
            return field.default
    raise KeyError(f"SlurmSettings has no field {name!r} with a default")
