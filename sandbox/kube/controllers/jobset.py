"""Simulated JobSet controller (jobset.x-k8s.io/v1alpha2, v0.12), following the upstream reconcile loop.

Per reconcile: compute ``replicatedJobsStatus`` from the Jobs of the current restart attempt; if the
JobSet finished, delete its active Jobs; delete Jobs of earlier attempts (and, with the ``RestartJob``
gate, Jobs restarted alone); set ``RestartingJobSet`` False once every Job is ready; apply the failure
policy when a Job failed (restart everything, or with ``RestartJob`` only the failed Job, while the
restarts counted towards ``maxRestarts`` stay below it, else ``Failed``/``ReachedMaxRestarts``);
apply the success policy; with the ``ElasticJobSet`` gate, scale active Jobs to their template's
``parallelism``/``completions``; create Jobs (one replicated job at a time with
``startupPolicyOrder: InOrder``); suspend or resume Jobs. Feature gates come from the
``sandbox.pathways.dev/jobset-feature-gates`` knob (all off by default, as upstream).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from sandbox.kube.controllers.base import Controller
from sandbox.kube.controllers.events import EventRecorder
from sandbox.kube.controllers.job import job_finished
from sandbox.kube.controllers.knobs import knobs_for
from sandbox.kube.controllers.shape import (
    COORDINATOR,
    GLOBAL_REPLICAS,
    JOB_GLOBAL_INDEX,
    JOB_INDEX,
    JOB_KEY,
    JOB_RESTART_ATTEMPT,
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
from sandbox.kube.webhooks import ELASTIC_JOBSET, RESTART_JOB

log = logging.getLogger(__name__)

COMPONENT = "jobset-controller"
IN_PROGRESS = "StartupPolicyInProgress"
STARTUP_COMPLETED = "StartupPolicyCompleted"
# jobset_types.go JobSetRestarting; constants.go RestartingJobSetReason* and their messages.
RESTARTING = "RestartingJobSet"
RESTART_ALL = ("RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts")
RESTART_ONE = ("RestartJob", "RestartJobAndIgnoreMaxRestarts")


def set_condition(status: dict[str, Any], condition: dict[str, Any]) -> bool:
    """Upstream ``updateCondition``: replace in place on a status change; on a new reason or message
    alone, replace it keeping its ``lastTransitionTime``; append only if True.

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
            elif (current.get("reason"), current.get("message")) != (new.get("reason"), new.get("message")):
                conditions[i] = dict(new, lastTransitionTime=current.get("lastTransitionTime"))
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


def _int_label(job: dict[str, Any], key: str) -> int | None:
    try:
        return int((job["metadata"].get("labels") or {})[key])
    except (KeyError, ValueError):
        return None


def job_restarts(jobset: dict[str, Any], status: dict[str, Any], rjob_name: str, field: str) -> list[int]:
    """Upstream ``getJobRestarts``/``getJobRestartsCountTowardsMax``: the per-Job counters
    (``jobRestarts`` or ``jobRestartsCountTowardsMax``) of a replicated job, zeros when unset."""
    for entry in status.get("replicatedJobsStatus") or []:
        if entry.get("name") == rjob_name and entry.get(field):
            return [int(n) for n in entry[field]]
    replicas = next((int(r.get("replicas", 1)) for r in replicated_jobs(jobset) if r["name"] == rjob_name), 0)
    return [0] * replicas


def _restarted_alone(jobset: dict[str, Any], status: dict[str, Any], job: dict[str, Any]) -> bool:
    """With the ``RestartJob`` gate (``getChildJobs``): the Job's ``job-restart-attempt`` is below its
    target ``jobRestarts[index]``, so it is replaced (a Job without the label is kept)."""
    attempt, index = _int_label(job, JOB_RESTART_ATTEMPT), _int_label(job, JOB_INDEX)
    rjob_name = (job["metadata"].get("labels") or {}).get(REPLICATED_JOB_NAME, "")
    if attempt is None or index is None:
        return False
    targets = job_restarts(jobset, status, rjob_name, "jobRestarts")
    return 0 <= index < len(targets) and attempt < targets[index]


def _all_jobs_ready(jobset: dict[str, Any], rj_status: list[dict[str, Any]]) -> bool:
    """Upstream ``allJobsReady``: ready plus succeeded Jobs equal the replicas of every replicated job."""
    total = sum(int(r.get("replicas", 1)) for r in replicated_jobs(jobset))
    return total == sum(int(e["ready"]) + int(e["succeeded"]) for e in rj_status)


