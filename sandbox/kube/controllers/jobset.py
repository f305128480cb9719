"""Simulated JobSet controller (jobset.x-k8s.io/v1alpha2), following the upstream reconcile loop.

Per reconcile: compute ``replicatedJobsStatus`` from the Jobs of the current restart attempt; if the
JobSet finished, delete its active Jobs; delete Jobs of earlier attempts; apply the failure policy
when a Job failed (restart everything while ``restartsCountTowardsMax < maxRestarts``, else
``Failed``/``ReachedMaxRestarts``); apply the success policy; create Jobs (one replicated job at a
time with ``startupPolicyOrder: InOrder``); suspend or resume Jobs.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sandbox.kube.controllers.base import Controller
from sandbox.kube.controllers.events import EventRecorder
from sandbox.kube.controllers.job import job_finished
from sandbox.kube.controllers.shape import (
    COORDINATOR,
    GLOBAL_REPLICAS,
    JOB_GLOBAL_INDEX,
    JOB_INDEX,
    JOB_KEY,
    JOBSET_NAME,
    REPLICATED_JOB_NAME,
    REPLICATED_JOB_REPLICAS,
    RESTART_ATTEMPT,
    coordinator_endpoint,
    replicated_jobs,
    subdomain,
)
from sandbox.kube.errors import ApiError
from sandbox.kube.meta import clone, owner_reference, rfc3339
from sandbox.kube.resources import JOBS, JOBSETS
from sandbox.kube.store import Store

COMPONENT = "jobset-controller"
IN_PROGRESS = "StartupPolicyInProgress"
STARTUP_COMPLETED = "StartupPolicyCompleted"


def set_condition(status: dict[str, Any], condition: dict[str, Any]) -> bool:
    """Upstream ``updateCondition``: update in place on a status change, append only if True.

    ``StartupPolicyInProgress`` and ``StartupPolicyCompleted`` exclude each other: a new True one
    sets the other to False.
    """
    conditions = status.setdefault("conditions", [])
    new = dict(condition, lastTransitionTime=rfc3339())
    found = changed = False
    for i, current in enumerate(conditions):
        if current.get("type") == new["type"]:
            if current.get("status") != new["status"]:
                conditions[i] = new
                changed = True
            found = True
        elif (
            {current.get("type"), new["type"]} == {IN_PROGRESS, STARTUP_COMPLETED}
            and current.get("status") == "True"
            and new["status"] == "True"
        ):
            conditions[i] = dict(current, status="False")
            changed = True
    if not found and new["status"] == "True":
        conditions.append(new)
        changed = True
    if not conditions:
        status.pop("conditions")
    return changed


def condition_true(status: dict[str, Any], type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True" for c in status.get("conditions") or [])


def jobset_finished(status: dict[str, Any]) -> bool:
    return condition_true(status, "Completed") or condition_true(status, "Failed")


def _restart_attempt(job: dict[str, Any]) -> int:
    try:
        return int((job["metadata"].get("labels") or {}).get(RESTART_ATTEMPT, "0"))
    except ValueError:
        return -1


class JobSetController(Controller):
    """Creates and supervises the Jobs of every JobSet (created by a client or by a PathwaysJob)."""

    name = "jobset-controller"

    def __init__(self, store: Store, events: EventRecorder):
        super().__init__(store)
        self.events = events

    def reconcile(self, key: Any) -> None:
        namespace, name = key
        jobset = self.store.find(JOBSETS, namespace, name)
        if jobset is None or (jobset.get("metadata") or {}).get("deletionTimestamp"):
            return  # upstream does not reconcile a JobSet marked for deletion
        spec = jobset.get("spec") or {}
        managed_by = spec.get("managedBy")
        if managed_by and managed_by != "jobset.sigs.k8s.io/jobset-controller":
            return
        status = clone(jobset.get("status") or {})
        restarts = status["restarts"] = int(status.get("restarts", 0))
        previous, active, successful, failed = [], [], [], []
        for job in self.store.owned(jobset["metadata"]["uid"], JOBS):
            if _restart_attempt(job) < restarts:
                previous.append(job)
            else:
                {"Complete": successful, "Failed": failed, None: active}[job_finished(job)].append(job)
        rj_status = self._replicated_jobs_status(jobset, active, successful, failed)
        status["replicatedJobsStatus"] = rj_status
        pending_events: list[tuple[str, str, str]] = []

        if jobset_finished(status):
            self._delete_jobs(active)
            self._write(jobset, status, pending_events)
            return
        self._delete_jobs(previous)
        if failed:
            self._execute_failure_policy(jobset, status, failed, pending_events)
            self._write(jobset, status, pending_events)
            return
        if successful and self._execute_success_policy(jobset, status, successful, pending_events):
            self._write(jobset, status, pending_events)
            return
        existing = {j["metadata"]["name"] for j in active + successful + failed}
        self._reconcile_replicated_jobs(jobset, status, rj_status, existing, pending_events)
        if spec.get("suspend"):
            self._suspend_jobs(active)
            if set_condition(
                status,
                {
                    "type": "Suspended",
                    "status": "True",
                    "reason": "SuspendedJobs",
                    "message": "jobset is suspended",
                },
            ):
                pending_events.append(("Normal", "SuspendedJobs", "jobset is suspended"))
        else:
            self._resume_jobs_if_necessary(jobset, status, active, rj_status, pending_events)
        self._write(jobset, status, pending_events)

    # -- status -----------------------------------------------------------------------------------
    @staticmethod
    def _replicated_jobs_status(
        jobset: dict[str, Any], active: list[dict], successful: list[dict], failed: list[dict]
    ) -> list[dict[str, Any]]:
        counts = {
            r["name"]: {
                "name": r["name"],
                "ready": 0,
                "succeeded": 0,
                "failed": 0,
                "active": 0,
                "suspended": 0,
            }
            for r in replicated_jobs(jobset)
        }
        for job in active:
            entry = counts.get((job["metadata"].get("labels") or {}).get(REPLICATED_JOB_NAME, ""))
            if entry is None:
                continue
            jspec, jstatus = job.get("spec") or {}, job.get("status") or {}
            pods = int(jspec.get("parallelism", 1))
            if jspec.get("completions") is not None and int(jspec["completions"]) < pods:
                pods = int(jspec["completions"])
            if int(jstatus.get("succeeded", 0)) + int(jstatus.get("ready", 0)) >= pods:
                entry["ready"] += 1
            if int(jstatus.get("active", 0)) > 0:
                entry["active"] += 1
            if jspec.get("suspend"):
                entry["suspended"] += 1
        for bucket, field in ((successful, "succeeded"), (failed, "failed")):
            for job in bucket:
                entry = counts.get((job["metadata"].get("labels") or {}).get(REPLICATED_JOB_NAME, ""))
                if entry is not None:
                    entry[field] += 1
        return list(counts.values())

    def _write(self, jobset: dict[str, Any], status: dict[str, Any], pending_events: list) -> None:
        def apply(obj: dict[str, Any]) -> None:
            obj["status"] = status

        md = jobset["metadata"]
        written = self.store.mutate(JOBSETS, md["namespace"], md["name"], apply, subresource="status")
        if written is not None:
            for type_, reason, message in pending_events:
                self.events.record(written, type_, reason, message, COMPONENT)

    # -- failure and success policies -------------------------------------------------------------
    def _execute_failure_policy(
        self, jobset: dict[str, Any], status: dict[str, Any], failed: list[dict], pending_events: list
    ) -> None:
        policy = (jobset.get("spec") or {}).get("failurePolicy")
        first = min(failed, key=_failure_time)
        if policy is None:
            self._fail(
                status,
                "FailedJobs",
                _with_first("jobset failed due to one or more job failures", first),
                pending_events,
            )
            return
        action, target = "RestartJobSet", first
        for rule in policy.get("rules") or []:
            matching = [job for job in failed if _rule_applies(rule, job)]
            if matching:
                action, target = rule.get("action", "RestartJobSet"), min(matching, key=_failure_time)
                break
        if action == "FailJobSet":
            self._fail(
                status,
                "FailJobSetFailurePolicyAction",
                _with_first("applying FailJobSet failure policy action", target),
                pending_events,
            )
        elif action == "RestartJobSetAndIgnoreMaxRestarts":
            status["restarts"] = int(status.get("restarts", 0)) + 1
            pending_events.append(
                (
                    "Warning",
                    "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction",
                    _with_first("applying RestartJobSetAndIgnoreMaxRestarts failure policy action", target),
                )
            )
        elif int(status.get("restartsCountTowardsMax", 0)) >= int(policy.get("maxRestarts", 0)):
            self._fail(
                status,
                "ReachedMaxRestarts",
                _with_first("jobset failed due to reaching max number of restarts", target),
                pending_events,
            )
        else:
            status["restarts"] = int(status.get("restarts", 0)) + 1
            status["restartsCountTowardsMax"] = int(status.get("restartsCountTowardsMax", 0)) + 1
            pending_events.append(
                (
                    "Warning",
                    "RestartJobSetFailurePolicyAction",
                    _with_first("applying RestartJobSet failure policy action", target),
                )
            )

    @staticmethod
    def _fail(status: dict[str, Any], reason: str, message: str, pending_events: list) -> None:
        set_condition(status, {"type": "Failed", "status": "True", "reason": reason, "message": message})
        status["terminalState"] = "Failed"
        pending_events.append(("Warning", reason, message))

    @staticmethod
    def _execute_success_policy(
        jobset: dict[str, Any], status: dict[str, Any], successful: list[dict], pending_events: list
    ) -> bool:
        policy = (jobset.get("spec") or {}).get("successPolicy") or {}
        rjobs = replicated_jobs(jobset)
        targets = policy.get("targetReplicatedJobs") or [r["name"] for r in rjobs]
        matching = [
            j for j in successful if (j["metadata"].get("labels") or {}).get(REPLICATED_JOB_NAME) in targets
        ]
        if policy.get("operator", "All") == "Any":
            expected = 1
        else:
            expected = sum(int(r.get("replicas", 1)) for r in rjobs if r["name"] in targets)
        if len(matching) < expected:
            return False
        set_condition(
            status,
            {
                "type": "Completed",
                "status": "True",
                "reason": "AllJobsCompleted",
                "message": "jobset completed successfully",
            },
        )
        status["terminalState"] = "Completed"
        pending_events.append(("Normal", "AllJobsCompleted", "jobset completed successfully"))
        return True

    # -- creating, suspending and resuming Jobs ---------------------------------------------------
    def _reconcile_replicated_jobs(
        self,
        jobset: dict[str, Any],
        status: dict[str, Any],
        rj_status: list[dict[str, Any]],
        existing: set[str],
        pending_events: list,
    ) -> None:
        spec = jobset.get("spec") or {}
        in_order = ((spec.get("startupPolicy") or {}).get("startupPolicyOrder")) == "InOrder"
        suspended = bool(spec.get("suspend"))
        by_name = {s["name"]: s for s in rj_status}
        for rjob in replicated_jobs(jobset):
            if not suspended and in_order and _all_started(rjob, by_name[rjob["name"]]):
                continue
            for index in range(int(rjob.get("replicas", 1))):
                job_name = f"{jobset['metadata']['name']}-{rjob['name']}-{index}"
                if job_name not in existing:
                    self._create_job(jobset, status, rjob, index)
            if not suspended and in_order:
                if set_condition(
                    status,
                    {
                        "type": IN_PROGRESS,
                        "status": "True",
                        "reason": "InOrderStartupPolicyInProgress",
                        "message": "in order startup policy is in progress",
                    },
                ):
                    pending_events.append(
                        ("Normal", "InOrderStartupPolicyInProgress", "in order startup policy is in progress")
                    )
                return
        if (
            not suspended
            and in_order
            and set_condition(
                status,
                {
                    "type": STARTUP_COMPLETED,
                    "status": "True",
                    "reason": "InOrderStartupPolicyCompleted",
                    "message": "in order startup policy has completed",
                },
            )
        ):
            pending_events.append(
                ("Normal", "InOrderStartupPolicyCompleted", "in order startup policy has completed")
            )

    def _create_job(
        self, jobset: dict[str, Any], status: dict[str, Any], rjob: dict[str, Any], index: int
    ) -> None:
        md = jobset["metadata"]
        job_name = f"{md['name']}-{rjob['name']}-{index}"
        template = clone(rjob.get("template") or {})
        job_spec = template.get("spec") or {}
        rjobs = replicated_jobs(jobset)
        global_index = 0
        for other in rjobs:
            if other["name"] == rjob["name"]:
                break
            global_index += int(other.get("replicas", 1))
        tags = {
            JOBSET_NAME: md["name"],
            REPLICATED_JOB_NAME: rjob["name"],
            RESTART_ATTEMPT: str(int(status.get("restarts", 0))),
            REPLICATED_JOB_REPLICAS: str(int(rjob.get("replicas", 1))),
            GLOBAL_REPLICAS: str(sum(int(r.get("replicas", 1)) for r in rjobs)),
            JOB_INDEX: str(index),
            JOB_KEY: hashlib.sha1(f"{md['namespace']}/{job_name}".encode()).hexdigest(),
            JOB_GLOBAL_INDEX: str(global_index + index),
        }
        coordinator = coordinator_endpoint(jobset)
        if coordinator:
            tags[COORDINATOR] = coordinator
        pod_template = job_spec.setdefault("template", {})
        for target in (template, pod_template):
            tmd = target.setdefault("metadata", {})
            tmd["labels"] = {**(tmd.get("labels") or {}), **tags}
            tmd["annotations"] = {**(tmd.get("annotations") or {}), **tags}
        if ((jobset.get("spec") or {}).get("network") or {}).get("enableDNSHostnames"):
            pod_template.setdefault("spec", {})["subdomain"] = subdomain(jobset)
        job_spec["suspend"] = bool((jobset.get("spec") or {}).get("suspend"))
        job_spec.setdefault("parallelism", 1)
        job_spec.setdefault("completions", job_spec["parallelism"])
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job_name,
                "namespace": md["namespace"],
                "labels": template["metadata"]["labels"],
                "annotations": template["metadata"]["annotations"],
                "ownerReferences": [owner_reference(jobset)],
            },
            "spec": job_spec,
            "status": {},
        }
        try:
            self.store.create(JOBS, job, namespace=md["namespace"], from_api=False)
        except ApiError as err:
            if err.code != 409:
                raise

    def _delete_jobs(self, jobs: list[dict[str, Any]]) -> None:
        for job in jobs:
            md = job["metadata"]
            if self.store.find(JOBS, md["namespace"], md["name"]) is not None:
                self.store.delete(JOBS, md["namespace"], md["name"], propagation="Foreground")

    def _set_job_suspend(self, job: dict[str, Any], suspend: bool) -> None:
        def apply(obj: dict[str, Any]) -> None:
            obj["spec"]["suspend"] = suspend

        self.store.mutate(JOBS, job["metadata"]["namespace"], job["metadata"]["name"], apply)

    def _suspend_jobs(self, active: list[dict[str, Any]]) -> None:
        for job in active:
            if not (job.get("spec") or {}).get("suspend"):
                self._set_job_suspend(job, True)

    def _resume_jobs_if_necessary(
        self,
        jobset: dict[str, Any],
        status: dict[str, Any],
        active: list[dict[str, Any]],
        rj_status: list[dict[str, Any]],
        pending_events: list,
    ) -> None:
        in_order = (
            ((jobset.get("spec") or {}).get("startupPolicy") or {}).get("startupPolicyOrder")
        ) == "InOrder"
        by_name = {s["name"]: s for s in rj_status}
        for rjob in replicated_jobs(jobset):
            if in_order and _all_started(rjob, by_name[rjob["name"]]):
                continue
            for job in active:
                labels = job["metadata"].get("labels") or {}
                if labels.get(REPLICATED_JOB_NAME) == rjob["name"] and (job.get("spec") or {}).get("suspend"):
                    self._set_job_suspend(job, False)
            if in_order:
                set_condition(
                    status,
                    {
                        "type": IN_PROGRESS,
                        "status": "True",
                        "reason": "InOrderStartupPolicyInProgress",
                        "message": "in order startup policy is in progress",
                    },
                )
                return
        if set_condition(
            status,
            {"type": "Suspended", "status": "False", "reason": "ResumeJobs", "message": "jobset is resumed"},
        ):
            pending_events.append(("Normal", "ResumeJobs", "jobset is resumed"))


def _all_started(rjob: dict[str, Any], rj_status: dict[str, Any]) -> bool:
    return int(rjob.get("replicas", 1)) == rj_status["failed"] + rj_status["ready"] + rj_status["succeeded"]


def _failure_time(job: dict[str, Any]) -> tuple[str, str]:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return (cond.get("lastTransitionTime") or "", job["metadata"]["name"])
    return ("~", job["metadata"]["name"])


def _with_first(message: str, job: dict[str, Any]) -> str:
    return f"{message} (first failed job: {job['metadata']['name']})"


def _rule_applies(rule: dict[str, Any], job: dict[str, Any]) -> bool:
    reasons = rule.get("onJobFailureReasons") or []
    if reasons:
        reason = next(
            (
                c.get("reason")
                for c in (job.get("status") or {}).get("conditions") or []
                if c.get("type") == "Failed" and c.get("status") == "True"
            ),
            None,
        )
        if reason not in reasons:
            return False
    targets = rule.get("targetReplicatedJobs") or []
    return not targets or (job["metadata"].get("labels") or {}).get(REPLICATED_JOB_NAME) in targets
