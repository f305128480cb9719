"""Helpers for the Slurm sandbox tests: the CLI (as root), slurmrestd with the JWT, SSH/SFTP.

Every wait is a poll on a condition with a deadline (``wait_for``); nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.environment import require_module

REPO_ROOT = Path(__file__).resolve().parents[3]
SANDBOX_DIR = REPO_ROOT / "sandbox" / "slurm"
UP_SCRIPT = SANDBOX_DIR / "up.sh"
SCRIPTS_DIR = SANDBOX_DIR / "scripts"

ACTIVE_STATES = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING"}


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 30.0, interval: float = 0.2) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {result!r})")
        time.sleep(interval)


def parse_scontrol_line(line: str) -> dict[str, str]:
    """Parse one ``scontrol -o show ...`` line into a dict (values may contain '=' or spaces)."""
    fields: dict[str, str] = {}
    for part in re.split(r" (?=[A-Za-z][A-Za-z0-9_:/]*=)", line.strip()):
        key, sep, value = part.partition("=")
        if sep:
            fields[key] = value.strip()
    return fields


class SlurmSandbox:
    """The running sandbox, as described by ``STATE/slurm.json``."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.settings = settings
        self.state_dir = Path(settings["SLURM_SANDBOX_STATE_DIR"])
        self.user = settings["SLURM_SANDBOX_USER"]
        self.home = Path(settings["SLURM_SANDBOX_USER_HOME"])
        self.node = settings["SLURM_SANDBOX_NODES"].split(",")[0]
        self.cpus = int(settings["SLURM_SANDBOX_CPUS"])
        self.rest_url = settings["SLURM_SANDBOX_REST_URL"]
        self.api = settings["SLURM_SANDBOX_REST_API_VERSION"]
        self.ssh_host = settings["SLURM_SANDBOX_SSH_HOST"]
        self.ssh_port = int(settings["SLURM_SANDBOX_SSH_PORT"])
        self.env = {**os.environ, "SLURM_CONF": settings["SLURM_CONF"]}

    # -- CLI (as root) ------------------------------------------------------------------------
    def run(self, *args: str, check: bool = True, env: dict[str, str] | None = None, timeout: float = 60):
        proc = subprocess.run(
            list(args), capture_output=True, text=True, env=env or self.env, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{shlex.join(args)} failed ({proc.returncode}): {proc.stderr}{proc.stdout}")
        return proc

    def sbatch(self, *args: str, env: dict[str, str] | None = None) -> str:
        out = self.run("sbatch", "--parsable", *args, env=env).stdout.strip()
        return out.split(";")[0]

    def node_state(self) -> str:
        """The node's long state as sinfo prints it (idle, mixed, drained, down*, ...)."""
        out = self.run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T").stdout.split()
        return out[0] if out else ""

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol -o show job`` fields of a job (the first line, for arrays the first task)."""
        out = self.run("scontrol", "-o", "show", "job", str(job_id), check=False).stdout
        lines = [line for line in out.splitlines() if line.strip()]
        return parse_scontrol_line(lines[0]) if lines else {}

    def job_state(self, job_id: str) -> str:
        return self.job(job_id).get("JobState", "")

    def array_tasks(self, array_job_id: str) -> dict[str, tuple[str, str]]:
        """All tasks of an array (finished ones included): ``{task_id: (state, reason)}``."""
        out = self.run("squeue", "-h", "-r", "-t", "all", "-j", str(array_job_id), "-o", "%K %T %r").stdout
        tasks = {}
        for line in out.splitlines():
            task, state, reason = [*line.split(None, 2), "", ""][:3]
            tasks[task] = (state, reason)
        return tasks

    def wait_state(self, job_id: str, states: set[str] | str, timeout: float = 30.0) -> dict[str, str]:
        wanted = {states} if isinstance(states, str) else states

        def reached() -> dict[str, str] | None:
            fields = self.job(job_id)
            return fields if fields.get("JobState") in wanted else None

        return wait_for(reached, f"job {job_id} to reach {sorted(wanted)}", timeout)

    def release_held(self, job_id: str, held_seen_at: float) -> None:
        """Lift the ~2 minute hold of a requeued job (``scontrol update jobid=N starttime=now``).

        Never in the second of the requeue: slurmd rejects a credential created in the same second
        as the revocation of the previous run ("Job credential revoked") and the job fails. The
        hold was observed at ``held_seen_at``, after the requeue, so the next second is safe.
        """
        wait_for(lambda: int(time.time()) > int(held_seen_at), "the requeue second to pass", 5, 0.05)
        self.run("scontrol", "update", f"jobid={job_id}", "starttime=now")

    def wait_gone(self, job_ids: list[str], timeout: float = 30.0) -> None:
        """Wait until none of the jobs (or array tasks) is active any more."""

        def idle() -> bool:
            ids = ",".join(job_ids)
            out = self.run("squeue", "-h", "-r", "-t", "all", "-j", ids, "-o", "%T", check=False)
            return not (set(out.stdout.split()) & ACTIVE_STATES)

        wait_for(idle, f"jobs {job_ids} to finish", timeout)

    def user_jobs_dir(self) -> Path:
        """A fresh directory in the cluster user's home, writable by that user."""
        path = self.home / "pathways" / "tests" / uuid.uuid4().hex[:12]
        path.mkdir(parents=True)
        for p in (path.parent, path):
            shutil.chown(p, self.user, self.user)
        return path

    # -- REST ---------------------------------------------------------------------------------
    def token(self) -> str:
        return Path(self.settings["SLURM_SANDBOX_JWT_TOKEN_FILE"]).read_text().strip()

    def rest(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None):
        """Call slurmrestd; returns ``(status, parsed JSON or None)``."""
        if headers is None:
            headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token()}
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.rest_url}/slurm/{self.api}/{path.lstrip('/')}",
            data=data,
            method=method,
            headers={**headers, "Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, None

    # -- SSH ----------------------------------------------------------------------------------
    def ssh_client(self, known_hosts: str | None = None):
        paramiko = require_module("paramiko", "SSH tests need paramiko (the test extra has it)")
        client = paramiko.SSHClient()
        client.load_host_keys(known_hosts or self.settings["SLURM_SANDBOX_SSH_KNOWN_HOSTS"])
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(
            self.ssh_host,
            port=self.ssh_port,
            username=self.user,
            key_filename=self.settings["SLURM_SANDBOX_SSH_PRIVATE_KEY"],
            look_for_keys=False,
            allow_agent=False,
            timeout=15,
        )
        return client


def ssh_run(client: Any, command: str, timeout: float = 60) -> tuple[int, str, str]:
    _stdin, stdout, stderr = client.exec_command(command, timeout=timeout)
    out = stdout.read().decode()
    err = stderr.read().decode()
    return stdout.channel.recv_exit_status(), out, err