def _restarting_false(status: dict[str, Any], reason: str, message: str, pending_events: list) -> None:
    """Upstream ``setRestartingConditionFalse`` (a no-op while the JobSet never restarted)."""
    if set_condition(status, {"type": RESTARTING, "status": "False", "reason": reason, "message": message}):
        pending_events.append(("Normal", reason, message))


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
        gates = knobs_for(jobset).jobset_feature_gates
        status = clone(jobset.get("status") or {})
        restarts = status["restarts"] = int(status.get("restarts", 0))
        previous, active, successful, failed = [], [], [], []
        for job in self.store.owned(jobset["metadata"]["uid"], JOBS):
            if _restart_attempt(job) < restarts or (
                RESTART_JOB in gates and _restarted_alone(jobset, status, job)
            ):
                previous.append(job)
            else:
                {"Complete": successful, "Failed": failed, None: active}[job_finished(job)].append(job)
        rj_status = self._replicated_jobs_status(jobset, status, active, successful, failed, gates)
        status["replicatedJobsStatus"] = rj_status
        pending_events: list[tuple[str, str, str]] = []

        if jobset_finished(status):
            self._delete_jobs(active)
            self._write(jobset, status, pending_events)
            return
        self._delete_jobs(previous)
        if not spec.get("suspend") and _all_jobs_ready(jobset, rj_status):
            _restarting_false(status, "JobsReady", "all jobs are ready", pending_events)
        if failed:
            if self._execute_failure_policy(jobset, status, failed, pending_events, gates):
                self._write(jobset, status, pending_events)
            return
        if successful and self._execute_success_policy(jobset, status, successful, pending_events):
            self._write(jobset, status, pending_events)
            return
        if ELASTIC_JOBSET in gates:
            self._sync_job_scaling(jobset, active)
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
            _restarting_false(status, "JobSetSuspended", "jobset is suspended", pending_events)
        else:
            self._resume_jobs_if_necessary(jobset, status, active, rj_status, pending_events)
        self._write(jobset, status, pending_events)

    # -- status -----------------------------------------------------------------------------------
    @staticmethod
    def _replicated_jobs_status(
        jobset: dict[str, Any],
        status: dict[str, Any],
        active: list[dict],
        successful: list[dict],
        failed: list[dict],
        gates: frozenset[str],
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
        if RESTART_JOB in gates:  # the per-Job restart counters are kept from the last status
            for previous in status.get("replicatedJobsStatus") or []:
                entry = counts.get(previous.get("name"))
                for field in ("jobRestarts", "jobRestartsCountTowardsMax"):
                    if entry is not None and previous.get(field):
                        entry[field] = list(previous[field])
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
        self,
        jobset: dict[str, Any],
        status: dict[str, Any],
        failed: list[dict],
        pending_events: list,
        gates: frozenset[str],
    ) -> bool:
        """Upstream ``executeFailurePolicy`` (failure_policy.go); False when the action cannot be
        applied (a ``RestartJob`` action without its gate: the reconcile errs and writes nothing)."""
        policy = (jobset.get("spec") or {}).get("failurePolicy")
        first = min(failed, key=_failure_time)
        if policy is None:
            self._fail(
                status,
                "FailedJobs",
                _with_first("jobset failed due to one or more job failures", first),
                pending_events,
            )
            return True
        rule: dict[str, Any] | None = None
        target = first
        for candidate in policy.get("rules") or []:
            matching = [job for job in failed if _rule_applies(candidate, job)]
            if matching:
                rule, target = candidate, min(matching, key=_failure_time)
                break
        action = rule.get("action", "RestartJobSet") if rule is not None else "RestartJobSet"
        max_restarts = int(policy.get("maxRestarts", 0))
        counted = int(status.get("restartsCountTowardsMax", 0))
        # totalRestartsCountTowardsMax: global restarts plus every Job's own, with the RestartJob gate.
        counted_all = counted + sum(
            sum(int(n) for n in entry.get("jobRestartsCountTowardsMax") or [])
            for entry in status.get("replicatedJobsStatus") or []
        )
        message = _with_first(f"applying {action} failure policy action", target)

        def reached_max() -> bool:
            self._fail(
                status,
                "ReachedMaxRestarts",
                _with_first("jobset failed due to reaching max number of restarts", target),
                pending_events,
            )
            return True

        if action == "FailJobSet":
            self._fail(status, "FailJobSetFailurePolicyAction", message, pending_events)
        elif action in RESTART_ALL:
            if action == "RestartJobSet" and (
                (RESTART_JOB in gates and counted_all >= max_restarts) or counted >= max_restarts
            ):
                return reached_max()
            status["restarts"] = int(status.get("restarts", 0)) + 1
            if action == "RestartJobSet":
                status["restartsCountTowardsMax"] = counted + 1
            reason = f"FailurePolicy_{rule.get('name', '')}" if rule is not None else "DefaultFailurePolicy"
            if set_condition(
                status, {"type": RESTARTING, "status": "True", "reason": reason, "message": message}
            ):
                pending_events.append(("Warning", reason, message))
            pending_events.append(("Warning", f"{action}FailurePolicyAction", message))
        elif action in RESTART_ONE and RESTART_JOB in gates:
            if action == "RestartJob" and counted_all >= max_restarts:
                return reached_max()
            self._restart_job(jobset, status, target, count=action == "RestartJob")
            pending_events.append(("Warning", f"{action}FailurePolicyAction", message))
        else:
            log.warning(
                "JobSet %s: %s failure policy action cannot be used when the feature gate RestartJob is "
                "disabled",
                jobset["metadata"]["name"],
                action,
            )
            return False
        return True

    @staticmethod
    def _restart_job(
        jobset: dict[str, Any], status: dict[str, Any], job: dict[str, Any], *, count: bool
    ) -> None:
        """Upstream ``failurePolicyRecreateJob``: ``jobRestarts[index] += 1`` (and
        ``jobRestartsCountTowardsMax[index]`` when it counts); the Job is replaced next reconcile."""
        rjob_name = (job["metadata"].get("labels") or {}).get(REPLICATED_JOB_NAME, "")
        index = _int_label(job, JOB_INDEX)
        entry = next((e for e in status.get("replicatedJobsStatus") or [] if e["name"] == rjob_name), None)
        fields = ("jobRestarts", "jobRestartsCountTowardsMax") if count else ("jobRestarts",)
        for field in fields:
            counters = job_restarts(jobset, status, rjob_name, field)
            if entry is None or index is None or not 0 <= index < len(counters):
                return
            counters[index] += 1
            entry[field] = counters

    @staticmethod
    def _fail(status: dict[str, Any], reason: str, message: str, pending_events: list) -> None:
        """Upstream ``setJobSetFailedCondition``."""
        set_condition(status, {"type": "Failed", "status": "True", "reason": reason, "message": message})
        pending_events.append(("Warning", reason, message))
        _restarting_false(status, "JobSetFailed", "jobset failed", pending_events)
        status["terminalState"] = "Failed"

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
        pending_events.append(("Normal", "AllJobsCompleted", "jobset completed successfully"))
        _restarting_false(status, "JobSetCompleted", "jobset completed successfully", pending_events)
        status["terminalState"] = "Completed"
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
        if RESTART_JOB in knobs_for(jobset).jobset_feature_gates:
            counters = job_restarts(jobset, status, rjob["name"], "jobRestarts")
            tags[JOB_RESTART_ATTEMPT] = str(counters[index] if index < len(counters) else 0)
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

    def _sync_job_scaling(self, jobset: dict[str, Any], active: list[dict[str, Any]]) -> None:
        """Upstream ``syncJobScaling`` (``ElasticJobSet``): an active Job whose ``parallelism`` or
        ``completions`` differ from its template's gets the template's, when those two are equal."""
        desired = {r["name"]: (r.get("template") or {}).get("spec") or {} for r in replicated_jobs(jobset)}
        for job in active:
            template = desired.get((job["metadata"].get("labels") or {}).get(REPLICATED_JOB_NAME, ""))
            if template is None:
                continue
            parallelism, completions = template.get("parallelism"), template.get("completions")
            if parallelism is None or parallelism != completions:
                continue
            spec = job.get("spec") or {}
            if (spec.get("parallelism"), spec.get("completions")) == (parallelism, completions):
                continue

            def apply(obj: dict[str, Any], p: int = parallelism, c: int = completions) -> None:
                obj["spec"]["parallelism"], obj["spec"]["completions"] = p, c

            self.store.mutate(JOBS, job["metadata"]["namespace"], job["metadata"]["name"], apply)

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
