"""DAGs the GKE tests run with dag.test() against the Kubernetes stand-in.

Behaviour of the simulated cluster is set with ``sandbox.pathways.dev/*`` annotations on the job
(see sandbox/kube/README.md); each DAG uses its own namespace so tests can inspect it.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import DAG, BaseOperator, TaskGroup

from airflow_provider_pathways.gke.spec import PathwaysJobSpec
from airflow_provider_pathways.gke.status import Phase
from airflow_provider_pathways.gke.task_job import airflow_labels
from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator
from airflow_provider_pathways.sensors.pathways_job import PathwaysJobReadySensor
from tests.dags.fast_retry import fast_retry
from tests.support.kube_jobs import wait_for

CONN = "gke_sandbox"
KNOB = "sandbox.pathways.dev/"
START = pendulum.datetime(2026, 1, 1, tz="UTC")
PROGRAM_LOG = "\n".join(["loading checkpoint", "step 100: loss=0.51", "step 200: loss=0.33", "saved model"])
TEMPLATE = {
    "spec": {
        "containers": [{"name": "main", "image": "python:3.12", "command": ["python", "train.py"]}],
    }
}


def knobs(**values: Any) -> dict[str, str]:
    """Annotations that steer the simulated controller."""
    return {KNOB + key.replace("_", "-"): str(value) for key, value in values.items()}


def spec(slices: int = 2, *, template: bool = True, max_restarts: int = 0) -> PathwaysJobSpec:
    return PathwaysJobSpec.from_tpu_type(
        "v5litepod-16",
        num_slices=slices,
        pathways_dir="gs://pathways-test-bucket/scratch",
        template=TEMPLATE if template else None,
        max_restarts=max_restarts,
    )


def sandbox() -> Any:
    """The running stand-in (for callbacks that act on the cluster)."""
    from sandbox.kube.launcher import connect_kube_standin

    return connect_kube_standin(os.environ["PATHWAYS_SANDBOX_KUBE_STATE"])


def resume_suspended_jobs(context: Any) -> None:
    """on_retry_callback: the queue re-admits the suspended job before the retry reattaches."""
    standin = sandbox()
    namespace = context["ti"].xcom_pull(task_ids=context["ti"].task_id, key="namespace")
    name = context["ti"].xcom_pull(task_ids=context["ti"].task_id, key="name")
    standin.action(namespace, name, "resume")


def resume_and_await_the_end(context: Any) -> None:
    """on_retry_callback: the queue re-admits the suspended job, and it runs to its end before the
    retry looks at it (a slow scheduler, or a long retry_delay)."""
    resume_suspended_jobs(context)
    ti = context["ti"]
    name, namespace = (
        ti.xcom_pull(task_ids=ti.task_id, key="name"),
        ti.xcom_pull(task_ids=ti.task_id, key="namespace"),
    )
    hook = PathwaysJobHook(kubernetes_conn_id=CONN)
    wait_for(lambda: hook.get_status(name, namespace).phase is Phase.SUCCEEDED, 30, f"{name} to succeed")


def operator(task_id: str, namespace: str, job: Any, **kwargs: Any) -> PathwaysJobOperator:
    kwargs = {**fast_retry(), **kwargs}
    kwargs.setdefault("retries", 2)
    return PathwaysJobOperator(
        task_id=task_id, job=job, namespace=namespace, kubernetes_conn_id=CONN, **kwargs
    )


with DAG("gke_train_deferrable", schedule=None, start_date=START) as train_deferrable:
    operator(
        "train",
        "train-deferrable",
        spec(),
        deferrable=True,
        annotations=knobs(program_log=PROGRAM_LOG),
        log_tail_lines=3,
        gcp_project="my-project",
        gke_cluster="tpu-cluster",
        gke_location="us-east5",
    )

with DAG("gke_train_polling", schedule=None, start_date=START) as train_polling:
    operator(
        "train",
        "train-polling",
        spec(),
        deferrable=False,
        poll_interval=0.1,
        annotations=knobs(program_log=PROGRAM_LOG),
    )

SHARDS = 3

with DAG("gke_mapped", schedule=None, start_date=START) as mapped:
    # one job per map index, each with its own program log, followed in the triggerer and by polling
    for mode, deferrable in (("deferred", True), ("polling", False)):
        PathwaysJobOperator.partial(
            task_id=f"train_{mode}",
            job=spec(),
            namespace=f"mapped-{mode}",
            kubernetes_conn_id=CONN,
            deferrable=deferrable,
            poll_interval=0.1,
            log_tail_lines=1,
            retries=0,
        ).expand(annotations=[knobs(program_log=f"shard {i} done") for i in range(SHARDS)])


def _job_name(result: dict[str, Any]) -> str:
    return str(result["name"])


with DAG("gke_mapped_headless", schedule=None, start_date=START) as mapped_headless:
    # per map index: a headless job, then a readiness sensor for that job
    for mode, deferrable in (("deferred", True), ("polling", False)):
        jobs = PathwaysJobOperator.partial(
            task_id=f"start_{mode}",
            job=spec(2, template=False),
            namespace=f"mapped-headless-{mode}",
            kubernetes_conn_id=CONN,
            wait_until="created",
            delete_on=("failure", "kill"),
            retries=0,
        ).expand(labels=[{"shard": str(i)} for i in range(SHARDS)])
        PathwaysJobReadySensor.partial(
            task_id=f"ready_{mode}",
            namespace=f"mapped-headless-{mode}",
            kubernetes_conn_id=CONN,
            deferrable=deferrable,
            poke_interval=0.1,
            timeout=60,
        ).expand(job_name=jobs.output.map(_job_name))

with DAG("gke_jobset_mode", schedule=None, start_date=START) as jobset_mode:
    operator("train", "jobset-mode", spec(), kind="JobSet", deferrable=True)

with DAG("gke_program_fails", schedule=None, start_date=START) as program_fails:
    operator(
        "train",
        "program-fails",
        spec(),
        deferrable=True,
        retries=3,
        annotations=knobs(
            program_exit_code=3, program_log="Traceback (most recent call last):\nValueError: bad batch"
        ),
    )

with DAG("gke_controller_rejects", schedule=None, start_date=START) as controller_rejects:
    rejected = spec().to_pathwaysjob()
    rejected["spec"]["workers"][0].update({"type": "ct6e-standard-4t", "topology": "3x3"})
    operator("train", "controller-rejects", rejected, deferrable=True, retries=3, validate_spec=False)

with DAG("gke_preempted_then_retried", schedule=None, start_date=START) as preempted_then_retried:
    operator("train", "preempted", spec(), deferrable=True, annotations=knobs(program_seconds=1.5))

# Marked failed while its create is on its way (the test holds the create in a relay behind
# gke_slow, a connection the test makes): the try must not defer.
with DAG("gke_marked_before_deferring", schedule=None, start_date=START) as marked_before_deferring:
    PathwaysJobOperator(
        task_id="train",
        job=spec(),
        namespace="marked-before-deferring",
        kubernetes_conn_id="gke_slow",
        deferrable=True,
        retries=0,
        annotations=knobs(program_seconds=30),
    )

# A JobSet that restarts once (maxRestarts 1) after the test fails its program: JobSet v0.12's
# RestartingJobSet condition is True until every Job is ready again.
with DAG("gke_restarting", schedule=None, start_date=START) as restarting:
    operator(
        "train",
        "restarting",
        spec(max_restarts=1),
        deferrable=True,
        retries=0,
        annotations=knobs(program_seconds=4),
    )

with DAG("gke_metrics_preempted", schedule=None, start_date=START) as metrics_preempted:
    # the test preempts the first try's job once it has held its chips 2 s (its TPU-hours are not 0)
    operator("train", "metrics-preempted", spec(), deferrable=True, annotations=knobs(program_seconds=4))

with DAG("gke_lineage", schedule=None, start_date=START) as lineage:
    operator(
        "train",
        "lineage",
        spec(),
        deferrable=True,
        queue_name="{{ 'multislice' + '-queue' }}",
        checkpoint_dir="gs://pathways-test-bucket/{{ dag.dag_id }}/checkpoints",
    )

with DAG("gke_suspended_reattach", schedule=None, start_date=START) as suspended_reattach:
    operator(
        "train",
        "suspended",
        spec(),
        deferrable=True,
        annotations=knobs(program_seconds=600),  # ended by the test once the retry follows the job
        delete_on=("success", "kill"),
        on_retry_callback=resume_suspended_jobs,
    )


# Suspended by someone other than Kueue, and never resumed: with fail_on_suspend (the default) and
# no "failure" in delete_on, the retry replaces the job; the last try deletes it.
for retries in (2, 0):
    with DAG(f"gke_suspended_retries_{retries}", schedule=None, start_date=START) as suspended_for_good:
        operator(
            "train",
            f"suspended-retries-{retries}",
            spec(),
            deferrable=True,
            retries=retries,
            annotations=knobs(program_seconds=600),  # ended by the test
            delete_on=("success", "kill"),
        )
    globals()[f"suspended_retries_{retries}"] = suspended_for_good


class LeaveSuspendedJob(BaseOperator):
    """Stands for an earlier try of task ``train`` whose worker died: its job, found only by the
    owner labels of ``train`` in this run, is left suspended (not ended, so not to be doubled)."""

    def __init__(self, *, namespace: str, job_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.namespace, self.job_name = namespace, job_name

    def execute(self, context: Any) -> None:
        ti = context["ti"]
        job = spec()
        job.name, job.namespace = self.job_name, self.namespace
        job.labels = airflow_labels(ti.dag_id, "train", ti.run_id, -1)
        job.annotations = knobs(program_seconds=1.5)
        hook = PathwaysJobHook(kubernetes_conn_id=CONN)
        hook.create_job(job.to_pathwaysjob(), self.namespace)
        wait_for(lambda: hook.get_status(self.job_name, self.namespace).phase is Phase.RUNNING, 30)
        sandbox().action(self.namespace, self.job_name, "suspend")
        wait_for(lambda: hook.get_status(self.job_name, self.namespace).phase is Phase.SUSPENDED, 30)


with DAG("gke_suspended_left_by_a_lost_try", schedule=None, start_date=START) as suspended_left:
    LeaveSuspendedJob(task_id="lost_try", namespace="left-suspended", job_name="lost-try-job") >> operator(
        "train", "left-suspended", spec(), deferrable=True, fail_on_suspend=False, retries=0
    )

with DAG("gke_preempted_without_retries", schedule=None, start_date=START) as preempted_without_retries:
    PathwaysJobOperator(  # no retries anywhere: the preemption budget applies
        task_id="train",
        job=spec(),
        namespace="preempted-budget",
        kubernetes_conn_id=CONN,
        deferrable=True,
        **fast_retry(budget=True),
        annotations=knobs(program_seconds=1.5),
    )

with DAG("gke_program_fails_without_retries", schedule=None, start_date=START) as program_fails_no_retries:
    PathwaysJobOperator(
        task_id="train",
        job=spec(),
        namespace="fails-budget",
        kubernetes_conn_id=CONN,
        deferrable=False,
        poll_interval=0.1,
        annotations=knobs(program_exit_code=3),
    )

with DAG("gke_execution_timeout_deferred", schedule=None, start_date=START) as execution_timeout_deferred:
    operator(
        "train",
        "deferred-timeout",
        spec(),
        deferrable=True,
        retries=0,
        execution_timeout=timedelta(seconds=20),
        annotations=knobs(program_seconds=120),
    )

with DAG("gke_kill_on_timeout", schedule=None, start_date=START) as kill_on_timeout:
    operator(
        "train",
        "killed",
        spec(),
        deferrable=False,
        poll_interval=0.1,
        retries=0,
        execution_timeout=timedelta(seconds=2),
        annotations=knobs(program_seconds=120),
    )


# Polling tries that reach their execution_timeout between two looks (poll_interval 30 s): the
# failure policy of delete_on decides, not the kill's.
def timeout_between_looks(*events: str) -> DAG:
    with DAG(f"gke_timeout_delete_on_{'_'.join(events)}", schedule=None, start_date=START) as timeout_dag:
        operator(
            "train",
            f"timeout-{'-'.join(events)}",
            spec(),
            deferrable=False,
            poll_interval=30,
            retries=0,
            delete_on=events,
            execution_timeout=timedelta(seconds=10),
            annotations=knobs(program_seconds=120),
        )
    return timeout_dag


timeout_deletes_on_failure = timeout_between_looks("success", "failure")
timeout_keeps_without_failure = timeout_between_looks("kill")


# Deferred tries that reach their execution_timeout: the failure policy of delete_on decides, also
# on Airflow 2, which fails such a try before its resume method runs.
def deferred_timeout(*events: str) -> DAG:
    with DAG(
        f"gke_deferred_timeout_delete_on_{'_'.join(events)}", schedule=None, start_date=START
    ) as timeout_dag:
        operator(
            "train",
            f"deferred-timeout-{'-'.join(events)}",
            spec(),
            deferrable=True,
            retries=0,
            delete_on=events,
            execution_timeout=timedelta(seconds=6),
            annotations=knobs(program_seconds=120),
        )
    return timeout_dag


deferred_timeout_deletes_on_failure = deferred_timeout("success", "failure")
deferred_timeout_keeps_without_failure = deferred_timeout("kill")

with DAG("gke_ready_then_sensor", schedule=None, start_date=START) as ready_then_sensor:
    start = operator(
        "start",
        "ready",
        spec(3, template=False),
        wait_until="ready",
        min_slices=2,
        deferrable=True,
        annotations=knobs(max_ready_slices=2, slice_delay=0.05),
        delete_on=("failure", "kill"),
    )
    poke = PathwaysJobReadySensor(
        task_id="ready_poke",
        job_name="{{ ti.xcom_pull(task_ids='start', key='name') }}",
        namespace="ready",
        min_slices=2,
        kubernetes_conn_id=CONN,
        poke_interval=0.1,
        timeout=30,
    )
    all_slices = PathwaysJobReadySensor(
        task_id="all_slices_deferred",
        job_name="{{ ti.xcom_pull(task_ids='start', key='name') }}",
        namespace="ready",
        kubernetes_conn_id=CONN,
        deferrable=True,
        timeout=3,
    )
    start >> [poke, all_slices]


with DAG(
    "gke_headless_group",
    schedule=None,
    start_date=START,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=1)},
) as headless_group:
    # the headless pattern with DAG retries: a job and its readiness sensor in one task group, which
    # is what to clear (retry) when the job dies; slices come up 2 s apart
    for mode, deferrable in (("deferred", True), ("polling", False)):
        with TaskGroup(f"pathways_{mode}"):
            start_job = PathwaysJobOperator(
                task_id="start",
                job=spec(2, template=False),
                namespace=f"headless-{mode}",
                kubernetes_conn_id=CONN,
                wait_until="created",
                delete_on=("failure", "kill"),
                annotations=knobs(slice_delay_seconds=2),
                **fast_retry(),
            )
            start_job >> PathwaysJobReadySensor(
                task_id="ready",
                job_name=f"{{{{ ti.xcom_pull(task_ids='pathways_{mode}.start', key='name') }}}}",
                namespace=f"headless-{mode}",
                kubernetes_conn_id=CONN,
                deferrable=deferrable,
                poke_interval=0.1,
                timeout=60,
                **fast_retry(),
            )


def _invalid(path: str, value: Any) -> dict[str, Any]:
    """A valid manifest with one field changed (``path`` like ``spec.workers.0.topology``)."""
    manifest = spec().to_pathwaysjob()
    target: Any = manifest
    *parents, last = path.split(".")
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is _DROP:
        del target[last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return manifest


_DROP = object()
# (task id, field path named in the error, manifest)
INVALID_SPECS: list[tuple[str, str, dict[str, Any]]] = [
    ("bad_topology", "spec.workers[0].topology", _invalid("spec.workers.0.topology", "3x3")),
    ("bad_3d_topology", "spec.workers[0].topology", _invalid("spec.workers.0.topology", "2x2x2")),
    ("bad_machine_type", "spec.workers[0].type", _invalid("spec.workers.0.type", "n2-standard-8")),
    ("zero_slices", "spec.workers[0].numSlices", _invalid("spec.workers.0.numSlices", 0)),
    (
        "negative_slice_restarts",
        "spec.workers[0].maxSliceRestarts",
        _invalid("spec.workers.0.maxSliceRestarts", -1),
    ),
    ("negative_restarts", "spec.maxRestarts", _invalid("spec.maxRestarts", -2)),
    ("elastic_too_many", "spec.controller.elasticSlices", _invalid("spec.controller.elasticSlices", 2)),
    ("negative_elastic", "spec.controller.elasticSlices", _invalid("spec.controller.elasticSlices", -1)),
    ("scratch_not_gs", "spec.pathwaysDir", _invalid("spec.pathwaysDir", "s3://bucket/x")),
    ("scratch_bad_bucket", "spec.pathwaysDir", _invalid("spec.pathwaysDir", "gs://UPPER_case/x")),
    ("scratch_missing", "spec.pathwaysDir", _invalid("spec.pathwaysDir", _DROP)),
    ("bad_version_tag", "spec.pathwaysVersion", _invalid("spec.pathwaysVersion", "jax 0.5.3")),
    ("bad_mode", "spec.controller.deploymentMode", _invalid("spec.controller.deploymentMode", "sideways")),
    (
        "main_not_in_template",
        "spec.controller.mainContainerName",
        _invalid("spec.controller.mainContainerName", "jax"),
    ),
    ("bad_name", "metadata.name", _invalid("metadata.name", "Train_Job")),
    ("long_name", "metadata.name", _invalid("metadata.name", "a" * 50)),
    ("bad_label", "metadata.labels", _invalid("metadata.labels", {"team": "ml research"})),
    (
        "bad_component",
        "spec.customComponents[0].componentType",
        _invalid("spec.customComponents", [{"componentType": "gpu"}]),
    ),
    (
        "duplicate_component",
        "spec.customComponents",
        _invalid(
            "spec.customComponents",
            [{"componentType": "worker", "image": "a:1"}, {"componentType": "worker", "image": "b:1"}],
        ),
    ),
    (
        "bad_grace",
        "spec.workers[0].terminationGracePeriodSeconds",
        _invalid("spec.workers.0.terminationGracePeriodSeconds", -5),
    ),
    (
        "bad_node_selector",
        "spec.workers[0].nodeSelector",
        _invalid("spec.workers.0.nodeSelector", {"pool": 3}),
    ),
]

with DAG("gke_invalid_specs", schedule=None, start_date=START) as invalid_specs:
    for task_id, _field, manifest in INVALID_SPECS:
        operator(task_id, "invalid-specs", manifest, retries=2)

with DAG("gke_delete_missing", schedule=None, start_date=START) as delete_missing:
    from airflow_provider_pathways.operators.pathways_job import DeletePathwaysJobOperator

    DeletePathwaysJobOperator(
        task_id="teardown", job_name="never-created", namespace="teardown", kubernetes_conn_id=CONN
    )


# ---- clears and superseded tries ---------------------------------------------------------------

with DAG("gke_cleared_after_kept_failure", schedule=None, start_date=START) as cleared_after_kept_failure:
    operator(  # the program fails on the first try only; the failed job is kept for debugging
        "train",
        "kept-failure",
        spec(),
        deferrable=False,
        poll_interval=0.1,
        retries=0,
        delete_on=("success", "kill"),
        annotations={
            **knobs(program_seconds=0.5),
            KNOB + "program-exit-code": "{{ 3 if ti.try_number == 1 else 0 }}",
        },
    )

with DAG("gke_cleared_after_success", schedule=None, start_date=START) as cleared_after_success:
    operator("train", "cleared-success", spec(), deferrable=False, poll_interval=0.1, retries=0)


with DAG("gke_cleared_while_submitting", schedule=None, start_date=START) as cleared_while_submitting:
    operator("train", "cleared-submitting", spec(), deferrable=False, poll_interval=0.1, retries=0)


# Cleared after a try that ended and left its job running: its wait succeeded at "ready" (the job
# serves on), or it lost sight of the job and kept it (no "failure" in delete_on, or a retry
# follows). The clear kills no try that follows the job, so it must not end it either.
def cleared_while_serving(mode: str) -> DAG:
    suffix = "_deferred" if mode == "deferred" else ""
    with DAG(f"gke_cleared_while_serving{suffix}", schedule=None, start_date=START) as serving_dag:
        operator(
            "train",
            f"cleared-serving{suffix.replace('_', '-')}",
            spec(),
            wait_until="ready",
            deferrable=mode == "deferred",
            poll_interval=0.1,
            retries=0,
            annotations=knobs(program_seconds=600),
        )
    return serving_dag


cleared_while_serving_polling = cleared_while_serving("polling")
cleared_while_serving_deferred = cleared_while_serving("deferred")

with DAG("gke_cleared_after_lost_watch", schedule=None, start_date=START) as cleared_after_lost_watch:
    operator(
        "train",
        "cleared-lost-watch",
        spec(),
        deferrable=False,
        poll_interval=0.1,
        retries=0,
        outage_tolerance=1,
        delete_on=("success", "kill"),
        annotations=knobs(program_seconds=20),
    )

# The API server fails every attempt of the first create (an outage longer than one call's
# retries): the job may have been made, so the try loses sight of it (retried on the preemption
# budget) and the retry adopts or creates it.
with DAG("gke_create_outage", schedule=None, start_date=START) as create_outage:
    PathwaysJobOperator(
        task_id="train",
        job=spec(),
        namespace="create-outage",
        kubernetes_conn_id=CONN,
        deferrable=False,
        poll_interval=0.1,
        **fast_retry(budget=True),
        annotations=knobs(program_seconds=1.5),
    )

with DAG("gke_fixed_name", schedule=None, start_date=START) as fixed_name:
    operator(
        "train",
        "fixed-name",
        spec(),
        name="shared-train",
        deferrable=False,
        poll_interval=0.1,
        retries=0,
        annotations=knobs(program_seconds=0.5),
    )

with DAG("gke_superseded_try", schedule=None, start_date=START) as superseded_try:
    operator(  # killed by its execution_timeout while a newer try follows its job
        "train",
        "superseded",
        spec(),
        deferrable=False,
        poll_interval=0.1,
        retries=0,
        execution_timeout=timedelta(seconds=4),
        annotations=knobs(program_seconds=120),
    )

with DAG("gke_renamed_between_tries", schedule=None, start_date=START) as renamed_between_tries:
    operator(  # the name is templated on the try: the retry's spec names another job
        "train",
        "renamed",
        spec(),
        name="renamed-{{ ti.try_number }}",
        deferrable=True,
        annotations=knobs(program_seconds=1.5),
        delete_on=("success", "kill"),
        on_retry_callback=resume_suspended_jobs,
    )

with DAG("gke_resumed_and_done_before_retry", schedule=None, start_date=START) as resumed_and_done:
    operator(
        "train",
        "resumed-done",
        spec(),
        deferrable=False,
        poll_interval=0.1,
        annotations=knobs(program_seconds=1.5),
        delete_on=("success", "kill"),  # kept for the retry after the suspension
        on_retry_callback=resume_and_await_the_end,
    )

with DAG("gke_name_taken_while_followed", schedule=None, start_date=START) as name_taken_while_followed:
    operator(
        "train",
        "name-taken",
        spec(),
        name="taken-train",
        deferrable=False,
        poll_interval=1,
        retries=0,
        annotations=knobs(program_seconds=120),
    )

# ---- truthful outcomes: each DAG's test acts on the cluster while the task follows its job ----

with DAG("gke_deleted_elsewhere", schedule=None, start_date=START) as deleted_elsewhere:
    PathwaysJobOperator(  # no retries: the preemption budget, which retries infrastructure failures
        task_id="train",
        job=spec(),
        namespace="deleted-elsewhere",
        kubernetes_conn_id=CONN,
        deferrable=True,
        **fast_retry(budget=True),
        annotations=knobs(program_seconds=1.5),
    )

with DAG("gke_terminating", schedule=None, start_date=START) as terminating:
    PathwaysJobOperator(
        task_id="train",
        job=spec(),
        kind="JobSet",
        namespace="terminating",
        kubernetes_conn_id=CONN,
        deferrable=False,
        poll_interval=0.1,
        wait_timeout=60,
        **fast_retry(budget=True),
        annotations=knobs(program_seconds=1.5),
    )

with DAG("gke_evicted_for_storage", schedule=None, start_date=START) as evicted_for_storage:
    operator("train", "storage-evicted", spec(), deferrable=True, annotations=knobs(program_seconds=20))

with DAG("gke_succeeded_before_ready", schedule=None, start_date=START) as succeeded_before_ready:
    operator(
        "start",
        "before-ready",
        spec(),
        wait_until="ready",
        deferrable=True,
        annotations=knobs(max_ready_slices=1),
    )

with DAG("gke_delete_refused_after_success", schedule=None, start_date=START) as delete_refused_after_success:
    operator("train", "delete-refused", spec(), deferrable=False, poll_interval=0.1, retries=0)

with DAG("gke_delete_refused_after_preemption", schedule=None, start_date=START) as delete_refused_preempted:
    PathwaysJobOperator(
        task_id="train",
        job=spec(),
        namespace="delete-refused-preempted",
        kubernetes_conn_id=CONN,
        deferrable=True,
        **fast_retry(budget=True),
        annotations=knobs(program_seconds=1.5),
    )

with DAG("gke_outage_on_the_last_try", schedule=None, start_date=START) as outage_on_the_last_try:
    operator(
        "train",
        "outage-last-try",
        spec(),
        deferrable=False,
        poll_interval=0.1,
        retries=0,
        outage_tolerance=1,
        annotations=knobs(program_seconds=120),
    )

with DAG("gke_outage_then_retried", schedule=None, start_date=START) as outage_then_retried:
    PathwaysJobOperator(
        task_id="train",
        job=spec(),
        namespace="outage-retried",
        kubernetes_conn_id=CONN,
        deferrable=False,
        poll_interval=0.1,
        outage_tolerance=1,
        **fast_retry(budget=True),
        annotations=knobs(program_seconds=25),
    )

with DAG("gke_outage_deferred", schedule=None, start_date=START) as outage_deferred:
    PathwaysJobOperator(
        task_id="train",
        job=spec(),
        namespace="outage-deferred",
        kubernetes_conn_id=CONN,
        deferrable=True,
        outage_tolerance=1,
        **fast_retry(budget=True),
        annotations=knobs(program_seconds=20),
    )
