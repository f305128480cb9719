"""How the simulation reads a JobSet: head and worker replicated jobs, main container, pod counts."""

from __future__ import annotations

import contextlib
from typing import Any

from sandbox.kube.controllers.knobs import knobs_for

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
JOB_RESTART_ATTEMPT = "jobset.sigs.k8s.io/job-restart-attempt"
COORDINATOR = "jobset.sigs.k8s.io/coordinator"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
QUEUE_NAME = "kueue.x-k8s.io/queue-name"

HEAD_REPLICATED_JOB = "pathways-head"
# Containers of the Pathways components; any other regular container of the head pod is the user's.
COMPONENT_CONTAINERS = frozenset(
    {"pathways-rm", "pathways-proxy", "pathways-worker", "colocated-python-sidecar"}
)


def replicated_jobs(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    return (jobset.get("spec") or {}).get("replicatedJobs") or []


def head_replicated_job(jobset: dict[str, Any]) -> str | None:
    """The coordinator replicated job, else one named ``pathways-head``; None when there is neither."""
    names = [r.get("name") for r in replicated_jobs(jobset)]
    coordinator = ((jobset.get("spec") or {}).get("coordinator") or {}).get("replicatedJob")
    if coordinator in names:
        return coordinator
    return HEAD_REPLICATED_JOB if HEAD_REPLICATED_JOB in names else None


def pods_per_job(rjob: dict[str, Any]) -> int:
    """Pods one Job of a replicated job runs at once: min(parallelism, completions)."""
    spec = (rjob.get("template") or {}).get("spec") or {}
    parallelism = int(spec.get("parallelism", 1) or 0)
    completions = spec.get("completions")
    return min(parallelism, int(completions)) if completions is not None else parallelism


def pod_template_spec(rjob: dict[str, Any]) -> dict[str, Any]:
    return (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}


def main_container(jobset: dict[str, Any]) -> str | None:
    """The head pod's user container that runs the program; None for a headless job.

    The ``sandbox.pathways.dev/main-container`` annotation wins when the head pod has that
    container; otherwise the first regular container that is not a Pathways component.
    """
    head = head_replicated_job(jobset)
    if head is None:
        return None
    rjob = next(r for r in replicated_jobs(jobset) if r.get("name") == head)
    names = [c.get("name") for c in pod_template_spec(rjob).get("containers") or []]
    wanted = knobs_for(jobset).main_container
    if wanted and wanted in names:
        return wanted
    return next((n for n in names if n not in COMPONENT_CONTAINERS), None)


def worker_replicated_jobs(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    head = head_replicated_job(jobset)
    return [r for r in replicated_jobs(jobset) if r.get("name") != head]


def expected_worker_pods(jobset: dict[str, Any]) -> int:
    return sum(int(r.get("replicas", 1)) * pods_per_job(r) for r in worker_replicated_jobs(jobset))


def slice_count(jobset: dict[str, Any]) -> int:
    return sum(int(r.get("replicas", 1)) for r in worker_replicated_jobs(jobset))


def device_count(jobset: dict[str, Any]) -> int:
    """TPU chips across all worker pods (``google.com/tpu`` limit per pod, 4 when unset)."""
    total = 0
    for rjob in worker_replicated_jobs(jobset):
        chips = 0
        for container in pod_template_spec(rjob).get("containers") or []:
            limits = (container.get("resources") or {}).get("limits") or {}
            with contextlib.suppress(ValueError):
                chips += int(str(limits.get("google.com/tpu", 0)))
        total += int(rjob.get("replicas", 1)) * pods_per_job(rjob) * (chips or 4)
    return total


def subdomain(jobset: dict[str, Any]) -> str:
    network = (jobset.get("spec") or {}).get("network") or {}
    return network.get("subdomain") or jobset["metadata"]["name"]


def coordinator_endpoint(jobset: dict[str, Any]) -> str | None:
    coordinator = (jobset.get("spec") or {}).get("coordinator")
    if not coordinator:
        return None
    return (
        f"{jobset['metadata']['name']}-{coordinator.get('replicatedJob')}-{coordinator.get('jobIndex', 0)}-"
        f"{coordinator.get('podIndex', 0)}.{subdomain(jobset)}"
    )


def backend_target(jobset: dict[str, Any]) -> str:
    """``grpc://<head pod DNS name>:29000``, the address the user program connects to."""
    head = coordinator_endpoint(jobset) or f"{jobset['metadata']['name']}-{HEAD_REPLICATED_JOB}-0-0"
    return f"grpc://{head}:29000"
