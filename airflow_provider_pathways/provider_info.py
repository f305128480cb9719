"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

from typing import Any

from airflow_provider_pathways import __version__

#: The Airflow option naming this deployment among those that share a Slurm user or a namespace
#: (:func:`airflow_provider_pathways.sweep.deployment_name`).
DEPLOYMENT_SECTION, DEPLOYMENT_OPTION = "pathways", "deployment_name"

# The public documentation of this provider (``[project.urls] Documentation`` in pyproject.toml says
# the same; Airflow's Providers page links the package name to that one).
DOCUMENTATION_URL = "https://airflow-provider-pathways.readthedocs.io/en/stable/"
# Its guide per operator and sensor, relative to DOCUMENTATION_URL.
HOW_TO_GUIDES = (
    "operators/pathways_job.html",
    "operators/delete_pathways_job.html",
    "sensors/pathways_job_ready.html",
    "operators/pathways_slurm_service.html",
    "sensors/cluster_env.html",
    "operators/slurm_job.html",
    "operators/cancel_slurm_job.html",
    "operators/cache_cleanup.html",
    "operators/cache_lifecycle.html",
    "operators/sweep_pathways_jobs.html",
)


def _string(label: str, description: str, **schema: Any) -> dict[str, Any]:
    return {"label": label, "schema": {"type": ["string", "null"], **schema}, "description": description}


def _secret(label: str, description: str) -> dict[str, Any]:
    return _string(label, description, format="password")


def _boolean(label: str, description: str, default: bool) -> dict[str, Any]:
    # The default is the hook's: the switch shows what an unset field means.
    return {
        "label": label,
        "schema": {"type": ["boolean", "null"], "default": default},
        "description": description,
    }


