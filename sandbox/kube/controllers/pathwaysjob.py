"""Simulated PathwaysJob controller (pathways-job.pathways.domain/v1), as the upstream controller behaves.

On reconcile: if a JobSet of the same name exists, mirror its **last** condition into the
PathwaysJob when that condition is True (``StartupPolicyInProgress`` -> ``Pending``,
``StartupPolicyCompleted`` -> ``Running``, ``Suspended``, ``Completed``, ``Failed``; a new condition
is appended and the previous last one set to False), and set ``terminalState``. Otherwise check the
topology for the machine type and create the JobSet. Any failure to create it (a topology outside
``ValidTpuTopologiesMap``, the JobSet webhook refusing a name longer than 22 characters, an API error)
-> ``status.terminalState: Failed`` with no conditions and no JobSet, and the create is retried with
backoff; ``terminalState`` stays ``Failed`` even if a later create succeeds. ``status.restarts`` is
never written, and ``Running`` is not reset when the JobSet restarts (all as upstream).
"""

from __future__ import annotations

import logging
from typing import Any

from sandbox.kube.controllers.base import Controller
from sandbox.kube.controllers.knobs import MAIN_CONTAINER
from sandbox.kube.controllers.topology import chips_per_vm, topology_is_valid, vms_per_slice
from sandbox.kube.errors import ApiError
from sandbox.kube.meta import clone, owner_reference
from sandbox.kube.resources import JOBSETS, PATHWAYSJOBS
from sandbox.kube.store import Store

HEAD = "pathways-head"
WORKER = "worker"
SERVER_IMAGE = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server"
PROXY_IMAGE = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server"

TPU_VERSION = {
    "ct6e-standard-4t": "tpuv6e",
    "ct6e-standard-8t": "tpuv6e1t",
    "ct5p-hightpu-4t": "tpuv5",
    "ct5lp-hightpu-4t": "tpuv5e",
    "ct5lp-hightpu-8t": "tpuv5e1t",
    "ct4p-hightpu-4t": "tpuv4",
    "tpu7x-standard-4t": "tpu7x",
}
GKE_ACCELERATOR = {
    "ct6e-standard-4t": "tpu-v6e-slice",
    "ct6e-standard-8t": "tpu-v6e-slice",
    "ct5p-hightpu-4t": "tpu-v5p-slice",
    "ct5lp-hightpu-4t": "tpu-v5-lite-podslice",
    "ct5lp-hightpu-8t": "tpu-v5-lite-podslice",
    "ct4p-hightpu-4t": "tpu-v4-podslice",
    "tpu7x-standard-4t": "tpu7x",
}
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
# Requeue delays after a failed JobSet create: doubling from RETRY_BASE up to RETRY_MAX seconds.
RETRY_BASE = 0.2
RETRY_MAX = 30.0
log = logging.getLogger(__name__)
_FIELD_ENV = "metadata.labels['jobset.sigs.k8s.io/coordinator']"


class InvalidTopology(Exception):
    """The topology is not valid for the worker machine type."""


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _custom(spec: dict[str, Any], component: str) -> dict[str, Any]:
    return next((c for c in spec.get("customComponents") or [] if c.get("componentType") == component), {})


def _image(spec: dict[str, Any], component: str, default: str) -> str:
    return _custom(spec, component).get("image") or f"{default}:{spec.get('pathwaysVersion') or 'latest'}"


def _rm_container(spec: dict[str, Any], instance_type: str, as_init: bool) -> dict[str, Any]:
    worker = spec["workers"][0]
    args = [
        "--server_port=29001",
        f"--gcs_scratch_location={spec.get('pathwaysDir', '')}",
        "--node_type=resource_manager",
        f"--instance_count={worker['numSlices']}",
        f"--instance_type={instance_type}",
    ]
    if (spec.get("controller") or {}).get("enableMetricsCollection"):
        args.append("--enable_metrics_collection=true")
    args += _custom(spec, "pathways_server").get("customFlags") or []
    container = {
        "name": "pathways-rm",
        "image": _image(spec, "pathways_server", SERVER_IMAGE),
        "imagePullPolicy": "Always",
        "args": args,
        "env": [
            _field_env(
                "REPLICATED_JOB_NAME", "metadata.annotations['jobset.sigs.k8s.io/replicatedjob-name']"
            ),
            _field_env("JOBSET_NAME", "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"),
            _field_env("HOST_ADDRESS", _FIELD_ENV),
            {"name": "TPU_SKIP_MDS_QUERY", "value": "true"},
            *(_custom(spec, "pathways_server").get("customEnv") or []),
        ],
        "ports": [{"containerPort": 29001, "protocol": "TCP"}, {"containerPort": 29002, "protocol": "TCP"}],
        "resources": {"limits": {"cpu": "8", "memory": "16G"}},
    }
    if as_init:
        container["restartPolicy"] = "Always"
    return container


