"""What the Kubernetes stand-in did, from its own watches and its audit log: every PathwaysJob,
JobSet, Job and head pod ever created, with the owner labels, status and lifetime of each, so the
soak's invariants are checked against the cluster's records rather than against what Airflow says;
and what slurmctld reports of every Slurm job the soak submitted (``SlurmRecords``)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

PATHWAYSJOBS = "/apis/pathways-job.pathways.domain/v1/pathwaysjobs"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/jobsets"
JOBS = "/apis/batch/v1/jobs"
HEAD_PODS = ("/api/v1/pods", "jobset.sigs.k8s.io/replicatedjob-name=pathways-head")
LABEL = "airflow.apache.org/"


@dataclass
class Obj:
    """One object's life: created and deleted (monotonic seconds), its labels then, its last state."""

    kind: str
    uid: str
    namespace: str
    name: str
    created: float
    labels: dict[str, str]
    owner: str | None
    last: dict[str, Any]
    deleted: float | None = None
    #: every distinct set of ``airflow.apache.org/`` labels the object had, in order
    owner_labels: list[dict[str, str]] = field(default_factory=list)
    #: pods: the first time it was seen Running, and when it ended (Succeeded or Failed)
    running: float | None = None
    ended: float | None = None

    @property
    def phase(self) -> str:
        return str((self.last.get("status") or {}).get("phase") or "")

    def exit_code(self, container: str = "main") -> int | None:
        for status in (self.last.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") == container:
                terminated = (status.get("state") or {}).get("terminated") or {}
                if "exitCode" in terminated:
                    return int(terminated["exitCode"])
        return None


def airflow_labels(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in (labels or {}).items() if k.startswith(LABEL)}


class KubeRecords:
    """Watches the stand-in's PathwaysJobs, JobSets, Jobs and head pods in every namespace."""

    def __init__(self, standin: Any) -> None:
        self.standin = standin
        self.lock = threading.Lock()
        self.objects: dict[str, Obj] = {}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._watch, args=(kind, path, selector), daemon=True, name=f"rec-{kind}")
            for kind, path, selector in (
                ("PathwaysJob", PATHWAYSJOBS, ""),
                ("JobSet", JOBSETS, ""),
                ("Job", JOBS, ""),
                ("Pod", *HEAD_PODS),
            )
        ]
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        self._stop.set()

    def _watch(self, kind: str, path: str, selector: str) -> None:
        version = "0"
        while not self._stop.is_set():
            query = f"watch=true&timeoutSeconds=30&resourceVersion={version}"
            if selector:
                query += f"&labelSelector={urllib.parse.quote(selector)}"
            request = urllib.request.Request(f"{self.standin.url}{path}?{query}")
            request.add_header("Authorization", f"Bearer {self.standin.token}")
            try:
                with urllib.request.urlopen(request, timeout=60) as stream:
                    for raw in stream:
                        event = json.loads(raw)
                        if event.get("type") == "ERROR":
                            version = "0"
                            break
                        obj = event.get("object") or {}
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                            self._take(kind, event["type"], obj)
            except (OSError, ValueError, urllib.error.URLError):
                self._stop.wait(0.2)

    def _take(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        now = time.monotonic()
        owners = meta.get("ownerReferences") or []
        labels = airflow_labels(meta.get("labels") or {})
        with self.lock:
            record = self.objects.get(uid)
            if record is None:
                record = self.objects[uid] = Obj(
                    kind,
                    uid,
                    meta.get("namespace", ""),
                    meta.get("name", ""),
                    now,
                    labels,
                    owners[0].get("uid") if owners else None,
                    obj,
                )
            record.last = obj
            if not record.owner_labels or record.owner_labels[-1] != labels:
                record.owner_labels.append(labels)
            phase = (obj.get("status") or {}).get("phase")
            if phase == "Running" and record.running is None:
                record.running = now
            if phase in ("Succeeded", "Failed") and record.ended is None:
                record.ended = now
            if event == "DELETED":
                record.deleted = now
                if record.ended is None:
                    record.ended = now

    # ---- reading -----------------------------------------------------------------------------

    def of_kind(self, kind: str) -> list[Obj]:
        with self.lock:
            return [o for o in self.objects.values() if o.kind == kind]

    def root(self, obj: Obj) -> Obj:
        """The PathwaysJob (else the topmost owner recorded) that ``obj`` belongs to."""
        seen = 0
        with self.lock:
            while obj.owner and obj.owner in self.objects and seen < 5:
                obj = self.objects[obj.owner]
                seen += 1
        return obj

    def jobs_of(self, dag_id: str, run_id: str, map_index: int | None = None) -> list[Obj]:
        """The PathwaysJobs created with the owner labels of this run (and map index)."""
        found = []
        for job in self.of_kind("PathwaysJob"):
            labels = job.labels
            if labels.get(LABEL + "dag_id") != _safe(dag_id) or labels.get(LABEL + "run_id") != _safe(run_id):
                continue
            if map_index is not None and labels.get(LABEL + "map_index") != str(map_index):
                continue
            found.append(job)
        return sorted(found, key=lambda j: j.created)

    def heads_of(self, job: Obj) -> list[Obj]:
        """The head pods (program runs) of one PathwaysJob, oldest first."""
        return sorted(
            (p for p in self.of_kind("Pod") if self.root(p).uid == job.uid), key=lambda p: p.created
        )

    def jobset_of(self, job: Obj) -> Obj | None:
        sets = [s for s in self.of_kind("JobSet") if s.owner == job.uid]
        return sets[-1] if sets else None

    def active(self, job: Obj) -> bool:
        """The job still exists and its JobSet has not ended."""
        if job.deleted is not None:
            return False
        jobset = self.jobset_of(job)
        if jobset is None or jobset.deleted is not None:
            terminal = (job.last.get("status") or {}).get("conditions") or []
            return not any(
                c.get("type") in ("Completed", "Failed") and c.get("status") == "True" for c in terminal
            )
        return not (jobset.last.get("status") or {}).get("terminalState")


def _safe(value: str) -> str:
    """The provider's label value of a dag or run id (``safe_label_value``)."""
    from airflow_provider_pathways.gke.task_job import safe_label_value

    return str(safe_label_value(value))


def deletes(kube_log: Path, namespace: str) -> list[str]:
    """The stand-in's audit lines (deletes, lost answers) in ``namespace``."""
    if not kube_log.exists():
        return []
    marker = f"/namespaces/{namespace}/"
    return [
        line
        for line in kube_log.read_text(errors="replace").splitlines()
        if ("DELETE" in line or "LOST ANSWER" in line) and marker in line
    ]


# ---- Slurm ---------------------------------------------------------------------------------------

#: the name the sandbox's start_pathways.sh gives its worker array: ``pathways-workers-<service job
#: id>`` (sandbox/slurm/README.md)
WORKER_ARRAYS = "pathways-workers-"
#: ``squeue -o`` fields: job id, name, state, reason, start, end, submit time, comment (last: it may
#: hold spaces; squeue(1) ``%k``)
SQUEUE_FORMAT = "%i|%j|%T|%r|%S|%e|%V|%k"
#: states in which the job's program runs (squeue(1), JOB STATE CODES)
SLURM_RUNNING = frozenset({"RUNNING", "SUSPENDED"})
#: states a job passes through on its way to its end or requeue (squeue(1), JOB STATE CODES)
SLURM_PASSING = frozenset({"COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "RESIZING"})
#: states after which a job never runs again (squeue(1), JOB STATE CODES: the rest are active or
#: requeued)
SLURM_ENDED = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)


@dataclass
class SlurmRun:
    """One run of a job's program as slurmctld reports it: its ``StartTime``, and its end (the job's
    ``EndTime`` once it ended, else the moment the soak saw it leave ``RUNNING``: a requeue), wall
    clock seconds; ``how``: the job's state then."""

    start: float
    end: float | None = None
    how: str = ""


@dataclass
class SlurmJobRecord:
    """One job's life as slurmctld reported it: every state and comment it had, in order, its runs."""

    job_id: str
    name: str
    submitted: float | None
    first_seen: float
    state: str = ""
    reason: str = ""
    states: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    runs: list[SlurmRun] = field(default_factory=list)
    #: ``RestartCnt`` (requeues) as slurmctld last reported it
    restarts: int = 0
    #: ``EndTime`` once it ended (wall clock seconds)
    end: float | None = None

    @property
    def comment(self) -> str:
        return self.comments[-1] if self.comments else ""

    @property
    def active(self) -> bool:
        return self.state not in SLURM_ENDED


def _slurm_time(text: str) -> float | None:
    """squeue's local ``YYYY-MM-DDTHH:MM:SS`` as epoch seconds (None: ``N/A``, ``Unknown``)."""
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


class SlurmRecords:
    """Polls slurmctld (``squeue -t all``: the sandbox keeps ended jobs for a day, ``MinJobAge``)
    for every job whose name ends with ``-<suffix>`` (the soak's tag), and keeps each one's life."""

    def __init__(
        self, run: Any, suffix: str, deployment: str, interval: float = 1.0, prefix: str = WORKER_ARRAYS
    ) -> None:
        self._run = run  # SlurmCluster.run
        self.suffix = f"-{suffix}"
        #: the soak deployment's ``[pathways] deployment_name``, which its jobs' markers carry
        self.deployment = deployment
        self.prefix = prefix
        self.interval = interval
        self.lock = threading.Lock()
        self._polling = threading.Lock()
        self.jobs: dict[str, SlurmJobRecord] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="rec-slurm")
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # slurmctld busy: the next poll sees it
                self.poll()
            self._stop.wait(self.interval)

    def poll(self) -> None:
        """One look at every job of the soak (also called before the invariants are checked); one at
        a time, so that an older answer never overwrites a newer one."""
        with self._polling:
            self._poll()

    def _poll(self) -> None:
        out = self._run("squeue", "-h", "-t", "all", "-o", SQUEUE_FORMAT, check=False).stdout
        restarts = self._restarts()
        now = time.time()
        with self.lock:
            seen: set[str] = set()
            for line in out.splitlines():
                parts = line.split("|", 7)
                if len(parts) != 8:
                    continue
                if not (parts[1].endswith(self.suffix) or parts[1].startswith(self.prefix)):
                    continue
                seen.add(parts[0])
                self._take(parts, restarts.get(parts[0]), now)
            # a pending array's tasks are one line (``123_[0-1]``) until they split into their own
            for job_id in [j for j in self.jobs if "[" in j and j not in seen]:
                del self.jobs[job_id]

    def _restarts(self) -> dict[str, int]:
        """Job id -> ``RestartCnt`` (squeue(1) ``--Format``; no separator, so fixed widths)."""
        out = self._run("squeue", "-h", "-t", "all", "-O", "JobID:40,RestartCnt:10", check=False).stdout
        found: dict[str, int] = {}
        for line in out.splitlines():
            words = line.split()
            if len(words) == 2 and words[1].isdigit():
                found[words[0]] = int(words[1])
        return found

    def _take(self, parts: list[str], restarts: int | None, now: float) -> None:
        job_id, name, state, reason, start_text, end_text, submit_text, comment = parts
        record = self.jobs.get(job_id)
        if record is None:
            record = self.jobs[job_id] = SlurmJobRecord(job_id, name, _slurm_time(submit_text), now)
        record.state, record.reason = state, reason
        if restarts is not None:
            record.restarts = restarts
        if not record.states or record.states[-1] != state:
            record.states.append(state)
        if comment and (not record.comments or record.comments[-1] != comment):
            record.comments.append(comment)
        start, end = _slurm_time(start_text), _slurm_time(end_text)
        if state in SLURM_ENDED and end is not None:
            record.end = end
        open_run = record.runs[-1] if record.runs and record.runs[-1].end is None else None
        if state in SLURM_RUNNING:
            # a new StartTime is a new run (a requeued job keeps its id and starts again)
            if start is not None and not any(abs(r.start - start) < 0.5 for r in record.runs):
                if open_run is not None:
                    open_run.end, open_run.how = min(start, now), "REQUEUED"
                record.runs.append(SlurmRun(start))
            return
        if state in SLURM_PASSING:
            return  # its end (or requeue) shows next
        if open_run is not None:
            if state in SLURM_ENDED:
                ended, how = (end if end is not None and end >= open_run.start else now), state
            else:  # back to PENDING: requeued (slurmctld's EndTime then, if it says so)
                plausible = end is not None and open_run.start <= end <= now
                ended, how = (end if plausible and end is not None else now), "REQUEUED"
            open_run.end, open_run.how = ended, how
        elif (
            state in SLURM_ENDED
            and start is not None
            and end is not None
            and end > start  # a job cancelled while pending gets StartTime = EndTime
            and not any(abs(r.start - start) < 0.5 for r in record.runs)
        ):
            record.runs.append(SlurmRun(start, end, state))  # it ran and ended between two polls

    # ---- reading -----------------------------------------------------------------------------

    def named(self, name: str) -> list[SlurmJobRecord]:
        with self.lock:
            return sorted((j for j in self.jobs.values() if j.name == name), key=lambda j: _id_key(j.job_id))

    def marker(self, dag_id: str, task_id: str, run_id: str, map_index: int) -> str:
        """The ``--comment`` marker of the jobs of a task instance of the soak's deployment: the
        provider's own (``task_instance_marker``; an unmapped task instance has map index -1)."""
        from airflow_provider_pathways.slurm.job import task_instance_marker

        return task_instance_marker(dag_id, task_id, run_id, map_index, self.deployment)

    def jobs_of(self, name: str, marker: str) -> list[SlurmJobRecord]:
        """The jobs named ``name`` whose first comment names the task instance of ``marker``."""
        return [j for j in self.named(name) if j.comments and _marked(j.comments[0], marker)]

    def job(self, job_id: str) -> SlurmJobRecord | None:
        with self.lock:
            return self.jobs.get(job_id)


def _id_key(job_id: str) -> tuple[int, str]:
    """Sorts ``123`` and array tasks ``123_4`` (``123_[0-1]`` while pending) by their job id."""
    head, _, rest = job_id.partition("_")
    return (int(head) if head.isdigit() else 0, rest)


def array_job_id(job_id: str) -> str:
    """The array job of an array task id (``123_4`` -> ``123``)."""
    return job_id.partition("_")[0]


def _marked(comment: str, marker: str) -> bool:
    from airflow_provider_pathways.slurm.job import is_marked

    return is_marked(comment, marker)