def _number(
    label: str, description: str, default: float | None = None, kind: str = "number"
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": [kind, "null"]}
    if default is not None:
        schema["default"] = default
    return {"label": label, "schema": schema, "description": description}


def _gke_fields() -> dict[str, Any]:
    """Extra fields of the Pathways-on-GKE connection: those of the cncf-kubernetes connection, the
    cluster, and the Google identity that reaches it (``hooks.kubernetes_google`` reads them)."""
    how = (
        "Use one of in-cluster, kube config path, kube config or a Google Cloud connection; with none, "
        "~/.kube/config is used."
    )
    return {
        "in_cluster": _boolean(
            "In cluster configuration",
            "Use the service account of the pod Airflow runs in (Airflow on the same cluster). " + how,
            False,
        ),
        "kube_config_path": _string(
            "Kube config path",
            "Path of a kubeconfig file on the Airflow workers and triggerer, "
            "e.g. one written by gcloud container clusters get-credentials. " + how,
        ),
        "kube_config": _secret(
            "Kube config (JSON format)",
            "The kubeconfig itself, as JSON text (kept secret). " + how,
        ),
        "namespace": _string(
            "Namespace",
            "Namespace of the Pathways jobs when the task gives none and the spec has none; empty: default.",
        ),
        "cluster_context": _string(
            "Cluster context",
            "Context of the kubeconfig to use; empty: its current context.",
        ),
        "disable_verify_ssl": _boolean(
            "Disable SSL",
            "Do not verify the API server's certificate. Only for test clusters.",
            False,
        ),
        "gcp_project": _string(
            "GCP project (Google sign-in, console links)",
            "Project of the GKE cluster: with the cluster name and location, tasks get GKE Workload "
            "and Cloud Logging links, and a Google Cloud connection reaches the cluster.",
        ),
        "gke_cluster": _string(
            "GKE cluster name (Google sign-in, console links)",
            "Name of the GKE cluster: required with a Google Cloud connection; gives the console links.",
        ),
        "gke_location": _string(
            "GKE cluster location (Google sign-in, console links)",
            "Region or zone of the GKE cluster, e.g. us-east5: required with a Google Cloud "
            "connection; gives the console links.",
        ),
        "gcp_conn_id": _string(
            "Google Cloud connection",
            "Reach the cluster named by project, name and location with this Google Cloud connection "
            "(as Cloud Composer does): its endpoint and CA from the GKE API, a Google access token "
            "renewed before it expires. Needs apache-airflow-providers-google. google_cloud_default, "
            "if it does not exist, signs in with Application Default Credentials. " + how,
        ),
        "impersonation_chain": _string(
            "Impersonation chain (Google)",
            "Service account to act as with the Google Cloud connection, or a comma-separated chain "
            "(the last one is impersonated); it needs the RBAC of the provider's documentation.",
        ),
        "gke_endpoint": {
            "label": "Cluster endpoint (Google)",
            "schema": {
                "type": ["string", "null"],
                "enum": ["public", "private", "dns"],
                "default": "public",
                "values_display": {
                    "public": "public IP (endpoint)",
                    "private": "private IP (privateClusterConfig.privateEndpoint)",
                    "dns": "DNS-based (controlPlaneEndpointsConfig.dnsEndpointConfig.endpoint)",
                },
            },
            "description": "Which control-plane endpoint of the cluster to use with the Google Cloud "
            "connection: the private one from inside the cluster's VPC, the DNS-based one from anywhere "
            "its IAM allows.",
        },
        "gke_api_endpoint": _string(
            "GKE API endpoint (Google)",
            "Base URL of the GKE API, for Private Service Connect or a test stand-in; empty: "
            "https://container.googleapis.com.",
        ),
    }


def _slurm_fields() -> dict[str, Any]:
    """Extra fields of the Pathways-on-Slurm connection, as ``SlurmSettings.from_connection`` reads them."""
    from airflow_provider_pathways.slurm.settings import SUPPORTED_API_VERSIONS, TRANSPORTS, default

    versions = sorted(SUPPORTED_API_VERSIONS, key=lambda v: tuple(int(n) for n in v[1:].split(".")))
    return {
        "transport": {
            "label": "Transport",
            "schema": {
                "type": "string",
                "enum": list(TRANSPORTS),
                "default": default("transport"),
                "values_display": {"rest": "REST (slurmrestd)", "ssh": "SSH (login node)"},
            },
            "description": "REST: slurmrestd with a JWT. SSH: sbatch/scontrol/scancel on a login node, "
            "files over SFTP.",
        },
        "api_version": {
            "label": "slurmrestd API version (REST)",
            "schema": {
                "type": ["string", "null"],
                "enum": ["auto", *versions],
                "default": default("api_version"),
                "values_display": {"auto": "auto (detect)"},
            },
            "description": f"auto asks the server which versions it offers and uses the newest this "
            f"provider knows ({versions[0]} to {versions[-1]}); pick one to pin it.",
        },
        "scheme": {
            "label": "Scheme (REST)",
            "schema": {
                "type": ["string", "null"],
                "enum": [None, "http", "https"],
                "default": None,
                "values_display": {"null": "from the host and port", "http": "http", "https": "https"},
            },
            "description": "From the host and port (the default): https when the host starts with "
            "https:// or the port is 443, else http. https chosen here, or an https:// host, always means "
            "TLS: http chosen here never turns it off.",
        },
        "verify_ssl": _boolean(
            "Verify the TLS certificate (REST)",
            "Check slurmrestd's certificate when the scheme is https. Only turn off for test clusters.",
            default("verify_ssl"),
        ),
        "token_file": _string(
            "JWT token file (REST)",
            "Read the JWT from this file on the Airflow workers (re-read every 5 minutes) instead of the "
            "password field.",
        ),
        "token_lifespan": _number(
            "Mint tokens over SSH, lifespan (s) (REST)",
            "Instead of a JWT: run scontrol token lifespan=N as the cluster user on the SSH host for "
            "file access, and again before the token expires or when slurmrestd refuses it.",
            kind="integer",
        ),
        "shared_fs": _boolean(
            "Job files are on this machine's filesystem (REST)",
            "On: job output and cluster.env are read from this machine's filesystem, which shares the "
            "cluster's paths (Airflow on the cluster). Off (default): set an SSH host for file access "
            "below; a REST connection with neither is refused, since nothing could read job files.",
            default("shared_fs"),
        ),
        "ssh_host": _string(
            "SSH host for file access (REST)",
            "Read job files over SFTP from this host (a login node) while submitting through slurmrestd; "
            "it uses the SSH key, known_hosts and host key checking fields below.",
        ),
        "ssh_port": _number(
            "SSH port for file access (REST)", "Port of that SSH host; empty: 22.", kind="integer"
        ),
        "private_key": _secret(
            "SSH private key (PEM text)",
            "The private key itself (kept secret), for the SSH transport or the SSH host for file "
            "access. Its line breaks must survive: paste it into Extra Fields JSON as one string with "
            "\\n, or use the key file field.",
        ),
        "key_file": _string(
            "SSH private key file",
            "Path of the private key on the Airflow workers and triggerer (instead of the PEM text).",
        ),
        "private_key_passphrase": _secret(
            "SSH private key passphrase", "Passphrase of an encrypted private key (kept secret)."
        ),
        "known_hosts": _string(
            "SSH known_hosts (text or path)",
            "Host keys the SSH server must match: known_hosts lines (as ssh-keyscan prints them) or the "
            "path of such a file; empty: ~/.ssh/known_hosts.",
            format="multiline",
        ),
        "strict_host_key_checking": _boolean(
            "Strict SSH host key checking",
            "On (default): an unknown or changed host key refuses the connection. Only turn off on "
            "purpose: any host key is then accepted.",
            default("strict_host_key_checking"),
        ),
        "slurm_bin_dir": _string(
            "Directory of the Slurm commands (SSH)",
            "Where sbatch, scontrol and scancel are when they are not on the SSH session's PATH, "
            "e.g. /opt/slurm/bin.",
        ),
        "connect_timeout": _number(
            "Connect timeout (s)",
            "Seconds to wait for slurmrestd or sshd to accept a connection.",
            default("connect_timeout"),
        ),
        "request_timeout": _number(
            "REST request timeout (s)",
            "Seconds to wait for one slurmrestd answer.",
            default("request_timeout"),
        ),
        "command_timeout": _number(
            "SSH command timeout (s)",
            "Seconds to wait for one sbatch/scontrol/scancel over SSH.",
            default("command_timeout"),
        ),
    }


def get_provider_info() -> dict[str, Any]:
    """Describe the provider: modules, connection forms, extra links and where its documentation is."""
    return {
        "package-name": "airflow-provider-pathways",
        "name": "Pathways",
        "description": "Run Google Pathways workloads (multi-slice JAX on TPUs) on GKE and Slurm, "
        "and clean up their compilation caches.",
        "versions": [__version__],
        "documentation-url": DOCUMENTATION_URL,
        "integrations": [
            {
                "integration-name": "Pathways",
                "external-doc-url": "https://cloud.google.com/ai-hypercomputer/docs/workloads/pathways-on-cloud/pathways-intro",
                "how-to-guide": [DOCUMENTATION_URL + page for page in HOW_TO_GUIDES],
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
                    "airflow_provider_pathways.operators.sweep",
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
        "config": {
            DEPLOYMENT_SECTION: {
                "description": "Settings of the Pathways provider.",
                "options": {
                    DEPLOYMENT_OPTION: {
                        "description": "The name of this Airflow deployment among those that share a "
                        "Slurm user or a Kubernetes namespace. Every job the provider submits carries "
                        "it, and a sweep (PathwaysJobSweepOperator, SlurmJobSweepOperator, airflow "
                        "pathways sweep-*) ends only jobs that carry this deployment's name. One word "
                        "of letters, digits, '.', '_' and '-'; empty: unnamed.",
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "composer-prod",
                        "default": "",
                    }
                },
            }
        },
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_pathways.hooks.kubernetes.PathwaysJobHook",
                "hook-name": "Pathways on GKE",
                "connection-type": "pathways_gke",
                "conn-fields": _gke_fields(),
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "login", "password", "port", "extra"],
                    "relabeling": {},
                },
            },
            {
                "hook-class-name": "airflow_provider_pathways.hooks.slurm.SlurmHook",
                "hook-name": "Pathways on Slurm",
                "connection-type": "pathways_slurm",
                "conn-fields": _slurm_fields(),
                "ui-field-behaviour": {
                    "hidden-fields": ["schema"],
                    "relabeling": {
                        "login": "Cluster user",
                        "password": "JWT (REST) or SSH password (optional)",
                    },
                    "placeholders": {
                        "host": "slurm.example.com, or https://slurm.example.com for TLS",
                        "port": "REST: 6820 (443 with https), SSH: 22",
                        "login": "the user jobs run as, e.g. pathways",
                        "password": "REST: the JWT, or scontrol token's SLURM_JWT=... line as it is",
                        "extra": '{"transport": "rest", "ssh_host": "login-0"}',
                    },
                },
            },
        ],
        "notifications": [
            "airflow_provider_pathways.notifications.failure.PathwaysFailureNotifier",
        ],
        "extra-links": [
            "airflow_provider_pathways.links.GKEWorkloadLink",
            "airflow_provider_pathways.links.CloudLoggingLink",
        ],
        # ``airflow pathways ...`` (Airflow loads providers' commands from 3.2; cli.py).
        "cli": ["airflow_provider_pathways.cli.get_cli_commands"],
    }
