"""Simulated batch/v1 Job controller for Indexed Jobs: creates pods, counts results, fails, suspends."""

from __future__ import annotations

from typing import Any

from sandbox.kube.controllers.base import Controller
from sandbox.kube.controllers.events import EventRecorder
from sandbox.kube.controllers.knobs import Knobs, knobs_for
from sandbox.kube.controllers.shape import COMPLETION_INDEX, JOBSET_NAME
from sandbox.kube.controllers.state import SimState
from sandbox.kube.errors import ApiError
from sandbox.kube.meta import clone, owner_reference, random_suffix, rfc3339
from sandbox.kube.resources import JOBS, JOBSETS, PODS
from sandbox.kube.store import Store

ACTIVE_PHASES = ("Pending", "Running")


def true_condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    """The condition of ``type_`` with status True, if any."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return cond
    return None


def job_finished(job: dict[str, Any]) -> str | None:
    """``Complete`` or ``Failed`` when the Job has finished, else None."""
    for type_ in ("Complete", "Failed"):
        if true_condition(job, type_):
            return type_
    return None


def pod_ready(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and true_condition(pod, "Ready") is not None


def _index_of(pod: dict[str, Any]) -> int:
    notes = pod["metadata"].get("annotations") or {}
    try:
        return int(notes.get(COMPLETION_INDEX, 0))
    except ValueError:
        return 0


def _format_indexes(indexes: set[int]) -> str:
    """``{0,1,2,5}`` -> ``0-2,5`` (the Job status ``completedIndexes`` format)."""
    out, ordered = [], sorted(indexes)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def _parse_indexes(text: str | None) -> set[int]:
    out: set[int] = set()
    for part in (text or "").split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.update(range(int(lo), int(hi) + 1))
        elif part.strip():
            out.add(int(part))
    return out


class JobController(Controller):
    """Runs one pod per completion index; a failed pod with a ``DisruptionTarget`` fails the Job."""

    name = "job-controller"

    def __init__(self, store: Store, sim: SimState, events: EventRecorder):
        super().__init__(store)
        self.sim = sim
        self.events = events

    def knobs(self, job: dict[str, Any]) -> Knobs:
        jobset_name = (job["metadata"].get("labels") or {}).get(JOBSET_NAME)
        jobset = self.store.find(JOBSETS, job["metadata"]["namespace"], jobset_name) if jobset_name else None
        return knobs_for(jobset or job)

    def reconcile(self, key: Any) -> None:
        namespace, name = key
        job = self.store.find(JOBS, namespace, name)
        if job is None:
            return
        uid = job["metadata"]["uid"]
        spec = job.get("spec") or {}
        status = clone(job.get("status") or {})
        pods = self.store.owned(uid, PODS)
        completions = int(spec.get("completions") or spec.get("parallelism") or 1)
        parallelism = int(spec.get("parallelism", 1))
        backoff_limit = int(spec.get("backoffLimit", 6))
        counted = self.sim.counted.setdefault(uid, set())
        # Indexes outside [0, completions) no longer count (an elastic Indexed Job scaled down).
        succeeded = {i for i in _parse_indexes(status.get("completedIndexes")) if i < completions}
        failed_count = int(status.get("failed", 0))
        newly_failed = []
        for pod in pods:
            pod_uid, phase = pod["metadata"]["uid"], (pod.get("status") or {}).get("phase")
            if pod_uid in counted or phase not in ("Succeeded", "Failed"):
                continue
            counted.add(pod_uid)
            if _index_of(pod) >= completions:
                continue
            if phase == "Succeeded":
                succeeded.add(_index_of(pod))
            else:
                failed_count += 1
                newly_failed.append(pod)
        finished = job_finished(job)
        if not finished:
            disrupted = next((p for p in newly_failed if true_condition(p, "DisruptionTarget")), None)
            if disrupted is not None:
                finished = self._set_failed(
                    status,
                    "PodFailurePolicy",
                    f"Pod {namespace}/{disrupted['metadata']['name']} has condition DisruptionTarget "
                    "matching FailJob rule at index 0",
                )
            elif failed_count > backoff_limit:
                finished = self._set_failed(
                    status, "BackoffLimitExceeded", "Job has reached the specified backoff limit"
                )
            elif len(succeeded) >= completions:
                finished = self._set_complete(status)

        suspended = bool(spec.get("suspend"))
        active = [p for p in pods if (p.get("status") or {}).get("phase") in ACTIVE_PHASES]
        if finished or suspended:
            for pod in active:
                if self.store.find(PODS, namespace, pod["metadata"]["name"]) is not None:
                    self.store.delete(PODS, namespace, pod["metadata"]["name"])
            active = []
        else:
            # Elastic Indexed Jobs: pods whose index is no longer below completions are removed.
            for pod in [p for p in active if _index_of(p) >= completions]:
                if self.store.find(PODS, namespace, pod["metadata"]["name"]) is not None:
                    self.store.delete(PODS, namespace, pod["metadata"]["name"])
                active.remove(pod)
            busy = {_index_of(p) for p in active} | succeeded
            missing = [i for i in range(completions) if i not in busy][: max(0, parallelism - len(active))]
            if missing and not active:
                self.sim.slice_ready_at.pop(uid, None)
            for index in missing:
                created = self._create_pod(job, index)
                if created is not None:
                    active.append(created)

        self._set_suspended(status, suspended and not finished)
        if not suspended and not finished and "startTime" not in status:
            status["startTime"] = rfc3339()
        if suspended and not finished:
            status.pop("startTime", None)
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if pod_ready(p))
        status["succeeded"] = len(succeeded)
        status["failed"] = failed_count
        status["terminating"] = 0
        status["uncountedTerminatedPods"] = {}
        if succeeded:
            status["completedIndexes"] = _format_indexes(succeeded)
        else:
            status.pop("completedIndexes", None)
        for zero_omitted in ("active", "succeeded", "failed"):
            if not status[zero_omitted]:
                del status[zero_omitted]
        self.write_status(namespace, name, status)
        if self.knobs(job).delete_pods_after_failure:
            for pod in pods:
                phase = (pod.get("status") or {}).get("phase")
                if (
                    phase == "Failed"
                    and self.store.find(PODS, namespace, pod["metadata"]["name"]) is not None
                ):
                    self.store.delete(PODS, namespace, pod["metadata"]["name"])

    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        def apply(obj: dict[str, Any]) -> None:
            obj["status"] = status

        self.store.mutate(JOBS, namespace, name, apply, subresource="status")

    # -- conditions -------------------------------------------------------------------------------
    @staticmethod
    def _set_failed(status: dict[str, Any], reason: str, message: str) -> str:
        stamp = rfc3339()
        conditions = status.setdefault("conditions", [])
        for type_ in ("FailureTarget", "Failed"):
            conditions.append(
                {
                    "type": type_,
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastProbeTime": stamp,
                    "lastTransitionTime": stamp,
                }
            )
        return "Failed"

    @staticmethod
    def _set_complete(status: dict[str, Any]) -> str:
        stamp = rfc3339()
        conditions = status.setdefault("conditions", [])
        for type_ in ("SuccessCriteriaMet", "Complete"):
            conditions.append(
                {
                    "type": type_,
                    "status": "True",
                    "reason": "CompletionsReached",
                    "message": "Reached expected number of succeeded pods",
                    "lastProbeTime": stamp,
                    "lastTransitionTime": stamp,
                }
            )
        status["completionTime"] = stamp
        return "Complete"

    @staticmethod
    def _set_suspended(status: dict[str, Any], suspended: bool) -> None:
        conditions = status.setdefault("conditions", [])
        current = next((c for c in conditions if c.get("type") == "Suspended"), None)
        stamp = rfc3339()
        if suspended and (current is None or current.get("status") != "True"):
            new = {
                "type": "Suspended",
                "status": "True",
                "reason": "JobSuspended",
                "message": "Job suspended",
                "lastProbeTime": stamp,
                "lastTransitionTime": stamp,
            }
        elif not suspended and current is not None and current.get("status") == "True":
            new = {
                "type": "Suspended",
                "status": "False",
                "reason": "JobResumed",
                "message": "Job resumed",
                "lastProbeTime": stamp,
                "lastTransitionTime": stamp,
            }
        else:
            if not conditions:
                status.pop("conditions")
            return
        if current is None:
            conditions.append(new)
        else:
            conditions[conditions.index(current)] = new

    def fail(self, job: dict[str, Any], reason: str, message: str, failed_pods: int = 0) -> None:
        """Fail a Job directly (a lost node: its pods vanish before they can be counted)."""
        status = clone(job.get("status") or {})
        if job_finished(job):
            return
        self._set_failed(status, reason, message)
        status["failed"] = int(status.get("failed", 0)) + failed_pods
        status.pop("active", None)
        status["ready"] = 0
        self.write_status(job["metadata"]["namespace"], job["metadata"]["name"], status)

    # -- pods -------------------------------------------------------------------------------------
    def _create_pod(self, job: dict[str, Any], index: int) -> dict[str, Any] | None:
        md = job["metadata"]
        template = clone((job.get("spec") or {}).get("template") or {})
        tmd = template.get("metadata") or {}
        labels = dict(tmd.get("labels") or {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": md["uid"],
                "batch.kubernetes.io/job-name": md["name"],
                "controller-uid": md["uid"],
                "job-name": md["name"],
                COMPLETION_INDEX: str(index),
            }
        )
        notes = dict(tmd.get("annotations") or {})
        notes[COMPLETION_INDEX] = str(index)
        spec = template.get("spec") or {}
        spec.setdefault("hostname", f"{md['name']}-{index}")
        spec.setdefault("restartPolicy", "Never")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        for container in spec.get("containers") or []:
            env = container.setdefault("env", [])
            env.append(
                {
                    "name": "JOB_COMPLETION_INDEX",
                    "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
                }
            )
        for _ in range(5):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{md['name']}-{index}-{random_suffix()}",
                    "generateName": f"{md['name']}-{index}-",
                    "namespace": md["namespace"],
                    "labels": labels,
                    "annotations": notes,
                    "ownerReferences": [owner_reference(job)],
                },
                "spec": spec,
                "status": {"phase": "Pending", "qosClass": "Burstable"},
            }
            try:
                return self.store.create(PODS, pod, namespace=md["namespace"], from_api=False)
            except ApiError as err:
                if err.code != 409:
                    raise
        return None