def _proxy_container(spec: dict[str, Any], as_init: bool) -> dict[str, Any]:
    args = [
        "--server_port=29000",
        "--resource_manager_address=$(PATHWAYS_HEAD):29001",
        f"--gcs_scratch_location={spec.get('pathwaysDir', '')}",
    ]
    controller = spec.get("controller") or {}
    if controller.get("enableMetricsCollection"):
        args.append("--enable_metrics_collection=true")
    args += _custom(spec, "proxy_server").get("customFlags") or []
    if int(controller.get("elasticSlices") or 0) > 0:
        args.append(f"--num_elastic_slices={int(controller['elasticSlices'])}")
    container = {
        "name": "pathways-proxy",
        "image": _image(spec, "proxy_server", PROXY_IMAGE),
        "imagePullPolicy": "Always",
        "args": args,
        "env": [
            _field_env("PATHWAYS_HEAD", _FIELD_ENV),
            *(_custom(spec, "proxy_server").get("customEnv") or []),
        ],
        "ports": [{"containerPort": 29000, "protocol": "TCP"}],
        "resources": {"limits": {"cpu": "16", "memory": "100G"}},
    }
    if as_init:
        container["restartPolicy"] = "Always"
    return container


def _colocation_affinity(name: str) -> dict[str, Any]:
    def term(*expressions: dict[str, Any]) -> dict[str, Any]:
        return {
            "labelSelector": {"matchExpressions": list(expressions)},
            "topologyKey": "cloud.google.com/gke-nodepool",
        }

    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                term({"key": "jobset.sigs.k8s.io/jobset-name", "operator": "In", "values": [name]})
            ]
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                term(
                    {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "NotIn", "values": [name]},
                    {"key": "job-name", "operator": "Exists"},
                )
            ]
        },
    }


