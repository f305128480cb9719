"""Simulated Kueue: a Workload per queued JobSet, eviction (preemption) and re-admission."""

from __future__ import annotations

import hashlib
from typing import Any

from sandbox.kube.controllers.base import Controller
from sandbox.kube.controllers.events import EventRecorder
from sandbox.kube.controllers.shape import QUEUE_NAME, pods_per_job, replicated_jobs
from sandbox.kube.errors import ApiError
from sandbox.kube.meta import owner_reference, rfc3339
from sandbox.kube.resources import JOBSETS, WORKLOADS
from sandbox.kube.store import Store

PREEMPTION_MESSAGE = (
    "Preempted to accommodate a workload (UID: sandbox-preemptor) due to prioritization in the ClusterQueue"
)


def workload_name(jobset: dict[str, Any]) -> str:
    """``jobset-<name>-<5 hex chars>``, the shape of Kueue's workload names."""
    digest = hashlib.sha1(jobset["metadata"]["uid"].encode()).hexdigest()[:5]
    return f"jobset-{jobset['metadata']['name']}-{digest}"


def _condition(type_: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": rfc3339(),
        "observedGeneration": 1,
    }


def _set(conditions: list[dict[str, Any]], new: dict[str, Any]) -> None:
    for i, cond in enumerate(conditions):
        if cond.get("type") == new["type"]:
            if (cond.get("status"), cond.get("reason")) != (new["status"], new["reason"]):
                conditions[i] = new
            return
    conditions.append(new)


class KueueController(Controller):
    """Admits every JobSet labelled ``kueue.x-k8s.io/queue-name`` at once (one Workload each)."""

    name = "kueue"

    def __init__(self, store: Store, events: EventRecorder):
        super().__init__(store)
        self.events = events

    def reconcile(self, key: Any) -> None:
        namespace, name = key
        jobset = self.store.find(JOBSETS, namespace, name)
        if jobset is None or not (jobset["metadata"].get("labels") or {}).get(QUEUE_NAME):
            return
        self.ensure_workload(jobset)

    def ensure_workload(self, jobset: dict[str, Any]) -> dict[str, Any]:
        md = jobset["metadata"]
        existing = self.store.find(WORKLOADS, md["namespace"], workload_name(jobset))
        if existing is not None:
            return existing
        pod_sets = [
            {"name": r["name"], "count": int(r.get("replicas", 1)) * pods_per_job(r)}
            for r in replicated_jobs(jobset)
        ]
        admitted = "The workload is admitted"
        workload = {
            "apiVersion": WORKLOADS.api_version,
            "kind": WORKLOADS.kind,
            "metadata": {
                "name": workload_name(jobset),
                "namespace": md["namespace"],
                "labels": {"kueue.x-k8s.io/job-uid": md["uid"]},
                "ownerReferences": [owner_reference(jobset)],
            },
            "spec": {
                "queueName": (md.get("labels") or {}).get(QUEUE_NAME, ""),
                "active": True,
                "priority": 0,
                "podSets": pod_sets,
            },
            "status": {
                "admission": {
                    "clusterQueue": "cluster-queue",
                    "podSetAssignments": [{"name": p["name"], "count": p["count"]} for p in pod_sets],
                },
                "conditions": [
                    _condition(
                        "QuotaReserved",
                        "True",
                        "QuotaReserved",
                        "Quota reserved in ClusterQueue cluster-queue",
                    ),
                    _condition("Admitted", "True", "Admitted", admitted),
                ],
            },
        }
        try:
            return self.store.create(WORKLOADS, workload, namespace=md["namespace"], from_api=False)
        except ApiError as err:
            if err.code != 409:
                raise
            return self.store.get(WORKLOADS, md["namespace"], workload_name(jobset))

    def evict(self, jobset: dict[str, Any]) -> dict[str, Any] | None:
        """Evict the Workload (``Evicted``/``Preempted`` True) and suspend the JobSet, as Kueue does."""
        workload = self.ensure_workload(jobset)

        def evicted(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            conditions = status.setdefault("conditions", [])
            _set(conditions, _condition("Evicted", "True", "Preempted", PREEMPTION_MESSAGE))
            _set(conditions, _condition("Preempted", "True", "InClusterQueue", PREEMPTION_MESSAGE))
            _set(conditions, _condition("QuotaReserved", "False", "Pending", PREEMPTION_MESSAGE))
            _set(
                conditions,
                _condition("Admitted", "False", "NoReservation", "The workload has no reservation"),
            )
            status.pop("admission", None)

        md = workload["metadata"]
        written = self.store.mutate(WORKLOADS, md["namespace"], md["name"], evicted, subresource="status")
        if written is not None:
            self.events.record(written, "Normal", "Preempted", PREEMPTION_MESSAGE, "kueue-admission")
        self._suspend(jobset, True)
        return written

    def readmit(self, jobset: dict[str, Any]) -> dict[str, Any] | None:
        """Re-admit an evicted Workload (``Evicted``/``Preempted`` False, ``Admitted`` True)."""
        md = jobset["metadata"]
        if self.store.find(WORKLOADS, md["namespace"], workload_name(jobset)) is None:
            return None

        def admitted(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            conditions = status.setdefault("conditions", [])
            _set(
                conditions,
                _condition(
                    "QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cluster-queue"
                ),
            )
            _set(conditions, _condition("Admitted", "True", "Admitted", "The workload is admitted"))
            _set(
                conditions,
                _condition("Evicted", "False", "QuotaReserved", "Previously: " + PREEMPTION_MESSAGE),
            )
            _set(
                conditions,
                _condition("Preempted", "False", "QuotaReserved", "Previously: " + PREEMPTION_MESSAGE),
            )
            status["admission"] = {"clusterQueue": "cluster-queue"}

        return self.store.mutate(
            WORKLOADS, md["namespace"], workload_name(jobset), admitted, subresource="status"
        )

    def _suspend(self, jobset: dict[str, Any], suspend: bool) -> None:
        def apply(obj: dict[str, Any]) -> None:
            obj["spec"]["suspend"] = suspend

        self.store.mutate(JOBSETS, jobset["metadata"]["namespace"], jobset["metadata"]["name"], apply)
