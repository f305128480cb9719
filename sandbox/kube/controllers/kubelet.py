"""Simulated scheduler and kubelet: pods go Pending -> Running, and the head pod runs the program.

The head pod starts after ``head-delay-seconds``; worker slices start one by one, ``slice-delay-seconds``
apart (all pods of a slice together); slices at or beyond ``max-ready-slices`` stay Pending
(unschedulable). When every worker pod of the current attempt is Ready, the head pod's main
container runs the "program": it prints ``program-log`` over ``program-seconds`` and exits with
``program-exit-code`` (the pod ends Succeeded or Failed).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from typing import Any

from sandbox.kube.controllers.base import Controller
from sandbox.kube.controllers.events import EventRecorder
from sandbox.kube.controllers.job import pod_ready
from sandbox.kube.controllers.knobs import DEFAULT_PROGRAM_LOG, Knobs, knobs_for
from sandbox.kube.controllers.shape import (
    JOB_INDEX,
    JOBSET_NAME,
    REPLICATED_JOB_NAME,
    RESTART_ATTEMPT,
    backend_target,
    device_count,
    expected_worker_pods,
    head_replicated_job,
    main_container,
    slice_count,
)
from sandbox.kube.controllers.state import ProgramRun, SimState
from sandbox.kube.meta import controller_owner, rfc3339
from sandbox.kube.resources import JOBS, JOBSETS, PODS
from sandbox.kube.store import Store

COMPONENT = "kubelet"
#: How a process ends that the kubelet stops with SIGTERM and that does not catch it (128 + 15).
SIGTERM_EXIT_CODE = 143


class _SafeFormat(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _format(line: str, context: dict[str, Any]) -> str:
    try:
        return line.format_map(_SafeFormat(context))
    except (ValueError, IndexError, AttributeError):
        return line


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _ip(uid: str, base: int) -> str:
    raw = hashlib.md5(uid.encode()).digest()
    return f"10.{base}.{raw[0]}.{max(1, raw[1] % 255)}"


def _condition(
    type_: str, status: str, stamp: str, reason: str | None = None, message: str | None = None
) -> dict:
    cond = {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": stamp}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def _replace_condition(status: dict[str, Any], new: dict[str, Any]) -> None:
    conditions = status.setdefault("conditions", [])
    for i, cond in enumerate(conditions):
        if cond.get("type") == new["type"]:
            conditions[i] = new
            return
    conditions.append(new)


class Kubelet(Controller):
    """Schedules and starts pods, writes container logs, runs and ends the user program."""

    name = "kubelet"

    def __init__(self, store: Store, sim: SimState, events: EventRecorder):
        super().__init__(store)
        self.sim = sim
        self.events = events

    # -- lookups ----------------------------------------------------------------------------------
    def jobset_of(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        name = (pod["metadata"].get("labels") or {}).get(JOBSET_NAME)
        return self.store.find(JOBSETS, pod["metadata"]["namespace"], name) if name else None

    def head_pods(self, jobset: dict[str, Any], current_only: bool = True) -> list[dict[str, Any]]:
        head = head_replicated_job(jobset)
        attempt = str(int((jobset.get("status") or {}).get("restarts", 0)))
        out = []
        for job in self.store.owned(jobset["metadata"]["uid"], JOBS):
            labels = job["metadata"].get("labels") or {}
            if labels.get(REPLICATED_JOB_NAME) != head:
                continue
            if current_only and labels.get(RESTART_ATTEMPT) != attempt:
                continue
            out.extend(self.store.owned(job["metadata"]["uid"], PODS))
        return out

    def _slices_ready(self, jobset: dict[str, Any], head_pod: dict[str, Any]) -> bool:
        attempt = (head_pod["metadata"].get("labels") or {}).get(RESTART_ATTEMPT)
        head = head_replicated_job(jobset)
        ready = 0
        for job in self.store.owned(jobset["metadata"]["uid"], JOBS):
            labels = job["metadata"].get("labels") or {}
            if labels.get(REPLICATED_JOB_NAME) == head or labels.get(RESTART_ATTEMPT) != attempt:
                continue
            ready += sum(1 for pod in self.store.owned(job["metadata"]["uid"], PODS) if pod_ready(pod))
        return ready >= expected_worker_pods(jobset)

    # -- reconcile --------------------------------------------------------------------------------
    def reconcile(self, key: Any) -> None:
        kind, namespace, name = key
        if kind == "gate":
            jobset = self.store.find(JOBSETS, namespace, name)
            if jobset is not None:
                for pod in self.head_pods(jobset):
                    self._reconcile_pod(pod, jobset)
            return
        pod = self.store.find(PODS, namespace, name)
        if pod is not None:
            self._reconcile_pod(pod, self.jobset_of(pod))

    def _reconcile_pod(self, pod: dict[str, Any], jobset: dict[str, Any] | None) -> None:
        phase = (pod.get("status") or {}).get("phase")
        knobs = knobs_for(jobset) if jobset is not None else Knobs(head_delay=0.0, slice_delay=0.0)
        if phase == "Pending":
            self._schedule(pod, jobset, knobs)
        elif phase == "Running" and jobset is not None:
            self._program(pod, jobset, knobs)

    # -- scheduling and start ---------------------------------------------------------------------
    def _schedule(self, pod: dict[str, Any], jobset: dict[str, Any] | None, knobs: Knobs) -> None:
        md = pod["metadata"]
        uid, now = md["uid"], time.time()
        ready_at = self.sim.pod_ready_at.get(uid)
        if ready_at is None:
            labels = md.get("labels") or {}
            is_head = jobset is None or labels.get(REPLICATED_JOB_NAME) == head_replicated_job(jobset)
            if is_head:
                ready_at = now + (knobs.head_delay if jobset is not None else 0.0)
            else:
                assert jobset is not None
                slice_index = int(labels.get(JOB_INDEX, "0") or 0)
                if knobs.max_ready_slices is not None and slice_index >= knobs.max_ready_slices:
                    self.sim.pod_ready_at[uid] = math.inf
                    self._mark_unschedulable(pod)
                    return
                owner = controller_owner(pod) or {}
                job_uid = owner.get("uid", uid)
                ready_at = self.sim.slice_ready_at.get(job_uid)
                if ready_at is None:
                    js_uid = jobset["metadata"]["uid"]
                    ready_at = max(now, self.sim.slice_cursor.get(js_uid, 0.0)) + knobs.slice_delay
                    self.sim.slice_cursor[js_uid] = ready_at
                    self.sim.slice_ready_at[job_uid] = ready_at
            self.sim.pod_ready_at[uid] = ready_at
        if ready_at == math.inf:
            return
        if now >= ready_at:
            self._start(pod, jobset)
        else:
            self.enqueue_after(ready_at - now, ("pod", md["namespace"], md["name"]))

    def _mark_unschedulable(self, pod: dict[str, Any]) -> None:
        message = (
            "0/8 nodes are available: 8 Insufficient google.com/tpu. preemption: 0/8 nodes are available: "
            "8 No preemption victims found for incoming pod."
        )

        def apply(obj: dict[str, Any]) -> None:
            _replace_condition(
                obj.setdefault("status", {}),
                _condition("PodScheduled", "False", rfc3339(), "Unschedulable", message),
            )

        written = self.store.mutate(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], apply)
        if written is not None:
            self.events.record(written, "Warning", "FailedScheduling", message, "default-scheduler")

    def _start(self, pod: dict[str, Any], jobset: dict[str, Any] | None) -> None:
        md = pod["metadata"]
        uid, stamp, now = md["uid"], rfc3339(), time.time()
        labels = md.get("labels") or {}
        is_head = jobset is None or labels.get(REPLICATED_JOB_NAME) == head_replicated_job(jobset)
        node = f"gke-sandbox-{'cpu' if is_head else 'tpu'}-pool-{uid[:8]}"

        def running(container: dict[str, Any]) -> dict[str, Any]:
            image = container.get("image", "")
            return {
                "name": container.get("name"),
                "image": image,
                "imageID": f"{image.split(':')[0]}@sha256:{_digest(image)}",
                "containerID": f"containerd://{_digest(uid + str(container.get('name')))}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": stamp}},
                "lastState": {},
            }

        def apply(obj: dict[str, Any]) -> None:
            spec, status = obj["spec"], obj.setdefault("status", {})
            spec["nodeName"] = node
            host_ip, pod_ip = _ip(node, 128), _ip(uid, 64)
            status.update(
                phase="Running",
                hostIP=host_ip,
                hostIPs=[{"ip": host_ip}],
                podIP=host_ip if spec.get("hostNetwork") else pod_ip,
                podIPs=[{"ip": host_ip if spec.get("hostNetwork") else pod_ip}],
                startTime=status.get("startTime") or stamp,
            )
            status["conditions"] = [
                _condition("PodReadyToStartContainers", "True", stamp),
                _condition("Initialized", "True", stamp),
                _condition("Ready", "True", stamp),
                _condition("ContainersReady", "True", stamp),
                _condition("PodScheduled", "True", stamp),
            ]
            status["containerStatuses"] = [running(c) for c in spec.get("containers") or []]
            init = []
            for container in spec.get("initContainers") or []:
                entry = running(container)
                if container.get("restartPolicy") != "Always":
                    entry["ready"], entry["started"] = True, False
                    entry["state"] = {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": stamp,
                            "finishedAt": stamp,
                            "containerID": entry["containerID"],
                        }
                    }
                init.append(entry)
            if init:
                status["initContainerStatuses"] = init

        written = self.store.mutate(PODS, md["namespace"], md["name"], apply)
        if written is None:
            return
        self.events.record(
            written,
            "Normal",
            "Scheduled",
            f"Successfully assigned {md['namespace']}/{md['name']} to {node}",
            "default-scheduler",
        )
        self._write_start_logs(written, jobset, now)

    def _write_start_logs(self, pod: dict[str, Any], jobset: dict[str, Any] | None, now: float) -> None:
        uid = pod["metadata"]["uid"]
        labels = pod["metadata"].get("labels") or {}
        slices = slice_count(jobset) if jobset is not None else 0
        main = main_container(jobset) if jobset is not None else None
        spec = pod.get("spec") or {}
        for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            name = container.get("name", "")
            if name == "pathways-rm":
                lines = [
                    "Pathways resource manager listening on port 29001",
                    f"Waiting for {slices} slice(s) to register",
                ]
            elif name == "pathways-proxy":
                lines = ["IFRT proxy server listening on port 29000", "Connected to the resource manager"]
            elif name == "pathways-worker":
                lines = [
                    f"Pathways worker started (slice {labels.get(JOB_INDEX, '0')}, host "
                    f"{spec.get('hostname', '')})",
                    "Registered with the resource manager",
                ]
            elif name == main:
                lines = []
            else:
                lines = [f"container {name} started"]
            for line in lines:
                self.sim.logs.write(uid, name, line, now)

    # -- the user program -------------------------------------------------------------------------
    def _program(self, pod: dict[str, Any], jobset: dict[str, Any], knobs: Knobs) -> None:
        md = pod["metadata"]
        if (md.get("labels") or {}).get(REPLICATED_JOB_NAME) != head_replicated_job(jobset):
            return
        main = main_container(jobset)
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        if main is None or main not in names:
            return
        uid, js_uid, now = md["uid"], jobset["metadata"]["uid"], time.time()
        run = self.sim.programs.get(uid)
        override = self.sim.exit_overrides.pop(js_uid, None)
        if run is None:
            if override is None and not self._slices_ready(jobset, pod):
                return
            run = self._start_program(pod, jobset, knobs, main, now)
        if override is not None:
            self._finish(pod, jobset, run, override, knobs, main, self.sim.exit_lines.pop(js_uid, None))
            return
        while run.emitted < len(run.lines) and run.times[run.emitted] <= now:
            self.sim.logs.write(uid, main, run.lines[run.emitted], now)
            run.emitted += 1
        if now >= run.end:
            self._finish(pod, jobset, run, run.exit_code, knobs, main)
            return
        wake = run.end if run.emitted >= len(run.lines) else min(run.end, run.times[run.emitted])
        self.enqueue_after(wake - now, ("pod", md["namespace"], md["name"]))

    def _start_program(
        self, pod: dict[str, Any], jobset: dict[str, Any], knobs: Knobs, main: str, now: float
    ) -> ProgramRun:
        context = {
            "name": jobset["metadata"]["name"],
            "namespace": jobset["metadata"]["namespace"],
            "slices": slice_count(jobset),
            "devices": device_count(jobset),
            "backend": backend_target(jobset),
            "exit_code": knobs.program_exit_code,
            "attempt": (pod["metadata"].get("labels") or {}).get(RESTART_ATTEMPT, "0"),
        }
        template = knobs.program_log if knobs.program_log is not None else DEFAULT_PROGRAM_LOG
        lines = [_format(line, context) for line in template]
        count = max(1, len(lines))
        run = ProgramRun(
            lines=lines,
            times=[now + knobs.program_seconds * k / count for k in range(len(lines))],
            end=now + knobs.program_seconds,
            exit_code=knobs.program_exit_code,
        )
        self.sim.programs[pod["metadata"]["uid"]] = run
        if any(c.get("name") == "pathways-rm" for c in (pod.get("spec") or {}).get("initContainers") or []):
            self.sim.logs.write(
                pod["metadata"]["uid"],
                "pathways-rm",
                f"All {context['slices']} slice(s) registered; serving the client",
                now,
            )
        return run

    def _finish(
        self,
        pod: dict[str, Any],
        jobset: dict[str, Any],
        run: ProgramRun,
        exit_code: int,
        knobs: Knobs,
        main: str,
        last_line: str | None = None,
    ) -> None:
        md = pod["metadata"]
        uid, stamp, now = md["uid"], rfc3339(), time.time()
        if last_line is not None:
            self.sim.logs.write(uid, main, last_line, now)
        elif knobs.program_log is None:
            if exit_code == 0:
                self.sim.logs.write(uid, main, "Program finished successfully", now)
            else:
                self.sim.logs.write(
                    uid, main, f"RuntimeError: the program failed with exit code {exit_code}", now
                )
        self.sim.programs.pop(uid, None)
        phase = "Succeeded" if exit_code == 0 else "Failed"
        why = "PodCompleted" if exit_code == 0 else "PodFailed"

        def terminated(entry: dict[str, Any], code: int) -> dict[str, Any]:
            started = ((entry.get("state") or {}).get("running") or {}).get("startedAt", stamp)
            return dict(
                entry,
                ready=False,
                started=False,
                state={
                    "terminated": {
                        "exitCode": code,
                        "reason": "Completed" if code == 0 else "Error",
                        "startedAt": started,
                        "finishedAt": stamp,
                        "containerID": entry.get("containerID"),
                    }
                },
            )

        def apply(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            status["phase"] = phase
            status["containerStatuses"] = [
                terminated(c, exit_code if c.get("name") == main else 0)
                for c in status.get("containerStatuses") or []
            ]
            if status.get("initContainerStatuses"):
                # Native sidecars still running are stopped once the program ended (the kubelet's
                # SIGTERM, in reverse order: kubernetes/kubernetes#120620); a component that does
                # not catch it, as here, ends with 143 (128 + SIGTERM) and the pod's phase is the
                # program's alone.
                status["initContainerStatuses"] = [
                    terminated(c, SIGTERM_EXIT_CODE) if (c.get("state") or {}).get("running") else c
                    for c in status["initContainerStatuses"]
                ]
            for type_ in ("Ready", "ContainersReady"):
                _replace_condition(status, _condition(type_, "False", stamp, why))

        self.store.mutate(PODS, md["namespace"], md["name"], apply)

    # -- scenario hooks ---------------------------------------------------------------------------
    def end_program(self, jobset: dict[str, Any], exit_code: int, last_line: str | None = None) -> list[str]:
        """Make the current head pod's program exit with ``exit_code`` (now if it runs, else at start),
        printing ``last_line`` last when given."""
        live = [
            p
            for p in self.head_pods(jobset)
            if (p.get("status") or {}).get("phase") in ("Pending", "Running")
        ]
        if not live:
            return []
        self.sim.exit_overrides[jobset["metadata"]["uid"]] = exit_code
        if last_line is not None:
            self.sim.exit_lines[jobset["metadata"]["uid"]] = last_line
        for pod in live:
            if (pod.get("status") or {}).get("phase") == "Running":
                self._reconcile_pod(pod, jobset)
        return [p["metadata"]["name"] for p in live]

    def disrupt(self, pod: dict[str, Any], reason: str, message: str) -> dict[str, Any] | None:
        """Fail a pod with a ``DisruptionTarget`` condition (preemption, node loss)."""
        return self._kill(pod, 143, lambda status, stamp: _replace_condition(
            status, _condition("DisruptionTarget", "True", stamp, reason, message)
        ))  # fmt: skip

    def evict(self, pod: dict[str, Any], message: str) -> dict[str, Any] | None:
        """Evict a pod for its local storage use, as the kubelet's eviction manager does
        (``localStorageEviction``: grace period 0, pod reason ``Evicted`` with the message, no
        ``DisruptionTarget``, a Warning ``Evicted`` event)."""

        def evicted(status: dict[str, Any], stamp: str) -> None:
            status["reason"], status["message"] = "Evicted", message

        written = self._kill(pod, 137, evicted)
        if written is not None:
            self.events.record(written, "Warning", "Evicted", message, "kubelet")
        return written

    def _kill(
        self, pod: dict[str, Any], exit_code: int, mark: Callable[[dict[str, Any], str], None]
    ) -> dict[str, Any] | None:
        stamp = rfc3339()
        self.sim.programs.pop(pod["metadata"]["uid"], None)
        self.sim.pod_ready_at[pod["metadata"]["uid"]] = math.inf

        def apply(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            status["phase"] = "Failed"
            mark(status, stamp)
            for type_ in ("Ready", "ContainersReady"):
                _replace_condition(status, _condition(type_, "False", stamp, "PodFailed"))
            statuses = []
            for entry in status.get("containerStatuses") or []:
                started = ((entry.get("state") or {}).get("running") or {}).get("startedAt", stamp)
                statuses.append(
                    dict(
                        entry,
                        ready=False,
                        started=False,
                        state={
                            "terminated": {
                                "exitCode": exit_code,
                                "reason": "Error",
                                "startedAt": started,
                                "finishedAt": stamp,
                                "containerID": entry.get("containerID"),
                            }
                        },
                    )
                )
            if statuses:
                status["containerStatuses"] = statuses

        return self.store.mutate(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], apply)
