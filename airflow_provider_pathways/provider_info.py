"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

from typing import Any

from airflow_provider_pathways import __version__

_STRING = {"type": ["string", "null"]}
_BOOLEAN = {"type": ["boolean", "null"]}


def get_provider_info() -> dict[str, Any]:
    """Describe the provider: modules, connection forms and extra links."""
    return {
        "package-name": "airflow-provider-pathways",
        "name": "Pathways",
        "description": "Run Google Pathways workloads (multi-slice JAX on TPUs) on GKE and Slurm.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Pathways",
                "external-doc-url": "https://cloud.google.com/ai-hypercomputer/docs/workloads/pathways-on-cloud/pathways-intro",
                "tags": ["gcp"],
            }
        ],
        "operators": [
            {
                "integration-name": "Pathways",
                "python-modules": ["airflow_provider_pathways.operators.pathways_job"],
            }
        ],
        "sensors": [
            {
                "integration-name": "Pathways",
                "python-modules": ["airflow_provider_pathways.sensors.pathways_job"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Pathways",
                "python-modules": ["airflow_provider_pathways.hooks.kubernetes"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Pathways",
                "python-modules": ["airflow_provider_pathways.triggers.pathways_job"],
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_pathways.hooks.kubernetes.PathwaysJobHook",
                "hook-name": "Pathways on GKE",
                "connection-type": "pathways_gke",
                "conn-fields": {
                    "in_cluster": {"label": "In cluster configuration", "schema": _BOOLEAN},
                    "kube_config_path": {"label": "Kube config path", "schema": _STRING},
                    "kube_config": {
                        "label": "Kube config (JSON format)",
                        "schema": {"type": ["string", "null"], "format": "password"},
                    },
                    "namespace": {"label": "Namespace", "schema": _STRING},
                    "cluster_context": {"label": "Cluster context", "schema": _STRING},
                    "disable_verify_ssl": {"label": "Disable SSL", "schema": _BOOLEAN},
                    "gcp_project": {"label": "GCP project (for console links)", "schema": _STRING},
                    "gke_cluster": {"label": "GKE cluster name (for console links)", "schema": _STRING},
                    "gke_location": {"label": "GKE cluster location (for console links)", "schema": _STRING},
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "login", "password", "port", "extra"],
                    "relabeling": {},
                },
            }
        ],
        "extra-links": [
            "airflow_provider_pathways.links.GKEWorkloadLink",
            "airflow_provider_pathways.links.CloudLoggingLink",
        ],
    }
