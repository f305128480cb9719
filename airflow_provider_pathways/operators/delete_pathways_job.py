"""Teardown of a Pathways job on GKE: delete it and what it owns."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowFailException, BaseOperator

from airflow_provider_pathways.gke.resources import JobKind

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook


class DeletePathwaysJobOperator(BaseOperator):
    """
    Delete a PathwaysJob or JobSet and what it owns; succeeds when it is already gone.

    Meant as a teardown task (``.as_teardown()``).

    :param job_name: the job's name (templated, e.g. from the creating task's XCom).
    :param namespace: its namespace; default: the connection's, then ``default``.
    :param kind: ``PathwaysJob`` or ``JobSet``.
    :param wait_for_deletion: wait until the object is gone.
    :param deletion_timeout: seconds to wait.
    """

    template_fields: Sequence[str] = ("job_name", "namespace", "kubernetes_conn_id")
    ui_color = "#fce8e6"

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str | None = None,
        kind: str = JobKind.PATHWAYS_JOB.value,
        kubernetes_conn_id: str | None = "kubernetes_default",
        cluster_context: str | None = None,
        config_file: str | None = None,
        in_cluster: bool | None = None,
        wait_for_deletion: bool = True,
        deletion_timeout: float = 300.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if kind not in {k.value for k in JobKind}:
            raise ValueError(f"kind: {kind!r} must be 'PathwaysJob' or 'JobSet'")
        self.job_name = job_name
        self.namespace = namespace
        self.kind = kind
        self.kubernetes_conn_id = kubernetes_conn_id
        self.cluster_context = cluster_context
        self.config_file = config_file
        self.in_cluster = in_cluster
        self.wait_for_deletion = wait_for_deletion
        self.deletion_timeout = deletion_timeout

    @cached_property
    def hook(self) -> PathwaysJobHook:
        from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

        return PathwaysJobHook.for_task(self)

    def execute(self, context: Context) -> bool:
        if not self.job_name:
            raise AirflowFailException("job_name: empty; pass the name of the job to delete")
        namespace = self.hook.resolve_namespace(self.namespace)
        kind = JobKind(self.kind)
        deleted = self.hook.delete_job(self.job_name, namespace, kind)
        if not deleted:
            self.log.info("%s %s/%s is already gone", self.kind, namespace, self.job_name)
            return False
        self.log.info("Deleting %s %s/%s", self.kind, namespace, self.job_name)
        if self.wait_for_deletion:
            self.hook.wait_until_deleted(self.job_name, namespace, kind, self.deletion_timeout)
            self.log.info("%s %s/%s is gone", self.kind, namespace, self.job_name)
        return True
