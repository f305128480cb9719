"""Simulated Kueue: a Workload per queued JobSet, a ClusterQueue with a TPU quota, admission, eviction.

As kueue does it:

- a JobSet labelled ``kueue.x-k8s.io/queue-name`` is created suspended (the webhook, see
  ``sandbox/kube/webhooks.py``) and gets a Workload named ``jobset-<name>-<5 hex>`` (``workload_names.go``:
  SHA-1 of kind, group, name and uid), owned by the JobSet;
- the Workload waits with ``QuotaReserved`` False (reason ``Pending``, "couldn't assign flavors ...")
  until it may be admitted: the quota of its queue (``quotas[<LocalQueue>]``, TPU chips over the
  queue's admitted Workloads; unlimited by default; each LocalQueue has its own ClusterQueue here) and
  the ``sandbox.pathways.dev/kueue-admit-after-seconds`` knob (seconds after queueing, or ``never``);
  higher ``kueue.x-k8s.io/priority-class`` first, then first come first served;
- admission sets ``QuotaReserved`` and ``Admitted`` True and unsuspends the JobSet, and unsuspends it
  again whenever someone else suspends it while its Workload stays admitted (``jobframework``'s
  reconciler: "Job admitted, unsuspending"); a workload that does
  not fit may preempt lower-priority admitted ones (``Evicted`` reason ``Preempted``, ``Preempted``
  reason ``InClusterQueue``), which go back to the queue;
- ``waitForPodsReady``, on by default since Kueue 0.19 (config ``v1beta2/defaults.go``: timeout 30
  min, ``requeuingStrategy`` backoff 60 s doubling up to 3600 s, no requeuing limit; the
  ``kueue-pods-ready-timeout-seconds``, ``kueue-backoff-base-seconds``, ``kueue-backoff-max-seconds``
  and ``kueue-backoff-limit-count`` knobs change them per JobSet): the Workload's ``PodsReady``
  condition follows the JobSet's ready Jobs (``jobframework/reconciler.go``
  ``generatePodsReadyCondition``, ``JobSet.PodsReady``: False ``WaitForStart`` until every replicated
  job is ready since admission, then True ``Started``; False ``WaitForRecovery`` once ready then not,
  True ``Recovered`` again); a Workload not ready within the timeout of its admission (or of losing
  readiness) is evicted with reason ``PodsReadyTimeout`` ("Exceeded the PodsReady timeout
  <namespace>/<workload>", ``core/workload_controller.go``), ``status.requeueState.count``
  incremented and ``requeueAt`` set by the backoff (``workload.UpdateRequeueState``), ``Requeued``
  False until ``requeueAt``, then True ``BackoffFinished`` and back in the queue; the eviction that
  would exceed ``backoffLimitCount`` deactivates it instead (``triggerDeactivation``);
- eviction (``evict`` action) suspends the JobSet with one of the real reasons (``Preempted``,
  ``PodsReadyTimeout``, ``NodeFailures``, ``ClusterQueueStopped``, or ``RequeuingLimitExceeded``, which
  deactivates the Workload for good: ``spec.active: false``, ``requeueState`` cleared) and requeues it
  (``Requeued``); each eviction is counted in ``status.schedulingStats.evictions`` by reason and
  underlying cause (``evict/evict.go`` ``workloadEvictionStateInc``);
- a finished JobSet gets ``Finished`` True on its Workload, which frees its quota.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from dataclasses import dataclass
from typing import Any

from sandbox.kube.controllers.base import Controller
from sandbox.kube.controllers.events import EventRecorder
from sandbox.kube.controllers.knobs import PREFIX
from sandbox.kube.controllers.shape import QUEUE_NAME, pod_template_spec, pods_per_job, replicated_jobs
from sandbox.kube.errors import ApiError
from sandbox.kube.meta import owner_reference, rfc3339
from sandbox.kube.resources import JOBSETS, WORKLOADS
from sandbox.kube.store import Store

COMPONENT = "kueue-admission"
CLUSTER_QUEUE = "cluster-queue"
PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
ADMIT_AFTER = PREFIX + "kueue-admit-after-seconds"
PODS_READY_TIMEOUT = PREFIX + "kueue-pods-ready-timeout-seconds"
BACKOFF_BASE = PREFIX + "kueue-backoff-base-seconds"
BACKOFF_MAX = PREFIX + "kueue-backoff-max-seconds"
BACKOFF_LIMIT = PREFIX + "kueue-backoff-limit-count"
# Kueue 0.19's waitForPodsReady defaults (apis/config/v1beta2/defaults.go): enabled, a 30-minute
# timeout (DefaultWaitForPodsReadyTimeout; recoveryTimeout defaults to it), requeuing backoff from
# DefaultRequeuingBackoffBaseSeconds doubling up to DefaultRequeuingBackoffMaxSeconds, and
# backoffLimitCount unset: requeued for ever.
DEFAULT_PODS_READY_TIMEOUT = 30 * 60.0
DEFAULT_BACKOFF_BASE = 60.0
DEFAULT_BACKOFF_MAX = 3600.0
DEFAULT_BACKOFF_LIMIT: int | None = None
# workload_types.go: PodsReady condition reasons, and the messages jobframework/reconciler.go writes.
WAIT_FOR_START, WAIT_FOR_RECOVERY = "WaitForStart", "WaitForRecovery"
STARTED, RECOVERED = "Started", "Recovered"
NOT_READY_MESSAGE = "Not all pods are ready or succeeded"
RECOVERY_MESSAGE = "At least one pod has failed, waiting for recovery"
READY_MESSAGE = "All pods reached readiness and the workload is running"
# xpk's priority classes (kueue_config.yaml.j2) and their values.
PRIORITIES = {"very-low": 100, "low": 250, "medium": 500, "high": 750, "very-high": 1000}
SCHEDULE = ("schedule",)
EVICTION_REASONS = (
    "Preempted",
    "PodsReadyTimeout",
    "NodeFailures",
    "ClusterQueueStopped",
    "RequeuingLimitExceeded",
)
PREEMPTION_MESSAGE = (
    "Preempted to accommodate a workload (UID: sandbox-preemptor, JobUID: sandbox-preemptor) due to "
    "prioritization in the ClusterQueue"
)
_EVICTION_MESSAGES = {
    "Preempted": PREEMPTION_MESSAGE,
    "PodsReadyTimeout": "Exceeded the PodsReady timeout {namespace}/{workload}",
    "NodeFailures": "Workload was evicted as there were failed nodes: gke-tpu-pool-{slice}",
    "ClusterQueueStopped": "The ClusterQueue is stopped",
    "RequeuingLimitExceeded": (
        "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    ),
}
JOBSET_GVK = ("JobSet", "jobset.x-k8s.io")
MAX_PREFIX = 253 - 1 - 5


def workload_name(jobset: dict[str, Any]) -> str:
    """Kueue's ``GetWorkloadNameForOwnerWithGVK``: ``jobset-<name>-<sha1(kind, group, name, uid)[:5]>``."""
    md = jobset["metadata"]
    kind, group = JOBSET_GVK
    digest = hashlib.sha1("\n".join((kind, group, md["name"], md["uid"])).encode()).hexdigest()[:5]
    return f"{(kind.lower() + '-' + md['name'])[:MAX_PREFIX]}-{digest}"


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
            if (cond.get("status"), cond.get("reason"), cond.get("message")) != (
                new["status"],
                new["reason"],
                new["message"],
            ):
                if cond.get("status") == new["status"]:
                    new = dict(new, lastTransitionTime=cond.get("lastTransitionTime"))
                conditions[i] = new
            return
    conditions.append(new)


