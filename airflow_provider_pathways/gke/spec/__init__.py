"""Typed PathwaysJob spec: build, load, validate and render PathwaysJob or plain JobSet manifests.

Imports only the standard library and PyYAML.
"""

from __future__ import annotations

from airflow_provider_pathways.gke.spec.constants import (
    API_VERSION,
    COMPONENT_TYPES,
    DEPLOYMENT_MODES,
    HEAD_REPLICATED_JOB,
    JOBSET_API_VERSION,
    KIND,
    PROXY_IMAGE,
    PROXY_PORT,
    SERVER_IMAGE,
    WORKER_REPLICATED_JOB,
)
from airflow_provider_pathways.gke.spec.model import PathwaysJobSpec
from airflow_provider_pathways.gke.spec.problems import PathwaysSpecError, SpecProblem
from airflow_provider_pathways.gke.spec.sections import ControllerSpec, CustomComponent, WorkerSpec

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
