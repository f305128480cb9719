"""Typed PathwaysJob spec: build, load, validate and render PathwaysJob or plain JobSet manifests.

Imports only the standard library and PyYAML.
"""

from __future__ import annotations

from airflow_provider_pathways.gke.objects import (
    HEAD_REPLICATED_JOB,
    PROXY_IMAGE,
    PROXY_PORT,
    SERVER_IMAGE,
    WORKER_REPLICATED_JOB,
)
from airflow_provider_pathways.gke.spec.checks import PathwaysSpecError, SpecProblem
from airflow_provider_pathways.gke.spec.model import (
    API_VERSION,
    JOBSET_API_VERSION,
    KIND,
    ControllerSpec,
    CustomComponent,
    PathwaysJobSpec,
    WorkerSpec,
)
from airflow_provider_pathways.gke.spec.validation import COMPONENT_TYPES, DEPLOYMENT_MODES

__all__ = [
    "API_VERSION",
    "COMPONENT_TYPES",
    "DEPLOYMENT_MODES",
    "HEAD_REPLICATED_JOB",
    "JOBSET_API_VERSION",
    "KIND",
    "PROXY_IMAGE",
    "PROXY_PORT",
    "SERVER_IMAGE",
    "WORKER_REPLICATED_JOB",
    "ControllerSpec",
    "CustomComponent",
    "PathwaysJobSpec",
    "PathwaysSpecError",
    "SpecProblem",
    "WorkerSpec",
]