def _true(obj: dict[str, Any] | None, type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
    )


def _backoff_finished(conditions: list[dict[str, Any]]) -> None:
    _set(conditions, _condition("Requeued", "True", "BackoffFinished", "The workload backoff was finished"))


def _clear_requeue_at(status: dict[str, Any]) -> None:
    (status.get("requeueState") or {}).pop("requeueAt", None)


def _chips(jobset: dict[str, Any]) -> int:
    """TPU chips the JobSet's pods request (``google.com/tpu`` limits)."""
    total = 0
    for rjob in replicated_jobs(jobset):
        per_pod = 0
        for container in pod_template_spec(rjob).get("containers") or []:
            limit = ((container.get("resources") or {}).get("limits") or {}).get("google.com/tpu", 0)
            with contextlib.suppress(ValueError):
                per_pod += int(str(limit))
        total += int(rjob.get("replicas", 1)) * pods_per_job(rjob) * per_pod
    return total


def _find(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    return next(
        (c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c.get("type") == type_),
        None,
    )


@dataclass(frozen=True)
class WaitForPodsReady:
    """Kueue's ``waitForPodsReady`` configuration, for one JobSet (its knobs, else 0.19's defaults)."""

    timeout: float = DEFAULT_PODS_READY_TIMEOUT
    backoff_base: float = DEFAULT_BACKOFF_BASE
    backoff_max: float = DEFAULT_BACKOFF_MAX
    backoff_limit: int | None = DEFAULT_BACKOFF_LIMIT

    @classmethod
    def of(cls, jobset: dict[str, Any]) -> WaitForPodsReady:
        notes = (jobset.get("metadata") or {}).get("annotations") or {}

        def seconds(key: str, default: float) -> float:
            try:
                return max(0.0, float(notes[key])) if key in notes else default
            except ValueError:
                return default

        try:
            limit = int(notes[BACKOFF_LIMIT]) if BACKOFF_LIMIT in notes else DEFAULT_BACKOFF_LIMIT
        except ValueError:
            limit = DEFAULT_BACKOFF_LIMIT
        return cls(
            timeout=seconds(PODS_READY_TIMEOUT, DEFAULT_PODS_READY_TIMEOUT),
            backoff_base=seconds(BACKOFF_BASE, DEFAULT_BACKOFF_BASE),
            backoff_max=seconds(BACKOFF_MAX, DEFAULT_BACKOFF_MAX),
            backoff_limit=None if limit is None or limit < 0 else limit,
        )

    def backoff(self, count: int) -> float:
        """Seconds before the ``count``-th requeue (``workload.UpdateRequeueState``: the base doubled
        ``count - 1`` times, at most the max; Kueue's 0.0001 jitter left out)."""
        return min(self.backoff_base * 2 ** max(count - 1, 0), self.backoff_max)


def pods_ready(jobset: dict[str, Any]) -> bool:
    """kueue_jobset_integration.go ``PodsReady``: every replicated job's Jobs ready or succeeded."""
    replicas = sum(int(r.get("replicas", 1)) for r in replicated_jobs(jobset))
    counted = sum(
        int(s.get("ready", 0) or 0) + int(s.get("succeeded", 0) or 0)
        for s in (jobset.get("status") or {}).get("replicatedJobsStatus") or []
    )
    return replicas == counted


def _admit_after(jobset: dict[str, Any]) -> float | None:
    """Seconds after queueing before admission is allowed; None = never."""
    raw = str(((jobset.get("metadata") or {}).get("annotations") or {}).get(ADMIT_AFTER, "0")).strip()
    if raw.lower() == "never":
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        return 0.0


class KueueController(Controller):
    """Queues, admits and evicts the Workloads of JobSets labelled ``kueue.x-k8s.io/queue-name``."""

    name = "kueue"

    def __init__(self, store: Store, events: EventRecorder):
        super().__init__(store)
        self.events = events
        #: TPU chips the admitted Workloads of a LocalQueue may hold together; absent = unlimited.
        self.quotas: dict[str, int] = {}
        self._queued_at: dict[str, float] = {}  # workload uid -> monotonic time it (re)entered the queue
        self._held: set[str] = set()  # workload uids a test evicted without automatic re-admission
        # waitForPodsReady clocks, monotonic, by workload uid: when it was admitted, when its pods
        # stopped being all ready after they had been (WaitForRecovery), when its backoff ends
        self._admitted_at: dict[str, float] = {}
        self._unready_at: dict[str, float] = {}
        self._requeue_at: dict[str, float] = {}

    def reset(self) -> None:
        super().reset()
        self.quotas.clear()
        for clocks in (self._queued_at, self._admitted_at, self._unready_at, self._requeue_at):
            clocks.clear()
        self._held.clear()

    # -- reconcile --------------------------------------------------------------------------------
    def reconcile(self, key: Any) -> None:
        if key == SCHEDULE:
            self.schedule()
            return
        namespace, name = key
        jobset = self.store.find(JOBSETS, namespace, name)
        if jobset is None or not (jobset["metadata"].get("labels") or {}).get(QUEUE_NAME):
            self.enqueue(SCHEDULE)
            return
        workload = self.ensure_workload(jobset)
        finished = next(
            (
                c
                for c in (jobset.get("status") or {}).get("conditions") or []
                if c.get("status") == "True" and c.get("type") in ("Completed", "Failed")
            ),
            None,
        )
        if finished is None and jobset["spec"].get("suspend") is True and _true(workload, "Admitted"):
            # jobframework/reconciler.go, "7. handle job is suspended": an admitted Workload's job
            # that someone else suspended is started again ("Job admitted, unsuspending")
            self._suspend(jobset, False)
        if finished is None and (workload.get("spec") or {}).get("active", True):
            self._wait_for_pods_ready(jobset, workload)
        if finished is not None and not _true(workload, "Finished"):
            success = finished["type"] == "Completed"
            self._write(
                workload,
                lambda c: _set(
                    c,
                    _condition(
                        "Finished",
                        "True",
                        "Succeeded" if success else "Failed",
                        "Job finished successfully" if success else finished.get("message") or "Job failed",
                    ),
                ),
            )
        self.enqueue(SCHEDULE)

    def ensure_workload(self, jobset: dict[str, Any]) -> dict[str, Any]:
        md = jobset["metadata"]
        existing = self.store.find(WORKLOADS, md["namespace"], workload_name(jobset))
        if existing is not None:
            return existing
        labels = md.get("labels") or {}
        priority_class = labels.get(PRIORITY_CLASS, "")
        pod_sets = [
            {"name": r["name"], "count": int(r.get("replicas", 1)) * pods_per_job(r)}
            for r in replicated_jobs(jobset)
        ]
        spec: dict[str, Any] = {
            "queueName": labels.get(QUEUE_NAME, ""),
            "active": True,
            "priority": PRIORITIES.get(priority_class, 0),
            "podSets": pod_sets,
        }
        if priority_class:
            spec["priorityClassName"] = priority_class
            spec["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
        workload = {
            "apiVersion": WORKLOADS.api_version,
            "kind": WORKLOADS.kind,
            "metadata": {
                "name": workload_name(jobset),
                "namespace": md["namespace"],
                "labels": {"kueue.x-k8s.io/job-uid": md["uid"]},
                "ownerReferences": [owner_reference(jobset)],
            },
            "spec": spec,
            "status": {},
        }
        try:
            created = self.store.create(WORKLOADS, workload, namespace=md["namespace"], from_api=False)
        except ApiError as err:
            if err.code != 409:
                raise
            return self.store.get(WORKLOADS, md["namespace"], workload_name(jobset))
        self._queued_at[created["metadata"]["uid"]] = time.monotonic()
        return created

    # -- waitForPodsReady --------------------------------------------------------------------------
    def _wait_for_pods_ready(self, jobset: dict[str, Any], workload: dict[str, Any]) -> None:
        """Keep ``PodsReady`` as ``generatePodsReadyCondition`` writes it, and evict an admitted
        Workload whose pods were not all ready in time (``admittedNotReadyWorkload``)."""
        uid, now = workload["metadata"]["uid"], time.monotonic()
        admitted = _true(workload, "Admitted")
        current = _find(workload, "PodsReady")
        reason = (current or {}).get("reason")
        if not admitted:
            wanted = ("False", WAIT_FOR_START, NOT_READY_MESSAGE)
        elif pods_ready(jobset):
            again = reason in (WAIT_FOR_RECOVERY, RECOVERED)
            wanted = ("True", RECOVERED if again else STARTED, READY_MESSAGE)
        elif current is not None and (current.get("status") == "True" or reason == WAIT_FOR_RECOVERY):
            wanted = ("False", WAIT_FOR_RECOVERY, RECOVERY_MESSAGE)
        else:
            wanted = ("False", WAIT_FOR_START, NOT_READY_MESSAGE)
        if current is None or (current.get("status"), reason) != wanted[:2]:
            if wanted[1] == WAIT_FOR_RECOVERY:
                self._unready_at[uid] = now
            written = self._write(workload, lambda c: _set(c, _condition("PodsReady", *wanted)))
            workload = written or workload
        if not admitted or wanted[0] == "True":
            return
        if wanted[1] == WAIT_FOR_START:
            since = self._admitted_at.setdefault(uid, now)
        else:
            since = self._unready_at.setdefault(uid, now)
        settings = WaitForPodsReady.of(jobset)
        left = since + settings.timeout - now
        if left > 0:
            self.enqueue_after(left + 0.01, (jobset["metadata"]["namespace"], jobset["metadata"]["name"]))
            return
        count = int(((workload.get("status") or {}).get("requeueState") or {}).get("count") or 0)
        if settings.backoff_limit is not None and count + 1 > settings.backoff_limit:
            self.evict(jobset, "RequeuingLimitExceeded", readmit="auto")  # triggerDeactivation
        else:
            self.evict(jobset, "PodsReadyTimeout", readmit="auto", cause=wanted[1])

    def _backoff_left(self, workload: dict[str, Any], now: float) -> float:
        """Seconds until a Workload evicted for ``PodsReadyTimeout`` may be queued again; at the end
        of its backoff ``Requeued`` becomes True ``BackoffFinished`` and ``requeueAt`` is cleared
        (``core/workload_controller.go``) and it re-enters the queue."""
        uid = workload["metadata"]["uid"]
        until = self._requeue_at.get(uid)
        if until is None:
            return 0.0
        if until > now:
            return until - now
        self._requeue_at.pop(uid, None)
        self._queued_at[uid] = now
        self._write(workload, _backoff_finished, _clear_requeue_at)
        return 0.0

    # -- scheduling -------------------------------------------------------------------------------
    def _owner(self, workload: dict[str, Any]) -> dict[str, Any] | None:
        for ref in workload["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "JobSet":
                jobset = self.store.find(JOBSETS, workload["metadata"]["namespace"], ref["name"])
                if jobset is not None and jobset["metadata"]["uid"] == ref.get("uid"):
                    return jobset
        return None

    def schedule(self) -> None:
        """Admit what fits, per queue: highest priority and oldest first, preempting lower priorities."""
        now = time.monotonic()
        admitted: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
        pending: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for workload in self.store.list(WORKLOADS):
            jobset = self._owner(workload)
            if jobset is None or _true(workload, "Finished"):
                continue
            queue = str((workload.get("spec") or {}).get("queueName", ""))
            if _true(workload, "Admitted"):
                admitted.setdefault(queue, []).append((workload, jobset))
            elif (workload.get("spec") or {}).get("active", True) and workload["metadata"][
                "uid"
            ] not in self._held:
                pending.append((workload, jobset))
        used = {queue: sum(_chips(js) for _, js in pairs) for queue, pairs in admitted.items()}
        pending.sort(
            key=lambda pair: (
                -int(pair[0]["spec"].get("priority", 0)),
                self._queued_at.get(pair[0]["metadata"]["uid"], 0),
            )
        )
        for workload, jobset in pending:
            backoff = self._backoff_left(workload, now)
            if backoff > 0:  # inadmissible until requeueAt; its QuotaReserved message stays the eviction's
                self.enqueue_after(backoff + 0.01, SCHEDULE)
                continue
            queue = str(workload["spec"].get("queueName", ""))
            delay = _admit_after(jobset)
            if delay is None:
                self._mark_pending(workload, "couldn't assign flavors to pod set worker: no capacity (held)")
                continue
            waited = now - self._queued_at.setdefault(workload["metadata"]["uid"], now)
            if waited < delay:
                self._mark_pending(
                    workload, "couldn't assign flavors to pod set worker: waiting for capacity"
                )
                self.enqueue_after(delay - waited + 0.01, SCHEDULE)
                continue
            need, quota = _chips(jobset), self.quotas.get(queue)
            in_queue = admitted.setdefault(queue, [])
            if quota is not None and used.get(queue, 0) + need > quota:
                missing = used.get(queue, 0) + need - quota
                victims = self._victims(workload, in_queue, missing)
                if victims is None:
                    self._mark_pending(
                        workload,
                        "couldn't assign flavors to pod set worker: insufficient unused quota for "
                        f"google.com/tpu in flavor tpu, {missing} more needed",
                    )
                    continue
                for victim, victim_jobset in victims:
                    self.evict(victim_jobset, "Preempted", readmit="auto")
                    in_queue.remove((victim, victim_jobset))
                    used[queue] = used.get(queue, 0) - _chips(victim_jobset)
            self.admit(jobset)
            in_queue.append((workload, jobset))
            used[queue] = used.get(queue, 0) + need

    def _victims(
        self, workload: dict[str, Any], admitted: list[tuple[dict[str, Any], dict[str, Any]]], missing: int
    ) -> list[tuple[dict[str, Any], dict[str, Any]]] | None:
        """Lower-priority admitted workloads whose chips cover ``missing`` (lowest, newest first)."""
        priority = int(workload["spec"].get("priority", 0))
        candidates = sorted(
            (pair for pair in admitted if int(pair[0]["spec"].get("priority", 0)) < priority),
            key=lambda pair: (
                int(pair[0]["spec"].get("priority", 0)),
                -self._queued_at.get(pair[0]["metadata"]["uid"], 0),
            ),
        )
        chosen, freed = [], 0
        for pair in candidates:
            if freed >= missing:
                break
            chosen.append(pair)
            freed += _chips(pair[1])
        return chosen if freed >= missing else None

    def _mark_pending(self, workload: dict[str, Any], message: str) -> None:
        def change(conditions: list[dict[str, Any]]) -> None:
            _set(conditions, _condition("QuotaReserved", "False", "Pending", message))

        before = next(
            (
                c
                for c in (workload.get("status") or {}).get("conditions") or []
                if c.get("type") == "QuotaReserved"
            ),
            None,
        )
        written = self._write(workload, change)
        if written is not None and (before is None or before.get("message") != message):
            self.events.record(written, "Normal", "Pending", message, COMPONENT)

    # -- admission and eviction -------------------------------------------------------------------
    def _write(
        self, workload: dict[str, Any], change: Any, status_change: Any = None
    ) -> dict[str, Any] | None:
        def apply(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            change(status.setdefault("conditions", []))
            if status_change is not None:
                status_change(status)

        md = workload["metadata"]
        return self.store.mutate(WORKLOADS, md["namespace"], md["name"], apply, subresource="status")

    def admit(self, jobset: dict[str, Any]) -> dict[str, Any] | None:
        """Reserve quota, admit the Workload and unsuspend the JobSet (Kueue's ``RunWithPodSetsInfo``)."""
        workload = self.ensure_workload(jobset)
        uid = workload["metadata"]["uid"]
        self._held.discard(uid)
        self._admitted_at[uid] = time.monotonic()
        self._unready_at.pop(uid, None)
        backoff_cut = self._requeue_at.pop(uid, None) is not None  # the ``admit`` action ends a backoff
        waited = time.monotonic() - self._queued_at.get(uid, time.monotonic())
        reserved = f"Quota reserved in ClusterQueue {CLUSTER_QUEUE}, wait time since queued was {waited:.0f}s"

        def change(conditions: list[dict[str, Any]]) -> None:
            _set(conditions, _condition("QuotaReserved", "True", "QuotaReserved", reserved))
            _set(conditions, _condition("Admitted", "True", "Admitted", "The workload is admitted"))
            for type_ in ("Evicted", "Preempted"):
                old = next((c for c in conditions if c.get("type") == type_), None)
                if old is not None and old.get("status") == "True":
                    _set(
                        conditions,
                        _condition(type_, "False", "QuotaReserved", f"Previously: {old.get('message')}"),
                    )
            if backoff_cut:
                _backoff_finished(conditions)

        def admission(status: dict[str, Any]) -> None:
            if backoff_cut:
                _clear_requeue_at(status)
            status["admission"] = {
                "clusterQueue": CLUSTER_QUEUE,
                "podSetAssignments": [
                    {"name": p["name"], "count": p["count"], "flavors": {"google.com/tpu": "tpu"}}
                    for p in workload["spec"].get("podSets") or []
                ],
            }

        written = self._write(workload, change, admission)
        if written is not None:
            self.events.record(written, "Normal", "QuotaReserved", reserved, COMPONENT)
            self.events.record(
                written, "Normal", "Admitted", f"Admitted by ClusterQueue {CLUSTER_QUEUE}", COMPONENT
            )
        self._suspend(jobset, False)
        return written

    def evict(
        self,
        jobset: dict[str, Any],
        reason: str = "Preempted",
        *,
        readmit: str = "never",
        slice_index: int = 0,
        cause: str | None = None,
    ) -> dict[str, Any] | None:
        """Evict the Workload with a Kueue reason, suspend the JobSet and requeue it.

        ``readmit``: ``auto`` (admit again when it fits), ``never`` (until the ``resume``/``admit`` action).
        ``PodsReadyTimeout`` counts a requeue in ``requeueState`` and holds the Workload for its backoff
        (``cause``: ``WaitForStart`` or ``WaitForRecovery``; by default read from ``PodsReady``).
        ``RequeuingLimitExceeded`` deactivates the Workload (``spec.active: false``) for good.
        """
        if reason not in EVICTION_REASONS:
            raise ApiError(400, f"unknown eviction reason {reason!r}; known: {', '.join(EVICTION_REASONS)}")
        workload = self.ensure_workload(jobset)
        md = jobset["metadata"]
        message = _EVICTION_MESSAGES[reason].format(
            namespace=md["namespace"], workload=workload["metadata"]["name"], slice=slice_index
        )
        deactivated = reason == "RequeuingLimitExceeded"
        timed_out = reason == "PodsReadyTimeout"
        # workloadEvictionStateInc: evictions counted by reason and underlying cause; a deactivation
        # by reason Deactivated with its cause (the Evicted condition's reason joins them)
        stats_key = ("Deactivated", reason) if deactivated else (reason, "")
        evicted_reason = "DeactivatedDueToRequeuingLimitExceeded" if deactivated else reason
        if timed_out:
            ready = _find(workload, "PodsReady") or {}
            ran = ready.get("status") == "True" or ready.get("reason") in (WAIT_FOR_RECOVERY, RECOVERED)
            stats_key = (reason, cause or (WAIT_FOR_RECOVERY if ran else WAIT_FOR_START))
        uid, now = workload["metadata"]["uid"], time.monotonic()
        requeue = dict((workload.get("status") or {}).get("requeueState") or {})
        if timed_out:  # workload.UpdateRequeueState
            requeue["count"] = int(requeue.get("count") or 0) + 1
            delay = WaitForPodsReady.of(jobset).backoff(requeue["count"])
            requeue["requeueAt"] = rfc3339(time.time() + delay)
            self._requeue_at[uid] = now + delay

        def change(conditions: list[dict[str, Any]]) -> None:
            _set(conditions, _condition("Evicted", "True", evicted_reason, message))
            if reason == "Preempted":
                _set(conditions, _condition("Preempted", "True", "InClusterQueue", message))
            _set(conditions, _condition("QuotaReserved", "False", "Pending", message))
            _set(
                conditions,
                _condition("Admitted", "False", "NoReservation", "The workload has no reservation"),
            )
            _set(conditions, _condition("PodsReady", "False", WAIT_FOR_START, NOT_READY_MESSAGE))
            # jobframework/reconciler.go: Requeued True only after preemption or node failures; a
            # PodsReadyTimeout waits for its backoff (then BackoffFinished), a deactivation for good
            if deactivated or timed_out:
                _set(conditions, _condition("Requeued", "False", evicted_reason, message))
            else:
                _set(conditions, _condition("Requeued", "True", reason, message))

        def status_change(status: dict[str, Any]) -> None:
            status.pop("admission", None)
            if deactivated:
                status.pop("requeueState", None)  # cleared on deactivation (core/workload_controller.go)
            elif timed_out:
                status["requeueState"] = requeue
            evictions = status.setdefault("schedulingStats", {}).setdefault("evictions", [])
            for entry in evictions:
                if (entry.get("reason"), entry.get("underlyingCause")) == stats_key:
                    entry["count"] = int(entry.get("count") or 0) + 1
                    break
            else:
                evictions.append({"reason": stats_key[0], "underlyingCause": stats_key[1], "count": 1})

        written = self._write(workload, change, status_change)
        if deactivated:

            def deactivate(obj: dict[str, Any]) -> None:
                obj["spec"]["active"] = False

            self.store.mutate(WORKLOADS, md["namespace"], workload["metadata"]["name"], deactivate)
            self._requeue_at.pop(uid, None)
        if written is not None:
            self.events.record(written, "Normal", f"EvictedDue{reason}", message, COMPONENT)
            if reason == "Preempted":
                self.events.record(written, "Normal", "Preempted", message, COMPONENT)
        self._queued_at[uid] = now
        self._admitted_at.pop(uid, None)
        self._unready_at.pop(uid, None)
        if readmit == "auto":
            self._held.discard(uid)
        else:
            self._held.add(uid)
        self._suspend(jobset, True)
        self.enqueue(SCHEDULE)
        return written

    def readmit(self, jobset: dict[str, Any]) -> dict[str, Any] | None:
        """Admit a queued or evicted Workload now (ignores quota and delay); None without a Workload."""
        md = jobset["metadata"]
        if self.store.find(WORKLOADS, md["namespace"], workload_name(jobset)) is None:
            return None
        return self.admit(jobset)

    def _suspend(self, jobset: dict[str, Any], suspend: bool) -> None:
        def apply(obj: dict[str, Any]) -> None:
            obj["spec"]["suspend"] = suspend

        self.store.mutate(JOBSETS, jobset["metadata"]["namespace"], jobset["metadata"]["name"], apply)

    def state(self) -> dict[str, Any]:
        """Quotas and the Workloads by state, for ``GET /sandbox/kueue``."""
        out: dict[str, Any] = {"quotas": dict(self.quotas), "admitted": [], "pending": [], "finished": []}
        for workload in self.store.list(WORKLOADS):
            key = f"{workload['metadata']['namespace']}/{workload['metadata']['name']}"
            if _true(workload, "Finished"):
                out["finished"].append(key)
            elif _true(workload, "Admitted"):
                out["admitted"].append(key)
            else:
                out["pending"].append(key)
        return out