def build_jobset(pw: dict[str, Any]) -> dict[str, Any]:
    """The JobSet the controller creates for a PathwaysJob; raises ``InvalidTopology``."""
    spec = pw["spec"]
    worker = spec["workers"][0]
    machine, topology = worker["type"], worker["topology"]
    if not topology_is_valid(machine, topology):
        raise InvalidTopology(f"invalid TPU topology {topology!r} for worker type {machine!r}")
    vms = vms_per_slice(machine, topology)
    instance_type = f"{TPU_VERSION.get(machine, 'tpu')}:{topology}"
    controller = spec.get("controller") or {}
    template = controller.get("template")
    md = pw["metadata"]
    notes = dict(md.get("annotations") or {})

    if template is not None:
        head_pod = clone(template.get("spec") or {})
        head_pod["hostNetwork"] = True
        head_pod["dnsPolicy"] = "ClusterFirstWithHostNet"
        head_pod["initContainers"] = [
            *(head_pod.get("initContainers") or []),
            _rm_container(spec, instance_type, as_init=True),
            _proxy_container(spec, as_init=True),
        ]
        main_name = controller.get("mainContainerName") or "main"
        names = [c.get("name") for c in head_pod.get("containers") or []]
        for container in head_pod.get("containers") or []:
            if container.get("name") == main_name:
                container["env"] = [
                    *(container.get("env") or []),
                    _field_env("PATHWAYS_HEAD", _FIELD_ENV),
                    {"name": "JAX_PLATFORMS", "value": "proxy"},
                    {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
                    {"name": "JAX_BACKEND_TARGET", "value": "grpc://$(PATHWAYS_HEAD):29000"},
                ]
        if main_name in names:
            notes.setdefault(MAIN_CONTAINER, main_name)
    else:
        head_pod = {
            "hostNetwork": True,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "containers": [
                _rm_container(spec, instance_type, as_init=False),
                _proxy_container(spec, as_init=False),
            ],
        }
    tpu_selector = {
        **(worker.get("nodeSelector") or {}),
        "cloud.google.com/gke-tpu-accelerator": GKE_ACCELERATOR.get(machine, ""),
        "cloud.google.com/gke-tpu-topology": topology,
    }
    colocated = controller.get("deploymentMode") == "colocate_head_with_workers"
    if colocated:
        # MakePathwaysHeadJobForColocateHeadWithWorkersDeployment: the head on the TPU node pool.
        head_pod["nodeSelector"] = dict(tpu_selector)
    head_notes = dict(md.get("annotations") or {})
    if controller.get("deploymentMode", "default") == "default":
        head_notes[EXCLUSIVE_TOPOLOGY] = "kubernetes.io/hostname"

    backoff = vms * 4
    if int(controller.get("elasticSlices") or 0) > 0 and int(worker.get("maxSliceRestarts") or 0) > 0:
        backoff = vms * int(worker["maxSliceRestarts"])
    worker_custom = _custom(spec, "worker")
    worker_pod: dict[str, Any] = {
        "containers": [
            {
                "name": "pathways-worker",
                "image": _image(spec, "worker", SERVER_IMAGE),
                "imagePullPolicy": "Always",
                "args": [
                    "--server_port=29005",
                    "--resource_manager_address=$(PATHWAYS_HEAD):29001",
                    f"--gcs_scratch_location={spec.get('pathwaysDir', '')}",
                    *(worker_custom.get("customFlags") or []),
                ],
                "env": [
                    {"name": "TPU_MIN_LOG_LEVEL", "value": "0"},
                    {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "0"},
                    {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
                    _field_env(
                        "MEGASCALE_NUM_SLICES", "metadata.labels['jobset.sigs.k8s.io/replicatedjob-replicas']"
                    ),
                    _field_env("JOBSET_NAME", "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"),
                    _field_env(
                        "REPLICATED_JOB_NAME", "metadata.annotations['jobset.sigs.k8s.io/replicatedjob-name']"
                    ),
                    _field_env("MEGASCALE_SLICE_ID", "metadata.labels['jobset.sigs.k8s.io/job-index']"),
                    _field_env("PATHWAYS_HEAD", _FIELD_ENV),
                    _field_env("MEGASCALE_COORDINATOR_ADDRESS", _FIELD_ENV),
                    *(worker_custom.get("customEnv") or []),
                ],
                "ports": [{"containerPort": p, "protocol": "TCP"} for p in (29005, 29006, 8471, 8080)],
                "resources": {"limits": {"google.com/tpu": str(chips_per_vm(machine))}},
                "volumeMounts": [{"name": "shared-tmp", "mountPath": "/tmp"}],
            }
        ],
        "nodeSelector": dict(tpu_selector),
        "volumes": [{"name": "shared-tmp", "hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}}],
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
    }
    if worker.get("terminationGracePeriodSeconds") is not None:
        worker_pod["terminationGracePeriodSeconds"] = worker["terminationGracePeriodSeconds"]
    if worker.get("priorityClassName"):
        worker_pod["priorityClassName"] = worker["priorityClassName"]
    if colocated:
        # MakeWorkerJob + MakePodAffinityRules: workers join the head's node pool, no other job's.
        worker_pod["affinity"] = _colocation_affinity(md["name"])

    jobset_spec: dict[str, Any] = {
        "startupPolicy": {"startupPolicyOrder": "InOrder"},
        "failurePolicy": {"maxRestarts": int(spec.get("maxRestarts") or 0)},
        "coordinator": {"replicatedJob": HEAD, "jobIndex": 0, "podIndex": 0},
        "replicatedJobs": [
            {
                "name": HEAD,
                "replicas": 1,
                "template": {
                    "metadata": {"annotations": head_notes},
                    "spec": {
                        "backoffLimit": 0,
                        "completions": 1,
                        "parallelism": 1,
                        "template": {"metadata": {"annotations": head_notes}, "spec": head_pod},
                    },
                },
            },
            {
                "name": WORKER,
                "replicas": int(worker["numSlices"]),
                "template": {
                    "spec": {
                        "backoffLimit": backoff,
                        "completions": vms,
                        "parallelism": vms,
                        "template": {
                            "metadata": {
                                "annotations": {EXCLUSIVE_TOPOLOGY: "cloud.google.com/gke-nodepool"}
                            },
                            "spec": worker_pod,
                        },
                    }
                },
            },
        ],
    }
    if template is not None:
        jobset_spec["successPolicy"] = {"operator": "All", "targetReplicatedJobs": [HEAD]}
    jobset_md: dict[str, Any] = {
        "name": md["name"],
        "namespace": md["namespace"],
        "ownerReferences": [owner_reference(pw)],
    }
    if md.get("labels"):
        jobset_md["labels"] = dict(md["labels"])
    if notes:
        jobset_md["annotations"] = notes
    return {
        "apiVersion": JOBSETS.api_version,
        "kind": JOBSETS.kind,
        "metadata": jobset_md,
        "spec": jobset_spec,
    }


def _mirror(jobset_condition: dict[str, Any], terminal: str) -> tuple[dict[str, str] | None, str | None]:
    """PathwaysJob condition type/message (and terminal state) for the JobSet's last condition."""
    type_, message = jobset_condition.get("type"), jobset_condition.get("message") or ""
    if type_ == "StartupPolicyInProgress":
        return {"type": "Pending", "message": "pathwaysJob pending : jobSet is getting created"}, None
    if type_ == "StartupPolicyCompleted":
        return {"type": "Running", "message": "pathwaysJob running: jobSet is running"}, None
    if type_ == "Suspended" and not terminal:
        return {"type": "Suspended", "message": f"pathwaysJob suspended: {message}"}, None
    if type_ == "Completed":
        return {"type": "Completed", "message": f"pathwaysJob completed: {message}"}, "Completed"
    if type_ == "Failed":
        return {"type": "Failed", "message": f"pathwaysJob failed: {message}"}, "Failed"
    return None, None


class PathwaysJobController(Controller):
    """Creates the JobSet of each PathwaysJob and mirrors the JobSet's state into the PathwaysJob."""

    name = "pathwaysjob-controller"

    def __init__(self, store: Store):
        super().__init__(store)
        self._failures: dict[tuple[str, str, str], int] = {}

    def reset(self) -> None:
        super().reset()
        self._failures.clear()

    def create_failures(self) -> dict[str, int]:
        """Failed JobSet creates per PathwaysJob (``namespace/name``) still being retried."""
        return {f"{ns}/{name}": count for (ns, name, _), count in self._failures.items()}

    def reconcile(self, key: Any) -> None:
        namespace, name = key
        pw = self.store.find(PATHWAYSJOBS, namespace, name)
        if pw is None:
            for key in [k for k in self._failures if k[:2] == (namespace, name)]:
                del self._failures[key]
            return
        jobset = self.store.find(JOBSETS, namespace, name)
        if jobset is not None:
            self._failures.pop((namespace, name, pw["metadata"]["uid"]), None)
            self._mirror_status(pw, jobset)
            return
        try:
            manifest = build_jobset(pw)
            self.store.create(JOBSETS, manifest, namespace=namespace, from_api=False)
        except ApiError as err:
            if err.code == 409:
                return
            self._create_failed(pw, err.message)
        except (InvalidTopology, KeyError, IndexError, TypeError, ValueError) as err:
            self._create_failed(pw, str(err))

    def _create_failed(self, pw: dict[str, Any], reason: str) -> None:
        """As upstream Reconcile: ``terminalState: Failed`` (no condition, no event), the error is only
        logged, and the create is retried with exponential backoff (controller-runtime's requeue)."""
        md = pw["metadata"]
        attempt_key = (md["namespace"], md["name"], md["uid"])
        attempts = self._failures.get(attempt_key, 0) + 1
        self._failures[attempt_key] = attempts
        log.error("PathwaysJob %s/%s: failed to create JobSet: %s", md["namespace"], md["name"], reason)
        self._set_terminal_failed(pw)
        self.enqueue_after(min(RETRY_BASE * 2 ** (attempts - 1), RETRY_MAX), (md["namespace"], md["name"]))

    def _set_terminal_failed(self, pw: dict[str, Any]) -> None:
        def apply(obj: dict[str, Any]) -> None:
            obj.setdefault("status", {})["terminalState"] = "Failed"

        self.store.mutate(
            PATHWAYSJOBS, pw["metadata"]["namespace"], pw["metadata"]["name"], apply, subresource="status"
        )

    def _mirror_status(self, pw: dict[str, Any], jobset: dict[str, Any]) -> None:
        js_conditions = (jobset.get("status") or {}).get("conditions") or []
        if not js_conditions:
            return
        last = js_conditions[-1]
        if last.get("status") != "True":
            return
        status = clone(pw.get("status") or {})
        mapped, terminal = _mirror(last, status.get("terminalState") or "")
        if mapped is None:
            return
        new = {
            "type": mapped["type"],
            "status": "True",
            "reason": last.get("reason") or "Unknown",
            "message": mapped["message"],
            "lastTransitionTime": last.get("lastTransitionTime"),
        }
        conditions = status.setdefault("conditions", [])
        if conditions and conditions[-1].get("type") == new["type"]:
            if terminal is None or status.get("terminalState") == terminal:
                return
        else:
            if conditions:
                conditions[-1] = dict(conditions[-1], status="False")
            conditions.append(new)
        if terminal is not None:
            status["terminalState"] = terminal

        def apply(obj: dict[str, Any]) -> None:
            obj["status"] = status

        self.store.mutate(
            PATHWAYSJOBS, pw["metadata"]["namespace"], pw["metadata"]["name"], apply, subresource="status"
        )
