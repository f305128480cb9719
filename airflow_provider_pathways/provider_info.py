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
        "description": "Run Google Pathways workloads (multi-slice JAX on TPUs) on GKE and Slurm, "
        "and clean up their compilation caches.",
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
                "python-modules": [
                    "airflow_provider_pathways.operators.pathways_job",
                    "airflow_provider_pathways.operators.slurm",
                    "airflow_provider_pathways.operators.gcs",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "Pathways",
                "python-modules": [
                    "airflow_provider_pathways.sensors.pathways_job",
                    "airflow_provider_pathways.sensors.slurm",
                ],
            }
        ],
        "hooks": [
            {
                "integration-name": "Pathways",
                "python-modules": [
                    "airflow_provider_pathways.hooks.kubernetes",
                    "airflow_provider_pathways.hooks.slurm",
                    "airflow_provider_pathways.hooks.gcs",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "Pathways",
                "python-modules": [
                    "airflow_provider_pathways.triggers.pathways_job",
                    "airflow_provider_pathways.triggers.slurm",
                ],
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
            },
            {
                "hook-class-name": "airflow_provider_pathways.hooks.slurm.SlurmHook",
                "hook-name": "Pathways on Slurm",
                "connection-type": "pathways_slurm",
                "conn-fields": {
                    "transport": {
                        "label": "Transport",
                        "schema": {"type": "string", "enum": ["rest", "ssh"], "default": "rest"},
                        "description": "rest: slurmrestd with a JWT; ssh: sbatch/scontrol/scancel on a login "
                        "node, files over SFTP.",
                    },
                    "api_version": {
                        "label": "slurmrestd API version (REST)",
                        "schema": {"type": ["string", "null"], "default": "auto"},
                        "description": "auto (detect) or one of v0.0.38 to v0.0.44.",
                    },
                    "scheme": {
                        "label": "Scheme (REST)",
                        "schema": {"type": ["string", "null"], "default": "http"},
                    },
                    "verify_ssl": {
                        "label": "Verify the TLS certificate (REST)",
                        "schema": {"type": ["boolean", "null"], "default": True},
                    },
                    "token_file": {
                        "label": "JWT token file (REST)",
                        "schema": _STRING,
                        "description": "Read the JWT from this file (re-read every 5 minutes) instead of the "
                        "password field.",
                    },
                    "shared_fs": {
                        "label": "Job files are on this machine's filesystem (REST)",
                        "schema": _BOOLEAN,
                        "description": "Default for REST without ssh_host: read job files locally.",
                    },
                    "ssh_host": {
                        "label": "SSH host for file access (REST)",
                        "schema": _STRING,
                        "description": "Read job files over SFTP from this host while submitting through "
                        "slurmrestd.",
                    },
                    "ssh_port": {
                        "label": "SSH port for file access (REST)",
                        "schema": {"type": ["integer", "null"]},
                    },
                    "private_key": {
                        "label": "SSH private key (PEM text)",
                        "schema": {"type": ["string", "null"], "format": "password"},
                    },
                    "key_file": {"label": "SSH private key file", "schema": _STRING},
                    "private_key_passphrase": {
                        "label": "SSH private key passphrase",
                        "schema": {"type": ["string", "null"], "format": "password"},
                    },
                    "known_hosts": {
                        "label": "SSH known_hosts (text or path)",
                        "schema": _STRING,
                        "description": "Host keys the SSH server must match; default ~/.ssh/known_hosts.",
                    },
                    "strict_host_key_checking": {
                        "label": "Strict SSH host key checking",
                        "schema": {"type": ["boolean", "null"], "default": True},
                        "description": "Only turn off on purpose: an unknown host key is then accepted.",
                    },
                    "slurm_bin_dir": {
                        "label": "Directory of the Slurm commands (SSH)",
                        "schema": _STRING,
                        "description": "When sbatch/scontrol/scancel are not on the SSH session's PATH.",
                    },
                    "connect_timeout": {
                        "label": "Connect timeout (s)",
                        "schema": {"type": ["number", "null"], "default": 15},
                    },
                    "request_timeout": {
                        "label": "REST request timeout (s)",
                        "schema": {"type": ["number", "null"], "default": 60},
                    },
                    "command_timeout": {
                        "label": "SSH command timeout (s)",
                        "schema": {"type": ["number", "null"], "default": 120},
                    },
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["schema"],
                    "relabeling": {
                        "login": "Cluster user",
                        "password": "JWT (REST) or SSH password (optional)",
                    },
                    "placeholders": {
                        "host": "slurm-login.example.com",
                        "port": "6820 for REST, 22 for SSH",
                        "login": "pathways",
                        "password": "REST: output of `scontrol token username=<user>`",
                        "extra": '{"transport": "rest"}',
                    },
                },
            },
        ],
        "extra-links": [
            "airflow_provider_pathways.links.GKEWorkloadLink",
            "airflow_provider_pathways.links.CloudLoggingLink",
        ],
    }
