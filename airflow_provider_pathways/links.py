"""Extra links to the Google Cloud console for a Pathways job on GKE."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.providers.common.compat.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

CONSOLE = "https://console.cloud.google.com"


def gke_workload_url(
    *, project: str, location: str, cluster: str, namespace: str, name: str, head_job: str
) -> str:
    """Console page of the job's head Job (the user's program) on its GKE cluster."""
    path = f"kubernetes/job/{location}/{cluster}/{namespace}/{name}-{head_job}-0/details"
    return f"{CONSOLE}/{path}?project={project}"


def cloud_logging_url(*, project: str, cluster: str, namespace: str, name: str) -> str:
    """Cloud Logging query for every container of the job."""
    query = "\n".join(
        [
            'resource.type="k8s_container"',
            f'resource.labels.cluster_name="{cluster}"',
            f'resource.labels.namespace_name="{namespace}"',
            f'labels."k8s-pod/jobset_sigs_k8s_io/jobset-name"="{name}"',
        ]
    )
    return f"{CONSOLE}/logs/query;query={quote(query, safe='')}?project={project}"


class _XComLink(BaseOperatorLink):
    """A link whose full URL the operator stored in XCom during ``execute``."""

    @property
    def xcom_key(self) -> str:
        """The key Airflow 3's ``BaseOperatorLink`` gives it, also on Airflow 2 (which has none)."""
        return f"_link_{type(self).__name__}"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.providers.common.compat.sdk import XCom

        return XCom.get_value(ti_key=ti_key, key=self.xcom_key) or ""


class GKEWorkloadLink(_XComLink):
    """GKE console page of the Pathways job."""

    name = "GKE Workload"


class CloudLoggingLink(_XComLink):
    """Cloud Logging query for the Pathways job's containers."""

    name = "Cloud Logging"


def push_console_links(
    ti: Any,
    *,
    project: str | None,
    cluster: str | None,
    location: str | None,
    namespace: str,
    name: str,
    head_job: str,
) -> None:
    """Store both links' URLs in XCom for the UI; nothing when project, cluster or location is unknown."""
    if not (project and cluster and location):
        return
    ti.xcom_push(
        key=GKEWorkloadLink().xcom_key,
        value=gke_workload_url(
            project=project,
            location=location,
            cluster=cluster,
            namespace=namespace,
            name=name,
            head_job=head_job,
        ),
    )
    ti.xcom_push(
        key=CloudLoggingLink().xcom_key,
        value=cloud_logging_url(project=project, cluster=cluster, namespace=namespace, name=name),
    )
