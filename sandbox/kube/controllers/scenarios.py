"""Scenario actions for tests and benchmarks: preemption, node loss, suspend/resume, program end,
Kueue eviction, a pod's kubelet eviction for its own storage use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandbox.kube.controllers.job import ACTIVE_PHASES
from sandbox.kube.controllers.shape import JOB_INDEX, REPLICATED_JOB_NAME, RESTART_ATTEMPT, main_container
from sandbox.kube.controllers.shape import worker_replicated_jobs as _workers
from sandbox.kube.errors import ApiError, bad_request
from sandbox.kube.resources import JOBS, JOBSETS, PODS

if TYPE_CHECKING:
    from sandbox.kube.controllers import ControllerManager

ACTIONS = (
    "preempt-slice",
    "lose-node",
    "suspend",
    "resume",
    "admit",
    "fail-program",
    "complete-program",
    "evict",
    "exceed-ephemeral-storage",
)
PREEMPTION_MESSAGE = "default-scheduler: preempting to accommodate a higher priority pod"
NODE_LOST_MESSAGE = "PodGC: node no longer exists"
DATA_LOSS_LINE = (
    "jax.errors.JaxRuntimeError: DATA_LOSS: Slice {slice} is no longer reachable: its workers "
    "disconnected from the Pathways resource manager"
)


def _int_param(params: dict[str, str], name: str, default: int | None = None) -> int:
    raw = params.get(name)
    if raw is None:
        if default is None:
            raise bad_request(f"missing query parameter {name!r}")
        return default
    try:
        return int(raw)
    except ValueError:
        raise bad_request(f"query parameter {name!r} must be an integer, got {raw!r}") from None


def _set_suspend(mgr: ControllerManager, jobset: dict[str, Any], suspend: bool) -> None:
    def apply(obj: dict[str, Any]) -> None:
        obj["spec"]["suspend"] = suspend

    mgr.store.mutate(JOBSETS, jobset["metadata"]["namespace"], jobset["metadata"]["name"], apply)


def _slice(mgr: ControllerManager, jobset: dict[str, Any], params: dict[str, str]) -> tuple[dict, list[dict]]:
    """The current-attempt worker Job of ``?slice=i`` (``&replicatedJob=`` picks another), its live pods."""
    index = _int_param(params, "slice")
    workers = [r["name"] for r in _workers(jobset)]
    rjob = params.get("replicatedJob") or (workers[0] if workers else "")
    attempt = str(int((jobset.get("status") or {}).get("restarts", 0)))
    for job in mgr.store.owned(jobset["metadata"]["uid"], JOBS):
        labels = job["metadata"].get("labels") or {}
        if (
            labels.get(REPLICATED_JOB_NAME) == rjob
            and labels.get(JOB_INDEX) == str(index)
            and labels.get(RESTART_ATTEMPT) == attempt
        ):
            pods = [
                p
                for p in mgr.store.owned(job["metadata"]["uid"], PODS)
                if (p.get("status") or {}).get("phase") in ACTIVE_PHASES
            ]
            return job, pods
    raise ApiError(
        409, f"slice {index} of replicated job {rjob!r} has no Job in the current attempt", "Conflict"
    )


def run_action(
    mgr: ControllerManager, namespace: str, name: str, action: str, params: dict[str, str]
) -> dict:
    """Run one scenario action on JobSet ``namespace/name``; returns a JSON-able summary."""
    jobset = mgr.store.get(JOBSETS, namespace, name)
    result: dict[str, Any] = {"action": action, "namespace": namespace, "jobset": name}
    if action == "suspend":
        _set_suspend(mgr, jobset, True)
    elif action in ("resume", "admit"):
        # A Kueue-managed JobSet is resumed by admitting its Workload (ignoring quota and delay).
        if mgr.kueue.readmit(jobset) is None:
            if action == "admit":
                raise ApiError(409, f"jobset {name} has no Kueue workload", "Conflict")
            _set_suspend(mgr, jobset, False)
    elif action in ("preempt-slice", "lose-node"):
        job, pods = _slice(mgr, jobset, params)
        if not pods:
            raise ApiError(409, f"job {job['metadata']['name']} has no pending or running pods", "Conflict")
        result["job"] = job["metadata"]["name"]
        result["pods"] = [p["metadata"]["name"] for p in pods]
        if action == "preempt-slice":
            for pod in pods:
                written = mgr.kubelet.disrupt(pod, "PreemptionByScheduler", PREEMPTION_MESSAGE)
                if written is not None:
                    mgr.events.record(
                        written,
                        "Normal",
                        "Preempted",
                        "Preempted by a higher priority pod",
                        "default-scheduler",
                    )
        else:
            # The node goes: the node lifecycle controller marks its pods, the taint manager evicts
            # them, pod GC deletes them (events on the pods are all that is left of them).
            for pod in pods:
                mgr.events.record(pod, "Warning", "NodeNotReady", "Node is not ready", "node-controller")
                mgr.events.record(
                    pod,
                    "Normal",
                    "TaintManagerEviction",
                    f"Marking for deletion Pod {namespace}/{pod['metadata']['name']}",
                    "taint-eviction-controller",
                )
                mgr.kubelet.disrupt(pod, "DeletionByPodGC", NODE_LOST_MESSAGE)
            if params.get("program") == "data-loss":
                # No pod failure policy on the slice's Job (as the PathwaysJob controller renders it):
                # the program sees the slice vanish first and dies with DATA_LOSS.
                if main_container(jobset) is None:
                    raise ApiError(409, f"jobset {name} is headless: there is no program", "Conflict")
                mgr.kubelet.end_program(jobset, 1, DATA_LOSS_LINE.format(slice=_int_param(params, "slice")))
            else:
                mgr.jobs.fail(
                    mgr.store.get(JOBS, namespace, job["metadata"]["name"]),
                    "PodFailurePolicy",
                    f"Pod {namespace}/{pods[0]['metadata']['name']} has condition DisruptionTarget matching "
                    "FailJob rule at index 0",
                    failed_pods=len(pods),
                )
            for pod in pods:
                if mgr.store.find(PODS, namespace, pod["metadata"]["name"]) is not None:
                    mgr.store.delete(PODS, namespace, pod["metadata"]["name"])
    elif action in ("fail-program", "complete-program"):
        if main_container(jobset) is None:
            raise ApiError(
                409, f"jobset {name} has no main container (headless): there is no program", "Conflict"
            )
        code = 0 if action == "complete-program" else _int_param(params, "exit_code", 1)
        pods = mgr.kubelet.end_program(jobset, code)
        if not pods:
            raise ApiError(409, f"jobset {name} has no pending or running head pod", "Conflict")
        result["pods"], result["exit_code"] = pods, code
    elif action == "exceed-ephemeral-storage":
        # The pods of one Job (``?slice=i``, ``&replicatedJob=pathways-head`` for the head) wrote more
        # than their container's ephemeral-storage limit: the kubelet evicts them
        # (eviction_manager.go containerEphemeralStorageLimitEviction, helpers.go's message).
        job, pods = _slice(mgr, jobset, params)
        if not pods:
            raise ApiError(409, f"job {job['metadata']['name']} has no pending or running pods", "Conflict")
        limit = params.get("limit", "10Gi")
        for pod in pods:
            names = [c["name"] for c in pod["spec"]["containers"]]
            container = params.get("container") or (
                main_container(jobset) if main_container(jobset) in names else names[0]
            )
            message = f'Container {container} exceeded its local ephemeral storage limit "{limit}". '
            mgr.kubelet.evict(pod, message)
        result["job"] = job["metadata"]["name"]
        result["pods"] = [p["metadata"]["name"] for p in pods]
    elif action == "evict":
        readmit = params.get("readmit", "never")
        if readmit not in ("never", "auto"):
            raise bad_request(f"readmit must be 'never' or 'auto', got {readmit!r}")
        workload = mgr.kueue.evict(
            jobset,
            params.get("reason", "Preempted"),
            readmit=readmit,
            slice_index=_int_param(params, "slice", 0),
        )
        result["workload"] = (workload or {}).get("metadata", {}).get("name")
    else:
        raise ApiError(404, f"unknown action {action!r}; known: {', '.join(ACTIONS)}", "NotFound")
    return result
