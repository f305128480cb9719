"""Sweep the provider's jobs that no task instance follows any more (:mod:`airflow_provider_pathways.sweep`):
the operator a maintenance DAG schedules, and the sweep itself, which ``airflow pathways sweep-gke``
runs too."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator

from airflow_provider_pathways.gke.status import Phase
from airflow_provider_pathways.gke.task_job import Release, left_running_of, task_instance_of
from airflow_provider_pathways.sweep import CHANGED, ENDED, GONE, SweptJob, Verdict, report
from airflow_provider_pathways.task_instance_state import read_task_instance_states

if TYPE_CHECKING:
    import logging

    from airflow.sdk.definitions.context import Context
    from airflow.sdk.types import Logger

    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

#: A job listed while it is being deleted is left to that delete.
_ENDING = {Phase.TERMINATING, Phase.DELETED}


def sweep_gke(
    hook: PathwaysJobHook, namespaces: Sequence[str], *, dry_run: bool, log: Logger | logging.Logger
) -> list[SweptJob]:
    """Judge every active job of this provider in ``namespaces`` by its task instance's state now and
    end (unless ``dry_run``) those no try follows: each delete names the UID and resourceVersion the
    judgement read, so a job a try marked meanwhile is left alone (outcome ``changed``). A job
    without the task instance annotation (an older provider version's) is reported, never ended."""
    active = [
        job
        for namespace in namespaces
        for job in hook.provider_jobs(namespace)
        if not job.phase.terminal and job.phase not in _ENDING
    ]
    identities = {job.ref: task_instance_of(job.obj) for job in active}
    states = read_task_instance_states(identity.key() for identity in identities.values() if identity)
    swept = []
    for job in active:
        identity = identities[job.ref]
        if identity is None:
            log.warning("%s names no task instance (made by an older provider version): left alone", job.ref)
            continue
        row = SweptJob.judged(
            "GKE", str(job.ref), identity.key(), states[identity.key()], left_running_of(job.obj)
        )
        if row.verdict == Verdict.END.value and not dry_run:
            released = hook.delete_as_read(job)
            row = row.with_outcome(
                CHANGED if released is None else ENDED if released is Release.DELETE else GONE
            )
        swept.append(row)
    return swept


class PathwaysJobSweepOperator(BaseOperator):
    """
    End the PathwaysJobs and JobSets this provider made that no task instance follows any more.

    Lists the jobs in ``namespaces`` that carry the provider's owner labels and have not ended, reads
    each one's task instance's state, and deletes a job when its task instance ended (failed,
    success, skipped...) or no longer exists, unless its task leaves it running in that state
    (``wait_until`` created or ready, ``delete_on`` without ``kill`` or ``failure``). A task
    instance that is queued, running, deferred, up for retry or cleared keeps its job: a try follows
    it. Schedule it in a maintenance DAG (every 10 minutes, say) to close what no try can: a
    deferred task marked failed before a triggerer started its trigger, a worker lost after its last
    try, a DAG run deleted while its job ran.

    Returns the jobs it judged (XCom), and logs them as a table.

    :param namespaces: the namespaces to sweep (templated); default: the connection's, then
        ``default``.
    :param kubernetes_conn_id: the Pathways-on-GKE (or cncf-kubernetes) connection (templated).
    :param dry_run: report what would be ended, end nothing.
    """

    template_fields: Sequence[str] = ("namespaces", "kubernetes_conn_id")
    ui_color = "#fce8e6"

    def __init__(
        self,
        *,
        namespaces: Sequence[str] | str | None = None,
        kubernetes_conn_id: str | None = "kubernetes_default",
        cluster_context: str | None = None,
        config_file: str | None = None,
        in_cluster: bool | None = None,
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.namespaces = namespaces
        self.kubernetes_conn_id = kubernetes_conn_id
        self.cluster_context = cluster_context
        self.config_file = config_file
        self.in_cluster = in_cluster
        # Not ``self.dry_run``: that would hide BaseOperator.dry_run().
        self.report_only = dry_run

    @cached_property
    def hook(self) -> PathwaysJobHook:
        from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

        return PathwaysJobHook.for_task(self)

    def swept_namespaces(self) -> list[str]:
        """``namespaces`` once rendered: one name or a list; none: the connection's."""
        given = self.namespaces
        if given is None or given == "" or given == []:
            return [self.hook.resolve_namespace(None)]
        if isinstance(given, str):
            return [given]
        if not isinstance(given, Sequence) or not all(isinstance(n, str) and n for n in given):
            raise TypeError(f"namespaces: expected a namespace or a list of them, got {given!r}")
        return list(given)

    def execute(self, context: Context) -> list[dict[str, object]]:
        swept = sweep_gke(self.hook, self.swept_namespaces(), dry_run=self.report_only, log=self.log)
        self.log.info("%s\n%s", "Dry run: nothing was ended" if self.report_only else "Swept", report(swept))
        return [row.to_dict() for row in swept]
