"""Names, enums, images and ports of the PathwaysJob API and the JobSet the controller builds."""

from __future__ import annotations

from airflow_provider_pathways.gke.naming import HEAD_REPLICATED_JOB, WORKER_REPLICATED_JOB
from airflow_provider_pathways.gke.resources import PROXY_PORT, JobKind

__all__ = ["HEAD_REPLICATED_JOB", "PROXY_PORT", "WORKER_REPLICATED_JOB"]  # re-exported for the spec

API_VERSION = "pathways-job.pathways.domain/v1"
KIND = JobKind.PATHWAYS_JOB.value
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
DEPLOYMENT_MODES: tuple[str, ...] = ("default", "colocate_head_with_workers")
COMPONENT_TYPES: tuple[str, ...] = ("proxy_server", "pathways_server", "worker", "colocated_python_sidecar")
MAX_CUSTOM_COMPONENTS = 4
SERVER_IMAGE = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server"
PROXY_IMAGE = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server"
RM_PORT = 29001
WORKER_PORT = 29005
PROXY_CONTAINER = "pathways-proxy"
RM_CONTAINER = "pathways-rm"
WORKER_CONTAINER = "pathways-worker"
SIDECAR_CONTAINER = "colocated-python-sidecar"
#: Length of the random suffix Kubernetes appends to generated pod names ("-" and 5 characters).
POD_NAME_SUFFIX = 6
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
