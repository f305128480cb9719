"""Simulated controllers that run in the API server's event loop and act only through its store.

- ``pathwaysjob``: PathwaysJob -> JobSet, and JobSet state mirrored back into the PathwaysJob.
- ``jobset``: JobSet -> batch Jobs, restarts, success/failure policies, suspend/resume.
- ``job``: Indexed Job -> pods, success/failure counting, suspension.
- ``kubelet``: pod scheduling and start, container logs, the user program in the head pod.
- ``kueue``: Workloads for queued JobSets: quota, admission, preemption, eviction, re-admission.
- ``scenarios``: actions for tests (preempt a slice, lose a node, end the program, evict, ...).
"""

from __future__ import annotations

from typing import Any

from sandbox.kube.controllers.events import EventRecorder
from sandbox.kube.controllers.job import JobController
from sandbox.kube.controllers.jobset import JobSetController
from sandbox.kube.controllers.kubelet import Kubelet
from sandbox.kube.controllers.kueue import KueueController
from sandbox.kube.controllers.pathwaysjob import PathwaysJobController
from sandbox.kube.controllers.scenarios import ACTIONS, run_action
from sandbox.kube.controllers.shape import JOBSET_NAME, REPLICATED_JOB_NAME, head_replicated_job
from sandbox.kube.controllers.state import SimState
from sandbox.kube.meta import controller_owner
from sandbox.kube.resources import JOBSETS
from sandbox.kube.store import Store, WatchEvent

__all__ = ["ACTIONS", "ControllerManager"]


class ControllerManager:
    """Owns the simulated controllers and routes store changes to their work queues."""

    def __init__(self, store: Store):
        self.store = store
        self.sim = SimState()
        self.events = EventRecorder(store)
        self.kubelet = Kubelet(store, self.sim, self.events)
        self.jobs = JobController(store, self.sim, self.events)
        self.jobsets = JobSetController(store, self.events)
        self.pathways = PathwaysJobController(store)
        self.kueue = KueueController(store, self.events)
        self.controllers = (self.pathways, self.jobsets, self.jobs, self.kubelet, self.kueue)
        store.add_listener(self._route)

    def start(self) -> None:
        for controller in self.controllers:
            controller.start()

    async def stop(self) -> None:
        for controller in self.controllers:
            await controller.stop()

    def reset(self) -> None:
        """Forget queued work, timers and simulation state (the store is wiped separately)."""
        for controller in self.controllers:
            controller.reset()
        self.sim.clear()
        self.events.clear()

    def run_action(self, namespace: str, name: str, action: str, params: dict[str, str]) -> dict[str, Any]:
        return run_action(self, namespace, name, action, params)

    def _route(self, event: WatchEvent) -> None:
        md = event.obj.get("metadata") or {}
        namespace, name, uid = md.get("namespace", ""), md.get("name", ""), md.get("uid", "")
        owner = controller_owner(event.obj) or {}
        deleted = event.type == "DELETED"
        if event.resource == "pathwaysjobs":
            self.pathways.enqueue((namespace, name))
        elif event.resource == "jobsets":
            self.jobsets.enqueue((namespace, name))
            if owner.get("kind") == "PathwaysJob":
                self.pathways.enqueue((namespace, owner["name"]))
            if deleted:
                self.sim.forget_jobset(uid)
            self.kueue.enqueue((namespace, name))
        elif event.resource == "jobs":
            self.jobs.enqueue((namespace, name))
            if owner.get("kind") == "JobSet":
                self.jobsets.enqueue((namespace, owner["name"]))
            if deleted:
                self.sim.forget_job(uid)
        elif event.resource == "pods":
            if owner.get("kind") == "Job":
                self.jobs.enqueue((namespace, owner["name"]))
            if deleted:
                self.sim.forget_pod(uid)
            else:
                self.kubelet.enqueue(("pod", namespace, name))
            labels = md.get("labels") or {}
            jobset_name = labels.get(JOBSET_NAME)
            if jobset_name:
                jobset = self.store.find(JOBSETS, namespace, jobset_name)
                if jobset is not None and labels.get(REPLICATED_JOB_NAME) != head_replicated_job(jobset):
                    self.kubelet.enqueue(("gate", namespace, jobset_name))
