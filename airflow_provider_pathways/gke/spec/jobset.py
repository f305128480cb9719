"""Render the plain JobSet equivalent to a PathwaysJob (the shape xpk renders and the controller creates)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_pathways.gke.objects import (
    ACCELERATOR_LABEL,
    COORDINATOR_LABEL,
    HEAD_REPLICATED_JOB,
    JOBSET,
    JOBSET_NAME_LABEL,
    PROXY_CONTAINER,
    PROXY_IMAGE,
    PROXY_PORT,
    REPLICATED_JOB_LABEL,
    RM_CONTAINER,
    RM_PORT,
    SERVER_IMAGE,
    SIDECAR_CONTAINER,
    TOPOLOGY_LABEL,
    WORKER_CONTAINER,
    WORKER_PORT,
    WORKER_REPLICATED_JOB,
)
from airflow_provider_pathways.gke.spec.checks import PathwaysSpecError
from airflow_provider_pathways.gke.spec.validation import derivation_problems

if TYPE_CHECKING:
    from airflow_provider_pathways.gke.spec.model import PathwaysJobSpec

__all__ = ["render_jobset"]

_EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
_COORDINATOR_LABEL = f"metadata.labels['{COORDINATOR_LABEL}']"


def _field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def _pathways_head_env() -> dict[str, Any]:
    return _field_env("PATHWAYS_HEAD", _COORDINATOR_LABEL)


def _tcp_ports(*ports: int) -> list[dict[str, Any]]:
    return [{"containerPort": port, "protocol": "TCP"} for port in ports]


class _Renderer:
    """Builds the JobSet for one spec; mirrors what the PathwaysJob controller creates."""

    def __init__(self, spec: PathwaysJobSpec) -> None:
        self.spec = spec
        self.controller = spec.controller
        self.scratch = spec.pathways_dir or ""
        self.metrics = (
            ["--enable_metrics_collection=true"] if self.controller.enable_metrics_collection else []
        )
        self.elastic = (
            self.controller.elastic_slices if isinstance(self.controller.elastic_slices, int) else 0
        )

    def image(self, component_type: str, default: str) -> str:
        component = self.spec.component(component_type)
        if component is not None and component.image:
            return component.image
        return f"{default}:{self.spec.image_tag}"

    def flags(self, component_type: str) -> list[str]:
        component = self.spec.component(component_type)
        return list(component.custom_flags or []) if component is not None else []

    def env(self, component_type: str) -> list[dict[str, Any]]:
        component = self.spec.component(component_type)
        return _env_copy(component.custom_env) if component is not None else []

    def proxy(self, sidecar: bool) -> dict[str, Any]:
        args = [
            f"--server_port={PROXY_PORT}",
            f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}",
            f"--gcs_scratch_location={self.scratch}",
            *self.metrics,
            *self.flags("proxy_server"),
        ]
        if self.elastic > 0:
            args.append(f"--num_elastic_slices={self.elastic}")
        container: dict[str, Any] = {
            "name": PROXY_CONTAINER,
            "image": self.image("proxy_server", PROXY_IMAGE),
            "imagePullPolicy": "Always",
            "args": args,
            "env": [_pathways_head_env(), *self.env("proxy_server")],
            "ports": _tcp_ports(PROXY_PORT),
            "resources": {"limits": {"cpu": "16", "memory": "100G"}},
        }
        if sidecar:
            container["restartPolicy"] = "Always"
        return container

    def resource_manager(self, sidecar: bool) -> dict[str, Any]:
        args = [
            f"--server_port={RM_PORT}",
            f"--gcs_scratch_location={self.scratch}",
            "--node_type=resource_manager",
            f"--instance_count={self.spec.workers.num_slices}",
            f"--instance_type={self.spec.instance_type}",
            *self.metrics,
            *self.flags("pathways_server"),
        ]
        container: dict[str, Any] = {
            "name": RM_CONTAINER,
            "image": self.image("pathways_server", SERVER_IMAGE),
            "imagePullPolicy": "Always",
            "args": args,
            "env": [
                _field_env("REPLICATED_JOB_NAME", f"metadata.annotations['{REPLICATED_JOB_LABEL}']"),
                _field_env("JOBSET_NAME", f"metadata.annotations['{JOBSET_NAME_LABEL}']"),
                _field_env("HOST_ADDRESS", _COORDINATOR_LABEL),
                {"name": "TPU_SKIP_MDS_QUERY", "value": "true"},
                *self.env("pathways_server"),
            ],
            "ports": _tcp_ports(RM_PORT, RM_PORT + 1),
            "resources": {"limits": {"cpu": "8", "memory": "32G"}},
        }
        if sidecar:
            container["restartPolicy"] = "Always"
        return container

    def main_container_env(self, env: Any) -> list[Any]:
        injected = [
            _pathways_head_env(),
            {"name": "JAX_PLATFORMS", "value": "proxy"},
            {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
            {"name": "JAX_BACKEND_TARGET", "value": self.spec.proxy_address},
        ]
        names = {entry["name"] for entry in injected}
        kept = [e for e in env or [] if not (isinstance(e, Mapping) and e.get("name") in names)]
        return [*injected, *kept]

    def head_pod(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Pod template metadata and spec of the head: the user's pod with RM and proxy as sidecars."""
        template = self.controller.to_dict().get("template")
        if template is None:
            pod: dict[str, Any] = {
                "hostNetwork": True,
                "dnsPolicy": "ClusterFirstWithHostNet",
                "containers": [self.proxy(sidecar=False), self.resource_manager(sidecar=False)],
                # What the JobSet webhook sets when the pod leaves it unset.
                "restartPolicy": "OnFailure",
            }
            return {}, pod
        metadata = dict(template.get("metadata") or {})
        pod = dict(template.get("spec") or {})
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
        pod["initContainers"] = [
            *pod.get("initContainers", []),
            self.proxy(sidecar=True),
            self.resource_manager(sidecar=True),
        ]
        containers = []
        for container in pod.get("containers", []):
            if (
                isinstance(container, Mapping)
                and container.get("name") == self.controller.main_container_name
            ):
                container = {**container, "env": self.main_container_env(container.get("env"))}
            containers.append(container)
        pod["containers"] = containers
        pod.setdefault("restartPolicy", "Never")
        return metadata, pod

    def tpu_node_selector(self) -> dict[str, str]:
        """The workers' node selector plus TPU accelerator and topology (``makeTPUNodeSelector``)."""
        workers = self.spec.workers
        return {
            **(workers.node_selector or {}),
            ACCELERATOR_LABEL: self.spec.gke_accelerator,
            TOPOLOGY_LABEL: workers.topology,
        }

    @property
    def colocated(self) -> bool:
        return self.controller.deployment_mode == "colocate_head_with_workers"

    def head_job(self) -> dict[str, Any]:
        metadata, pod = self.head_pod()
        job_metadata: dict[str, Any] = {}
        if self.colocated:
            # As the controller does: the head goes on the TPU node pool by node selector; the
            # workers carry the affinity that pulls them next to it. The toleration lets the head,
            # which requests no TPU chips, onto TPU nodes that GKE taints.
            pod["nodeSelector"] = self.tpu_node_selector()
            pod["tolerations"] = [
                *(pod.get("tolerations") or []),
                {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"},
            ]
        else:
            job_metadata = {"annotations": {_EXCLUSIVE_TOPOLOGY: "kubernetes.io/hostname"}}
        pod_template: dict[str, Any] = {"spec": pod}
        if metadata:
            pod_template = {"metadata": metadata, "spec": pod}
        return {
            "name": HEAD_REPLICATED_JOB,
            "replicas": 1,
            "template": {
                **({"metadata": job_metadata} if job_metadata else {}),
                "spec": {
                    "backoffLimit": 0,
                    "completionMode": "Indexed",
                    "completions": 1,
                    "parallelism": 1,
                    "template": pod_template,
                },
            },
        }

    def colocation_affinity(self) -> dict[str, Any]:
        """Workers share a node pool with this job's pods, no other job's (``MakePodAffinityRules``)."""
        name = self.spec.name
        return {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchExpressions": [
                                {"key": JOBSET_NAME_LABEL, "operator": "In", "values": [name]}
                            ]
                        },
                        "topologyKey": "cloud.google.com/gke-nodepool",
                    }
                ]
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchExpressions": [
                                {
                                    "key": JOBSET_NAME_LABEL,
                                    "operator": "NotIn",
                                    "values": [name],
                                },
                                {"key": "job-name", "operator": "Exists"},
                            ]
                        },
                        "topologyKey": "cloud.google.com/gke-nodepool",
                    }
                ]
            },
        }

    def worker_job(self) -> dict[str, Any]:
        spec, workers = self.spec, self.spec.workers
        vms = spec.vms_per_slice
        restarts_per_vm = 4
        slice_restarts = 1 if workers.max_slice_restarts is None else workers.max_slice_restarts
        if self.elastic > 0 and isinstance(slice_restarts, int) and slice_restarts > 0:
            restarts_per_vm = slice_restarts
        node_selector = self.tpu_node_selector()
        container = {
            "name": WORKER_CONTAINER,
            "image": self.image("worker", SERVER_IMAGE),
            "imagePullPolicy": "Always",
            "args": [
                f"--server_port={WORKER_PORT}",
                f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}",
                f"--gcs_scratch_location={self.scratch}",
                *self.metrics,
                *self.flags("worker"),
            ],
            "env": [
                {"name": "TPU_MIN_LOG_LEVEL", "value": "0"},
                {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "0"},
                {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
                {"name": "MEGASCALE_GRPC_ENABLE_XOR_TRACER", "value": "false"},
                _field_env(
                    "MEGASCALE_NUM_SLICES", "metadata.labels['jobset.sigs.k8s.io/replicatedjob-replicas']"
                ),
                _field_env("JOBSET_NAME", f"metadata.annotations['{JOBSET_NAME_LABEL}']"),
                _field_env("REPLICATED_JOB_NAME", f"metadata.annotations['{REPLICATED_JOB_LABEL}']"),
                _field_env("MEGASCALE_SLICE_ID", "metadata.labels['jobset.sigs.k8s.io/job-index']"),
                _pathways_head_env(),
                _field_env("MEGASCALE_COORDINATOR_ADDRESS", _COORDINATOR_LABEL),
                *self.env("worker"),
            ],
            "ports": _tcp_ports(WORKER_PORT, WORKER_PORT + 1, 8471, 8080),
            "resources": {"limits": {"google.com/tpu": str(spec.chips_per_vm)}},
            "volumeMounts": [{"mountPath": "/tmp", "name": "shared-tmp"}],
        }
        pod: dict[str, Any] = {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}
        if workers.termination_grace_period_seconds is not None:
            pod["terminationGracePeriodSeconds"] = workers.termination_grace_period_seconds
        if workers.priority_class_name is not None:
            pod["priorityClassName"] = workers.priority_class_name
        pod["nodeSelector"] = node_selector
        if self.colocated:
            pod["affinity"] = self.colocation_affinity()
        sidecar = spec.component("colocated_python_sidecar")
        if sidecar is not None and sidecar.image:
            pod["initContainers"] = [
                {
                    "name": SIDECAR_CONTAINER,
                    "image": sidecar.image,
                    "imagePullPolicy": "Always",
                    "env": [{"name": "GRPC_SERVER_ADDRESS", "value": "0.0.0.0:50051"}],
                    "ports": _tcp_ports(50051),
                    "volumeMounts": [{"mountPath": "/tmp", "name": "shared-tmp"}],
                    "restartPolicy": "Always",
                }
            ]
        pod["containers"] = [container]
        pod["restartPolicy"] = "OnFailure"
        pod["tolerations"] = [{"operator": "Exists", "key": "google.com/tpu"}]
        pod["volumes"] = [{"hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}, "name": "shared-tmp"}]
        return {
            "name": WORKER_REPLICATED_JOB,
            "replicas": workers.num_slices,
            "template": {
                "metadata": {"annotations": {_EXCLUSIVE_TOPOLOGY: "cloud.google.com/gke-nodepool"}},
                "spec": {
                    "backoffLimit": vms * restarts_per_vm,
                    "completionMode": "Indexed",
                    "completions": vms,
                    "parallelism": vms,
                    "template": {"spec": pod},
                },
            },
        }

    def jobset(self) -> dict[str, Any]:
        spec = self.spec
        metadata: dict[str, Any] = {"name": spec.name}
        if spec.namespace is not None:
            metadata["namespace"] = spec.namespace
        if spec.labels is not None:
            metadata["labels"] = dict(spec.labels)
        if spec.annotations is not None:
            metadata["annotations"] = dict(spec.annotations)
        body: dict[str, Any] = {
            "coordinator": {"replicatedJob": HEAD_REPLICATED_JOB},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"restartStrategy": "Recreate", "maxRestarts": spec.max_restarts or 0},
            "replicatedJobs": [self.head_job(), self.worker_job()],
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
        }
        if self.controller.template is not None:
            # With a user program the job ends when the head succeeds; headless jobs run until deleted.
            body["successPolicy"] = {"operator": "All", "targetReplicatedJobs": [HEAD_REPLICATED_JOB]}
        body["suspend"] = False
        return {"apiVersion": JOBSET.api_version, "kind": JOBSET.kind, "metadata": metadata, "spec": body}


def _env_copy(entries: Any) -> list[dict[str, Any]]:
    """A copy of a custom component's env list without null entries ([] when unset)."""
    if not isinstance(entries, list):
        return []
    return [
        {k: v for k, v in entry.items() if v is not None} for entry in entries if isinstance(entry, Mapping)
    ]


def render_jobset(spec: PathwaysJobSpec) -> dict[str, Any]:
    """The JobSet manifest for ``spec``; raises PathwaysSpecError if name, type or topology are unusable."""
    problems = derivation_problems(spec)
    if problems:
        raise PathwaysSpecError(problems)
    return _Renderer(spec).jobset()
