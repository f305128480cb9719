"""Record the slurmrestd, scontrol and sacct answers the parser tests read (``tests/slurm/data``) from
the sandbox's real Slurm 24.11 and 26.05 clusters (``sandbox/slurm/versions.sh``).

Run as root from the repository root: ``.venv/bin/python -m tests.slurm.record_fixtures``. It takes
about two minutes (a job has to reach its one-minute time limit). Every job ends in one of the
states the provider maps (completed, failed, killed by a signal, launch failure, time limit, node
failure, cancelled, requeued, an array with running and pending tasks); each job's record is then
saved once per API version that slurmrestd serves, with the cluster user's home replaced by
``/shared/home/pathways``. Nothing else of this machine goes into the files.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from sandbox.slurm.cluster import slurm_cli, start_slurm_sandbox

DATA = Path(__file__).parent / "data"
NEUTRAL_HOME = "/shared/home/pathways"
# The keys of a job record the parser reads, plus a few that tell what the record is.
JOB_KEYS = (  # noqa: SIM905
    "job_id name job_state state_reason exit_code derived_exit_code restart_cnt requeue array_job_id "
    "array_task_id array_task_string array_max_tasks nodes batch_host start_time submit_time end_time "
    "comment standard_output current_working_directory partition user_name flags"
).split()
SACCT_FIELDS = (
    "JobIDRaw,JobID,State,ExitCode,Reason,Restarts,Submit,Start,End,Partition,NodeList,WorkDir,StdOut,User,"
    "JobName,Comment"
)


class Cluster:
    def __init__(self, version: str) -> None:
        self.version = version
        self.settings = start_slurm_sandbox(timeout=900, version=version)
        self.home = self.settings["SLURM_SANDBOX_USER_HOME"]
        self.workdir = f"{self.home}/pathways/recordings/{uuid.uuid4().hex[:8]}"
        self.cli(
            "runuser",
            "-u",
            self.settings["SLURM_SANDBOX_USER"],
            "--",
            "mkdir",
            "-p",
            self.workdir,
            user=False,
        )
        self.token = Path(self.settings["SLURM_SANDBOX_JWT_TOKEN_FILE"]).read_text().strip()

    def cli(self, *args: str, user: bool = True, check: bool = True) -> str:
        prefix = slurm_cli(self.settings)
        if user:
            prefix = [*prefix, "runuser", "-u", self.settings["SLURM_SANDBOX_USER"], "--"]
        proc = subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{args}: {proc.stderr}")
        return proc.stdout

    def sbatch(self, *args: str) -> int:
        return int(self.cli("sbatch", "--parsable", *args).strip().split(";")[0])

    def field(self, job: int | str, name: str) -> str:
        out = self.cli("scontrol", "-o", "show", "job", str(job), user=False, check=False)
        for part in out.split():
            if part.startswith(f"{name}="):
                return part.split("=", 1)[1]
        return ""

    def wait(self, job: int | str, states: set[str], timeout: float = 150) -> None:
        deadline = time.monotonic() + timeout
        while self.field(job, "JobState") not in states:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job} of {self.version} not in {states}")
            time.sleep(0.2)

    def rest(self, path: str) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.settings["SLURM_SANDBOX_REST_URL"] + path,
            headers={
                "X-SLURM-USER-NAME": self.settings["SLURM_SANDBOX_USER"],
                "X-SLURM-USER-TOKEN": self.token,
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                return err.code, json.loads(raw)
            except ValueError:  # 26.05 sends a second, plain-text answer after an error
                return err.code, json.loads(raw.split(b"}HTTP/1.1", 1)[0] + b"}")

    def neutral(self, text: str) -> str:
        return text.replace(self.home, NEUTRAL_HOME)


def trim(payload: dict[str, Any]) -> dict[str, Any]:
    meta = payload.get("meta") or {}
    out: dict[str, Any] = {
        "meta": {"plugin": meta.get("plugin"), "slurm": {"release": (meta.get("slurm") or {}).get("release")}}
    }
    if "jobs" in payload:
        out["jobs"] = [{k: job[k] for k in JOB_KEYS if k in job} for job in payload["jobs"]]
    for key in ("errors", "warnings", "job_id", "step_id"):
        if key in payload:
            out[key] = payload[key]
    if isinstance(out["meta"]["plugin"], dict):
        out["meta"]["plugin"].pop("accounting_storage", None)
    return out


def record(cluster: Cluster) -> None:
    """Submit the jobs, then save each job's records the moment it reaches its state: MinJobAge is
    short in these clusters, so an ended job is gone from slurmctld seconds later."""
    w = cluster.workdir
    out = f"--output={w}/%x-%j.out"
    go = f"{w}/go"
    gate = f'while [ ! -e "{go}" ]; do sleep 0.2; done'
    jobs: dict[str, int] = {}
    # name -> the state (or states) in which it is recorded
    wanted: dict[str, set[str]] = {
        "completed": {"COMPLETED"},
        "failed": {"FAILED"},
        "killed": {"FAILED"},
        "launch": {"FAILED"},
        "cancelled": {"CANCELLED"},
        "timeout": {"TIMEOUT"},
        "array": {"RUNNING", "PENDING"},
        "requeued": {"PENDING"},
        "nodefail": {"NODE_FAIL"},
    }
    jobs["completed"] = cluster.sbatch(
        out, "--job-name=completed", "--comment=note Partition=x", "--wrap", "true"
    )
    jobs["failed"] = cluster.sbatch(out, "--job-name=failed", "--wrap", "echo bad >&2; exit 3")
    jobs["killed"] = cluster.sbatch(out, "--job-name=killed", "--wrap", "kill -9 $$")
    # An output file slurmstepd cannot create (24.11 creates missing directories the user may create).
    jobs["launch"] = cluster.sbatch(
        "--output=/nonexistent/recording/%j.out", "--job-name=launch", "--wrap", "true"
    )
    jobs["timeout"] = cluster.sbatch(out, "--job-name=timeout", "--time=1", "--wrap", "sleep 300")
    jobs["cancelled"] = cluster.sbatch(out, "--job-name=cancelled", "--hold", "--wrap", "true")
    jobs["array"] = cluster.sbatch(
        f"--output={w}/slice-%A_%a.out", "--job-name=array", "--array=0-5%2", "--wrap", gate
    )
    jobs["requeued"] = cluster.sbatch(out, "--job-name=requeued", "--requeue", "--wrap", f"{gate}; exit 4")
    jobs["nodefail"] = cluster.sbatch(out, "--job-name=nodefail", "--no-requeue", "--wrap", "sleep 300")
    cluster.cli("scancel", str(jobs["cancelled"]))
    versions = cluster.settings["SLURM_SANDBOX_REST_API_VERSIONS"].split(",")
    rest: dict[str, list[dict[str, Any]]] = {api: [] for api in versions}
    scontrol: list[str] = []
    recorded: set[str] = set()
    requeue_started = down_started = False
    node = cluster.settings["SLURM_SANDBOX_NODES"]
    deadline = time.monotonic() + 180
    while len(recorded) < len(wanted):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{cluster.version}: not all recorded: {sorted(set(wanted) - recorded)}")
        for name, job in jobs.items():
            if name in recorded:
                continue
            state = cluster.field(job, "JobState")
            if name == "requeued" and state == "RUNNING" and not requeue_started:
                cluster.cli("scontrol", "requeue", str(job), user=False)
                requeue_started = True
                continue
            # The node goes down last: every running job that may be requeued would be requeued.
            if (
                name == "nodefail"
                and state == "RUNNING"
                and not down_started
                and recorded == set(wanted) - {name}
            ):
                cluster.cli(
                    "scontrol", "update", f"nodename={node}", "state=down", "reason=recording", user=False
                )
                down_started = True
                continue
            if state not in wanted[name] or (name == "requeued" and not requeue_started):
                continue
            if name == "array" and not {"PENDING", "RUNNING"} <= set(
                cluster.cli("squeue", "-h", "-r", "-j", str(job), "-o", "%T", user=False).split()
            ):
                continue
            text = cluster.cli(
                "env", "SLURM_TIME_FORMAT=%s", "scontrol", "-o", "show", "job", str(job), user=False
            )
            scontrol += [line for line in text.splitlines() if line.strip()]
            for api in versions:
                status, payload = cluster.rest(f"/slurm/{api}/job/{job}")
                assert status == 200, (name, status, payload)
                rest[api] += trim(payload)["jobs"]
                meta = trim(payload)["meta"]
            recorded.add(name)
        time.sleep(0.1)
    tag = cluster.version.replace(".", "")
    for api in versions:
        payload = {"meta": meta, "jobs": rest[api]}
        tag_api = "v" + api.replace(".", "")[1:]
        (DATA / f"rest_{tag_api}_{tag}_jobs.json").write_text(
            cluster.neutral(json.dumps(payload, indent=1)) + "\n"
        )
        status, unknown = cluster.rest(f"/slurm/{api}/job/2000000000")
        (DATA / f"rest_{tag_api}_{tag}_unknown_job.json").write_text(
            json.dumps([status, trim(unknown)], indent=1) + "\n"
        )
    (DATA / f"scontrol_{tag}_jobs.txt").write_text(cluster.neutral("\n".join(scontrol)) + "\n")
    # The requeued job runs again and ends (exit 4): accounting then holds both attempts.
    cluster.cli("scontrol", "update", f"jobid={jobs['requeued']}", "starttime=now", user=False)
    cluster.wait(jobs["requeued"], {"RUNNING"})
    cluster.cli("touch", go)
    cluster.wait(jobs["requeued"], {"FAILED"})
    ids = ",".join(str(j) for j in jobs.values())
    if cluster.settings.get("SLURM_SANDBOX_ACCOUNTING") == "1":
        # slurmctld sends each job's end to slurmdbd asynchronously: wait until the last one is there.
        deadline = time.monotonic() + 60
        while "FAILED" not in cluster.cli(
            "sacct", "-n", "-X", "-j", str(jobs["requeued"]), "-o", "State", user=False
        ):
            if time.monotonic() > deadline:
                raise TimeoutError("accounting did not get the requeued job's end")
            time.sleep(0.2)
        sacct = cluster.cli(
            "env",
            "SLURM_TIME_FORMAT=%s",
            "sacct",
            "-D",
            "-P",
            "-n",
            "--delimiter=\x1f",
            f"--format={SACCT_FIELDS}",
            f"--jobs={ids}",
            user=False,
        )
        (DATA / f"sacct_{tag}_jobs.txt").write_text(cluster.neutral(sacct))
        status, payload = cluster.rest(f"/slurmdb/{versions[0]}/job/{jobs['requeued']}")
        (DATA / f"slurmdb_v{versions[0].replace('.', '')[1:]}_requeued.json").write_text(
            cluster.neutral(json.dumps(payload["jobs"], indent=1)) + "\n"
        )
    cluster.cli("scancel", *[str(j) for j in jobs.values()], user=False, check=False)
    print(cluster.version, json.dumps(jobs))


def main() -> int:
    for version in sys.argv[1:] or ["24.11", "26.05"]:
        record(Cluster(version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
