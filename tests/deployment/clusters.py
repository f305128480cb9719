"""What the tests read and do on the simulated GKE cluster and the sandbox Slurm cluster."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.deployment.harness import wait_for

PATHWAYSJOBS = "/apis/pathways-job.pathways.domain/v1"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2"
HEAD_SELECTOR = "jobset.sigs.k8s.io/replicatedjob-name=pathways-head"
SLURM_ACTIVE = frozenset(
    {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "REQUEUE_HOLD"}
)


class KubeCluster:
    """The Kubernetes stand-in: current objects, and a record of every PathwaysJob and head pod ever
    created (from watches), so a test can tell how many jobs a task made and how often a program ran."""

    def __init__(self, standin: Any) -> None:
        self.standin = standin
        self._lock = threading.Lock()
        self._jobs: dict[str, dict[str, str]] = defaultdict(dict)  # namespace -> uid -> name
        self._heads: dict[str, dict[str, str]] = defaultdict(dict)  # namespace -> pod uid -> name
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._watch, args=(f"{PATHWAYSJOBS}/pathwaysjobs", "", self._jobs), daemon=True
            ),
            threading.Thread(
                target=self._watch, args=("/api/v1/pods", HEAD_SELECTOR, self._heads), daemon=True
            ),
        ]
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        self._stop.set()

    def _watch(self, path: str, selector: str, into: dict[str, dict[str, str]]) -> None:
        version = "0"
        while not self._stop.is_set():
            query = f"watch=true&timeoutSeconds=20&resourceVersion={version}"
            if selector:
                query += f"&labelSelector={urllib.request.quote(selector)}"
            request = urllib.request.Request(f"{self.standin.url}{path}?{query}")
            request.add_header("Authorization", f"Bearer {self.standin.token}")
            try:
                with urllib.request.urlopen(request, timeout=40) as stream:
                    for raw in stream:
                        event = json.loads(raw)
                        meta = (event.get("object") or {}).get("metadata") or {}
                        if event.get("type") == "ERROR":
                            version = "0"
                            break
                        version = meta.get("resourceVersion") or version
                        if event.get("type") == "ADDED" and meta.get("uid"):
                            with self._lock:
                                into[meta["namespace"]][meta["uid"]] = meta["name"]
            except (OSError, ValueError, urllib.error.URLError):
                self._stop.wait(0.2)

    def jobs_created(self, namespace: str) -> dict[str, str]:
        """Every PathwaysJob ever created in ``namespace``: uid -> name."""
        with self._lock:
            return dict(self._jobs.get(namespace, {}))

    def program_runs(self, namespace: str) -> int:
        """How many head pods (each runs the program once) were ever created in ``namespace``."""
        with self._lock:
            return len(self._heads.get(namespace, {}))

    def list(self, namespace: str, resource: str) -> list[dict[str, Any]]:
        paths = {
            "pathwaysjobs": f"{PATHWAYSJOBS}/namespaces/{namespace}/pathwaysjobs",
            "jobsets": f"{JOBSETS}/namespaces/{namespace}/jobsets",
            "jobs": f"/apis/batch/v1/namespaces/{namespace}/jobs",
            "pods": f"/api/v1/namespaces/{namespace}/pods",
        }
        return self.standin.request("GET", paths[resource])["items"]

    def leftovers(self, namespace: str) -> dict[str, list[str]]:
        """Names of the PathwaysJobs, JobSets, Jobs and pods still in ``namespace``."""
        return {
            resource: [o["metadata"]["name"] for o in self.list(namespace, resource)]
            for resource in ("pathwaysjobs", "jobsets", "jobs", "pods")
            if self.list(namespace, resource)
        }

    def wait_program_running(
        self, namespace: str, timeout: float, other_than: Iterable[str] = ()
    ) -> dict[str, Any]:
        """Wait until a JobSet in ``namespace`` (none of the uids ``other_than``) has every slice
        ready and its head pod running."""
        skip = set(other_than)

        def running() -> dict[str, Any] | None:
            pods = {p["metadata"]["name"]: p for p in self.list(namespace, "pods")}
            for jobset in self.list(namespace, "jobsets"):
                status = jobset.get("status") or {}
                if status.get("terminalState") or jobset["metadata"]["uid"] in skip:
                    continue
                workers = next(
                    (r for r in status.get("replicatedJobsStatus") or [] if r.get("name") == "worker"), {}
                )
                replicas = sum(
                    int(r.get("replicas", 1))
                    for r in jobset["spec"]["replicatedJobs"]
                    if r["name"] == "worker"
                )
                head_up = any(
                    name.startswith(f"{jobset['metadata']['name']}-pathways-head-")
                    and (pod.get("status") or {}).get("phase") == "Running"
                    for name, pod in pods.items()
                )
                if workers.get("ready", 0) >= replicas and head_up:
                    return jobset
            return None

        return wait_for(running, f"a running program in namespace {namespace}", timeout, 0.3)

    def action(self, namespace: str, name: str, action: str, **params: Any) -> Any:
        return self.standin.action(namespace, name, action, **params)


class SlurmCluster:
    """The sandbox Slurm cluster as root sees it, plus a directory the jobs of this run share."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.settings = settings
        self.user = settings["SLURM_SANDBOX_USER"]
        self.tag = uuid.uuid4().hex[:8]
        self.workdir = Path(settings["SLURM_SANDBOX_USER_HOME"]) / "pathways" / "deployment-tests" / self.tag
        self.workdir.mkdir(parents=True)
        for path in (self.workdir.parent, self.workdir):
            shutil.chown(path, self.user, self.user)
            path.chmod(0o755)
        self.cpus = int(settings["SLURM_SANDBOX_CPUS"])

    def cleanup(self) -> None:
        """Cancel every job of this run that is still active, and remove the shared directory."""
        ids = [j["id"] for j in self.queue(f"-{self.tag}", active_only=True, match_suffix=True)]
        if ids:
            self.run("scancel", *ids, check=False)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(args), capture_output=True, text=True, timeout=60, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{args} failed ({proc.returncode}): {proc.stderr}{proc.stdout}")
        return proc

    def job_name(self, dag_id: str) -> str:
        return f"{dag_id}-{self.tag}"

    def queue(
        self, name: str, *, active_only: bool = False, match_suffix: bool = False
    ) -> list[dict[str, str]]:
        """Jobs (array tasks expanded) named ``name`` (or ending with it): id, name, state, reason."""
        args = ["squeue", "-h", "-r", "-o", "%i|%j|%T|%r|%P"]
        if not active_only:
            args += ["-t", "all"]
        if not match_suffix:
            args += ["--name", name]
        out = self.run(*args).stdout
        jobs = []
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) != 5:
                continue
            job = dict(zip(("id", "name", "state", "reason", "partition"), parts, strict=True))
            if match_suffix and not job["name"].endswith(name):
                continue
            jobs.append(job)
        return jobs

    def job_ids(self, name: str) -> list[str]:
        """Distinct job ids ever submitted with this name (finished ones are kept for a day)."""
        return sorted({j["id"].split("_")[0] for j in self.queue(name)}, key=int)

    def active(self, name: str) -> list[dict[str, str]]:
        return [j for j in self.queue(name) if j["state"] in SLURM_ACTIVE]

    def show(self, job_id: int | str) -> dict[str, str]:
        """``scontrol -o show job`` as a dict (first record)."""
        out = self.run("scontrol", "-o", "show", "job", str(job_id), check=False).stdout
        record: dict[str, str] = {}
        for token in out.splitlines()[0].split() if out.strip() else []:
            key, _, value = token.partition("=")
            record.setdefault(key, value)
        return record

    def comment(self, job_id: int | str) -> str:
        """The job's comment (``squeue -o %k``: it may hold spaces)."""
        return self.run("squeue", "-h", "-j", str(job_id), "-o", "%k", check=False).stdout.strip()

    def state(self, job_id: int | str) -> str:
        return self.show(job_id).get("JobState", "UNKNOWN")

    def wait_state(self, job_id: int | str, states: set[str], timeout: float) -> str:
        return wait_for(
            lambda: (s := self.state(job_id)) in states and s,
            f"Slurm job {job_id} to be {sorted(states)}",
            timeout,
            0.3,
            describe=lambda: self.state(job_id),
        )

    def path(self, dag_id: str, suffix: str) -> Path:
        return self.workdir / f"{dag_id}.{suffix}"

    def release(self, dag_id: str, exit_code: int = 0) -> None:
        """Let the job of ``dag_id`` finish with ``exit_code`` (the scripts wait for this file)."""
        target = self.path(dag_id, "release")
        tmp = target.with_suffix(".tmp")
        tmp.write_text(f"{exit_code}\n")
        tmp.chmod(0o644)
        tmp.replace(target)

    def release_service(self, dag_id: str, timeout: float = 120) -> None:
        """Let the Pathways service of ``dag_id`` become ready: put the ``cluster.env`` it wrote where
        the task looks for it (a fresh copy, so it counts as written after the service started)."""
        written = self.path(dag_id, "written.env")
        wait_for(written.exists, f"the service of {dag_id} to write {written.name}", timeout, 0.3)
        target = self.path(dag_id, "env")
        tmp = target.with_suffix(".tmp")
        tmp.write_text(written.read_text())
        tmp.chmod(0o644)
        tmp.replace(target)

    def program_runs(self, dag_id: str) -> list[str]:
        """One line per start of the program of ``dag_id`` (the scripts append it)."""
        with contextlib.suppress(FileNotFoundError):
            return self.path(dag_id, "runs").read_text().splitlines()
        return []

    def idle_cpus(self) -> int:
        """CPUs of the node that no job holds (``sinfo``'s allocated/idle/other/total), the node of
        ``high`` (the cluster's isolated node, with partitions of its own, does not count)."""
        return int(self.run("sinfo", "-h", "-p", "high", "-o", "%C").stdout.split()[0].split("/")[1])

    def wait_room(self, cpus: int, timeout: float = 180) -> int:
        """Wait (at most ``timeout`` seconds) until ``cpus`` CPUs are idle; returns the idle CPUs.

        Jobs in ``high`` preempt ``preemptible`` ones whenever the node is full, so the jobs meant
        to be preempted start once the first burst of the suite's jobs has passed.
        """
        with contextlib.suppress(AssertionError):
            wait_for(lambda: self.idle_cpus() >= cpus, f"{cpus} idle CPUs", timeout, 1.0)
        return self.idle_cpus()

    def preempt(self, job_ids: list[str], timeout: float = 90) -> list[str]:
        """Preempt running ``preemptible`` jobs for real: a job in ``high`` that needs their CPUs.

        The suite's other jobs run in ``high`` too, whose tier cannot be preempted, so Slurm can
        only pick jobs of the lower tier: the victims. The preempting job asks for the idle CPUs
        plus the victims' and is cancelled as soon as they are ``PREEMPTED``.
        """
        deadline = time.monotonic() + timeout
        hogs: list[str] = []
        while True:
            pending = [j for j in job_ids if self.state(j) != "PREEMPTED"]
            if not pending:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"could not preempt {pending}: {[self.show(j) for j in pending]}")
            states = {j: self.state(j) for j in pending}
            gone = {j: st for j, st in states.items() if st not in SLURM_ACTIVE}
            if gone:
                raise AssertionError(f"cannot preempt jobs that are no longer active: {gone}")
            running = [j for j, st in states.items() if st == "RUNNING"]
            if not running:  # pending until CPUs free up
                time.sleep(0.5)
                continue
            size = self.idle_cpus() + len(running)
            command = ["sbatch", "--parsable", "-p", "high", "-c", str(size), "-J", f"preemptor-{self.tag}"]
            command += ["-o", "/dev/null", "--wrap", "sleep 30"]
            hog = self.run(*command).stdout.strip().split(";")[0]
            hogs.append(hog)
            with contextlib.suppress(AssertionError):
                wait_for(lambda: all(self.state(j) == "PREEMPTED" for j in job_ids), "the preemption", 5, 0.2)
            self.run("scancel", hog, check=False)
        return hogs
