"""What the Kubernetes stand-in did, from its own watches and its audit log: every PathwaysJob,
JobSet, Job and head pod ever created, with the owner labels, status and lifetime of each, so the
soak's invariants are checked against the cluster's records rather than against what Airflow says."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
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
                query += f"&labelSelector={urllib.request.quote(selector)}"
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
