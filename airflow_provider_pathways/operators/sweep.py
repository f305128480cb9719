"""Sweep the provider's jobs that no task instance follows any more (:mod:`airflow_provider_pathways.sweep`):
the operators a maintenance DAG schedules, and the sweeps themselves, which ``airflow pathways
sweep-gke`` and ``sweep-slurm`` run too."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator

from airflow_provider_pathways.gke.task_job import Release, deployment_of, left_running_of, task_instance_of
from airflow_provider_pathways.operators.slurm import cancel_service_with_workers
from airflow_provider_pathways.slurm.job import SERVICE_ROLE, comment_fields, comment_owner
from airflow_provider_pathways.slurm.service import ServiceProbe
from airflow_provider_pathways.sweep import CHANGED, ENDED, GONE, SweptJob, Verdict, deployment_name, report
from airflow_provider_pathways.task_instance_state import (
    NOT_FOUND,
    dags_with_runs,
    read_run_states,
    read_task_instance_states,
)

if TYPE_CHECKING:
    import logging

    from airflow.sdk.definitions.context import Context
    from airflow.sdk.types import Logger

    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
    from airflow_provider_pathways.hooks.slurm import SlurmHook


def sweep_gke(
    hook: PathwaysJobHook,
    namespaces: Sequence[str],
    *,
    dry_run: bool,
    log: Logger | logging.Logger,
    dag_ids: Collection[str] | None = None,
) -> list[SweptJob]:
    """Judge every active job of this provider in ``namespaces`` by its task instance's state now and
    end (unless ``dry_run``) those no try follows (only jobs of ``dag_ids`` when given): each delete
    names the UID and resourceVersion the judgement read, so a job a try marked meanwhile is left
    alone (outcome ``changed``). A job without the task instance annotation (an older provider
    version's) is reported, never ended."""
    active = [
        job
        for namespace in namespaces
        for job in hook.provider_jobs(namespace)
        if not job.phase.terminal  # a job being deleted (terminating) is left to that delete
    ]
    ours = deployment_name()
    identities = {job.ref: task_instance_of(job.obj) for job in active}
    if dag_ids is not None:
        active = [job for job in active if (i := identities[job.ref]) is not None and i.dag_id in dag_ids]
    known = [identity for identity in (identities[job.ref] for job in active) if identity is not None]
    states = read_task_instance_states(identity.key() for identity in known)
    has_runs = dags_with_runs(identity.dag_id for identity in known if states[identity.key()] == NOT_FOUND)
    swept = []
    for job in active:
        identity = identities[job.ref]
        if identity is None:
            log.warning("%s names no task instance (made by an older provider version): left alone", job.ref)
            continue
        row = SweptJob.judged(
            "GKE",
            str(job.ref),
            identity.key(),
            states[identity.key()],
            left_running_of(job.obj),
            dag_has_runs=identity.dag_id in has_runs or states[identity.key()] != NOT_FOUND,
            deployments=(deployment_of(job.obj), ours),
        )
        if row.verdict == Verdict.END.value and not dry_run:
            released = hook.delete_as_read(job)
            row = row.with_outcome(
                CHANGED if released is None else ENDED if released is Release.DELETE else GONE
            )
        swept.append(row)
    return swept


def sweep_slurm(
    hook: SlurmHook,
    *,
    dry_run: bool,
    log: Logger | logging.Logger,
    dag_ids: Collection[str] | None = None,
) -> list[SweptJob]:
    """Judge every active job of the connection's user that this provider submitted (its comment's
    marker) by its task instance's state now, and cancel (unless ``dry_run``) those no try follows
    (only jobs of ``dag_ids`` when given): a Pathways service job with its worker array, as its
    task's kill does. The task instance is the one the comment names whose run matches the marker's
    digest; none matching: its run is gone. Each job is read again just before it is cancelled, and
    left alone (outcome ``changed``) when its comment changed meanwhile (a new try took it over). A
    job whose comment names no task instance (an older provider version's) is reported, never
    cancelled."""
    ours = deployment_name()
    active = [
        job
        for job in hook.get_user_jobs()
        if job.array_task_id is None and job.active and comment_fields(job.comment) is not None
    ]
    runs: dict[tuple[str, str, int], dict[str, str | None]] = {}
    has_runs: dict[str, bool] = {}
    swept = []
    for job in active:
        owner = comment_owner(job.comment)
        if owner is None:
            log.warning(
                "Slurm job %s names no task instance (an older provider version's): left alone", job.job_id
            )
            continue
        if dag_ids is not None and owner.dag_id not in dag_ids:
            continue
        task = (owner.dag_id, owner.task_id, owner.map_index)
        if task not in runs:
            runs[task] = read_run_states(*task)
        run_id = next((run for run in runs[task] if owner.is_run(run)), None)
        state = NOT_FOUND if run_id is None else runs[task][run_id]
        key = (owner.dag_id, owner.task_id, run_id or "?", owner.map_index)
        if state == NOT_FOUND and owner.dag_id not in has_runs:
            has_runs[owner.dag_id] = bool(dags_with_runs([owner.dag_id]))
        known_here = state != NOT_FOUND or has_runs[owner.dag_id]
        row = SweptJob.judged(
            "Slurm",
            f"Slurm job {job.job_id}",
            key,
            state,
            owner.left_running,
            known_here,
            (owner.deployment, ours),
        )
        if row.verdict == Verdict.END.value and not dry_run:
            row = row.with_outcome(_cancel_as_read(hook, job.job_id, job.comment, log))
        swept.append(row)
    return swept


def _cancel_as_read(hook: SlurmHook, job_id: int, comment: str | None, log: Logger | logging.Logger) -> str:
    """Cancel the job (a service with its worker array) if it is still active with ``comment``."""
    now = hook.get_job(job_id)
    if now is None or not now.active:
        return GONE
    if now.comment != comment:
        return CHANGED
    if (comment_fields(comment) or {}).get("role") == SERVICE_ROLE:
        ended = cancel_service_with_workers(hook, job_id, ServiceProbe(), log, "swept")
    else:
        ended = hook.cancel_job(job_id)
    return ENDED if ended else GONE


def names_given(given: object, field: str) -> frozenset[str] | None:
    """A rendered template field that takes one name or a list of them (``namespaces``,
    ``dag_ids``); None when empty. TypeError naming ``field`` otherwise."""
    if given is None or given == "" or given == []:
        return None
    if isinstance(given, str):
        return frozenset({given})
    if not isinstance(given, Sequence) or not all(isinstance(n, str) and n for n in given):
        raise TypeError(f"{field}: expected a name or a list of names, got {given!r}")
    return frozenset(given)


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
    :param dag_ids: sweep only the jobs of these DAGs (templated); default: every DAG's.
    :param dry_run: report what would be ended, end nothing.
    """

    template_fields: Sequence[str] = ("namespaces", "kubernetes_conn_id", "dag_ids")
    ui_color = "#fce8e6"

    def __init__(
        self,
        *,
        namespaces: Sequence[str] | str | None = None,
        kubernetes_conn_id: str | None = "kubernetes_default",
        cluster_context: str | None = None,
        config_file: str | None = None,
        in_cluster: bool | None = None,
        dag_ids: Sequence[str] | None = None,
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.namespaces = namespaces
        self.dag_ids = dag_ids
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
        return sorted(names_given(self.namespaces, "namespaces") or {self.hook.resolve_namespace(None)})

    def execute(self, context: Context) -> list[dict[str, object]]:
        swept = sweep_gke(
            self.hook,
            self.swept_namespaces(),
            dry_run=self.report_only,
            log=self.log,
            dag_ids=names_given(self.dag_ids, "dag_ids"),
        )
        self.log.info("%s\n%s", "Dry run: nothing was ended" if self.report_only else "Swept", report(swept))
        return [row.to_dict() for row in swept]


class SlurmJobSweepOperator(BaseOperator):
    """
    Cancel the Slurm jobs this provider submitted that no task instance follows any more.

    Lists the active jobs of the connection's user whose comment carries the provider's marker,
    reads the state of the task instance each one names, and cancels a job when its task instance
    ended (failed, success, skipped...) or no longer exists, unless its task leaves it running in
    that state (a Pathways service once ready; ``cancel_on_kill=False``). A Pathways service job is
    cancelled with its worker array, as its task's kill does. A task instance that is queued,
    running, deferred, up for retry or cleared keeps its job: a try follows it.

    Returns the jobs it judged (XCom), and logs them as a table.

    :param slurm_conn_id: the Pathways-on-Slurm connection (templated).
    :param dag_ids: sweep only the jobs of these DAGs (templated); default: every DAG's.
    :param dry_run: report what would be cancelled, cancel nothing.
    """

    template_fields: Sequence[str] = ("slurm_conn_id", "dag_ids")
    ui_color = "#fce8e6"

    def __init__(
        self,
        *,
        slurm_conn_id: str = "pathways_slurm_default",
        dag_ids: Sequence[str] | None = None,
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.slurm_conn_id = slurm_conn_id
        self.dag_ids = dag_ids
        # Not ``self.dry_run``: that would hide BaseOperator.dry_run().
        self.report_only = dry_run

    @cached_property
    def hook(self) -> SlurmHook:
        from airflow_provider_pathways.hooks.slurm import SlurmHook

        return SlurmHook(slurm_conn_id=self.slurm_conn_id)

    def execute(self, context: Context) -> list[dict[str, object]]:
        try:
            swept = sweep_slurm(
                self.hook,
                dry_run=self.report_only,
                log=self.log,
                dag_ids=names_given(self.dag_ids, "dag_ids"),
            )
        finally:
            self.hook.close()
        title = "Dry run: nothing was cancelled" if self.report_only else "Swept"
        self.log.info("%s\n%s", title, report(swept))
        return [row.to_dict() for row in swept]
