"""JWTs expire (``scontrol token lifespan=N``): a long wait outlives the token it started with.

Against the real slurmrestd of every sandbox version: a refused token is replaced once from the
connection's source of fresh ones (the token_file read again, or a token minted with ``scontrol
token`` over SSH), and the call goes through; without such a source the error names the connection
and never shows the token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pathways.hooks.slurm import SlurmHook
from tests.slurm.conftest import Sandbox, wait_for

pytestmark = pytest.mark.slurm


def short_token(sandbox: Sandbox, seconds: int) -> str:
    """What ``scontrol token`` prints for the cluster user, without the ``SLURM_JWT=`` prefix."""
    out = sandbox.run("scontrol", "token", f"username={sandbox.user}", f"lifespan={seconds}").stdout
    return out.strip().removeprefix("SLURM_JWT=")


def refused(sandbox: Sandbox, connections: Any, token: str) -> bool:
    """slurmrestd refuses ``token`` now (asked directly, with a connection that has no other)."""
    conn_id = connections("pathways_slurm_test_probe", sandbox.rest_connection(password=token))
    probe = SlurmHook(conn_id)
    try:
        ok, _ = probe.test_connection()
        return not ok
    finally:
        probe.close()


def test_a_refused_token_is_replaced_by_the_token_file_read_again(
    sandbox: Sandbox, connections: Any, workdir: Path
) -> None:
    old = short_token(sandbox, 3)
    token_file = sandbox.write_user_file(workdir / "airflow.jwt", f"SLURM_JWT={old}\n", mode=0o600)
    conn = sandbox.rest_connection(password=None, extra={"token_file": str(token_file)})
    hook = SlurmHook(connections("pathways_slurm_test_rotated", conn))
    try:
        ok, message = hook.test_connection()
        assert ok, message
        wait_for(lambda: refused(sandbox, connections, old), "the 3-second token to expire", timeout=60)
        # What a rotation job (cron, a secrets agent) does: a new token in the same file.
        token_file.write_text(f"SLURM_JWT={short_token(sandbox, 600)}\n")
        ok, message = hook.test_connection()  # within the 5-minute re-read period: read at once
        assert ok, message
    finally:
        hook.close()


def test_tokens_minted_over_ssh_outlive_their_lifespan(sandbox: Sandbox, connections: Any) -> None:
    ssh = sandbox.ssh_connection()
    sftp = {k: v for k, v in ssh["extra"].items() if k != "transport"}
    conn = sandbox.rest_connection(
        password=None,
        extra={"ssh_host": ssh["host"], "ssh_port": ssh["port"], **sftp, "token_lifespan": 4},
    )
    hook = SlurmHook(connections("pathways_slurm_test_minted", conn))
    try:
        reference = short_token(sandbox, 4)  # minted at the same time as the hook's first token
        ok, message = hook.test_connection()
        assert ok, message
        wait_for(lambda: refused(sandbox, connections, reference), "a 4-second token to expire", timeout=60)
        for _ in range(3):  # the hook's first token is as old: calls go on with fresh ones
            ok, message = hook.test_connection()
            assert ok, message
    finally:
        hook.close()


def test_a_refused_token_without_a_source_of_fresh_ones_fails_naming_the_connection(
    sandbox: Sandbox, connections: Any
) -> None:
    token = short_token(sandbox, 2)
    wait_for(lambda: refused(sandbox, connections, token), "the 2-second token to expire", timeout=60)
    hook = SlurmHook(connections("pathways_slurm_test_expired", sandbox.rest_connection(password=token)))
    try:
        with pytest.raises(Exception, match="rejected the token") as failure:
            hook.get_job(1)
        assert "expired" in str(failure.value)
        assert token not in str(failure.value)
    finally:
        hook.close()
