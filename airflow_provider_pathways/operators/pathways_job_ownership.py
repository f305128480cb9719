"""The job one try of a ``PathwaysJobOperator`` follows: found, adopted, judged, marked and deleted
only as its task instance's owner (:mod:`airflow_provider_pathways.gke.ownership`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_provider_pathways.failures import PathwaysSpecRejected
from airflow_provider_pathways.gke.job_objects import StatusOptions
from airflow_provider_pathways.gke.ownership import (
    JobRef,
    Release,
    describe_release,
    fresh_job_name,
    is_this_job,
    owner_labels,
)
from airflow_provider_pathways.gke.resources import JobKind
from airflow_provider_pathways.gke.status import Phase, judge_status
from airflow_provider_pathways.gke.task_spec import manifest_for
from airflow_provider_pathways.hooks.kubernetes_owned import (
    mark_followed,
    owned_jobs,
    release_job,
)
from airflow_provider_pathways.outcomes import JobJudgement, KeptJob, Verdict
from airflow_provider_pathways.transient import describe_error

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context
    from airflow.sdk.types import Logger
    from pydantic import JsonValue

    from airflow_provider_pathways.gke.spec import PathwaysJobSpec
    from airflow_provider_pathways.gke.status import PathwaysJobStatus
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook


class FollowedJob:
    """Which job this try follows (``_job``) and what it may do with it: adopt a job of its task
    instance found by owner labels, judge a kept one only while it is still the task instance's,
    mark it as followed by this try, and delete it only while no newer try follows it."""

    if TYPE_CHECKING:
        kind: str

        def forget_job(self, context: Context | None) -> None: ...

        def discards_failed_jobs(self) -> bool: ...

        @property
        def hook(self) -> PathwaysJobHook: ...

        @property
        def log(self) -> Logger: ...

        deletion_timeout: float
        external_id_key: str
        _spec: PathwaysJobSpec | None
        _status: PathwaysJobStatus | None

        @property
        def spec(self) -> PathwaysJobSpec: ...
        @property
        def status_options(self) -> StatusOptions: ...

    _job: JobRef | None = None
    _try_number: int | None = None

    @property
    def followed(self) -> JobRef:
        if self._job is None:
            raise AirflowException("no job is followed yet")
        return self._job

    def _owner(self) -> dict[str, str]:
        return owner_labels(self.spec.labels)

    def options_for(self, ref: JobRef) -> StatusOptions:
        """How to read ``ref``'s status (its kind may differ from the operator's: an upgraded DAG)."""
        return dataclasses.replace(self.status_options, kind=JobKind(ref.kind), uid=ref.uid)

    def job_status(self) -> PathwaysJobStatus:
        ref = self.followed
        return self.hook.get_status(ref.name, ref.namespace, self.options_for(ref))

    def start_try(self, context: Context, *, resumed: bool = False) -> None:
        """Remember this try's number; ``resumed`` after a deferral, also the job it follows (kept
        in ``task_state_store`` before it deferred)."""
        self._try_number = getattr(context.get("ti"), "try_number", None)
        store = context.get("task_state_store") if resumed else None
        stored = store.get(self.external_id_key) if store is not None else None
        if stored is not None:
            self._job = JobRef.from_id(KeptJob.from_stored(stored).job, self.kind)

    def describe_job(self, external_id: JsonValue) -> str:
        ref = JobRef.from_id(external_id, self.kind)
        return str(ref) if ref else f"{self.kind} {self.spec.namespace}/{self.spec.name}"

    def judge_job(self, external_id: JsonValue, context: Context) -> JobJudgement | None:
        """The kept job's judgement where it was made (its name, namespace and kind may have changed
        in the DAG since); None when another object took its name."""
        ref = JobRef.from_id(external_id, self.kind)
        if ref is None:
            return None
        obj = self.hook.get_object(JobKind(ref.kind).resource, ref.name, ref.namespace)
        if obj is not None and not is_this_job(obj, ref, self._owner()):
            self.log.warning("%s is no longer the job this task instance submitted; not following it", ref)
            return None
        self._job = JobRef.of(obj, ref.kind) if obj is not None else ref
        status = self.job_status()
        self._status = status
        return judge_status(status)

    def follow_mark(self) -> None:
        """Mark the job as followed by this try: an older try's kill or timeout leaves it alone."""
        if self._try_number is not None:
            mark_followed(self.hook, self.followed, self._try_number)

    def submit_job(self, context: Context) -> JsonValue:
        """Adopt a job of this task instance that has not ended (found by its owner labels, whatever
        its name and kind; judged as a kept job is, so a suspended one is followed, not run twice),
        or create one; an ended job of the task instance keeps its name, and the new one is named
        for this try."""
        from kubernetes.client import ApiException

        namespace, owner = self.spec.namespace or "", self._owner()
        ended: set[str] = set()
        for ref in owned_jobs(self.hook, namespace, owner):
            status = self.hook.get_status(ref.name, ref.namespace, self.options_for(ref))
            if judge_status(status).verdict is Verdict.ACTIVE:
                self.log.info("Reattaching to %s, created by an earlier try of this task instance", ref)
                self._job = ref
                return ref.to_id()
            if status.phase is not Phase.SUCCEEDED and self._remove_unkept(ref, status):
                continue
            ended.add(ref.name)
        name = self.spec.name or ""
        if name in ended and self._try_number is not None:
            fresh = fresh_job_name(name, self._try_number)
            self.log.info("%s %s/%s of an earlier try is kept; naming this try's job %s", self.kind,
                          namespace, name, fresh)  # fmt: skip
            self._spec = dataclasses.replace(self.spec, name=fresh)
            name = fresh
        try:
            created = self.hook.create_job(manifest_for(self.spec, self.kind), namespace)
        except ApiException as err:
            if err.status == 422:
                raise PathwaysSpecRejected(f"the API server rejected {namespace}/{name}: {err.body}") from err
            if err.status != 409:
                raise
            existing = self.hook.get_object(JobKind(self.kind).resource, name, namespace)
            if existing is None or not is_this_job(existing, JobRef(name, namespace, self.kind), owner):
                raise AirflowFailException(
                    f"name: a {self.kind} named {namespace}/{name} already exists and was not created by "
                    "this task instance; pass another name or delete it"
                ) from err
            created = existing  # this try's create answered late (a retried request)
        self._job = JobRef.of(created, self.kind)
        self.log.info("Created %s (uid %s)", self._job, self._job.uid)
        return self._job.to_id()

    def _remove_unkept(self, ref: JobRef, status: PathwaysJobStatus) -> bool:
        """An ended, unsuccessful job of the task instance that ``delete_on`` would have deleted but
        nobody did (no try saw its end, e.g. after ``wait_until="created"``, or its delete failed):
        delete it, so that the fresh job takes its name. False when it stays (kept by ``delete_on``,
        followed by a newer try, or its delete failed: the fresh job is then named for the try)."""
        if not self.discards_failed_jobs():
            return False
        reason = f"ended ({status.phase.value}); replaced by this try's job"
        try:
            released = release_job(self.hook, ref, self._owner(), self._try_number)
            self.log.info("%s", describe_release(released, ref, reason))
            if released is Release.DELETE:
                self.hook.wait_until_deleted(
                    ref.name, ref.namespace, JobKind(ref.kind), self.deletion_timeout
                )
        except Exception as err:
            self.log.warning("Could not delete %s (%s): %s", ref, reason, describe_error(err))
            return False
        return released in (Release.DELETE, Release.GONE)

    def release(self, reason: str, *, forget: Context | None = None) -> Release | None:
        """Delete the followed job unless it is not this task instance's or a newer try follows it;
        with ``forget`` (the try's context), also drop the kept job, unless a newer try follows it
        (its retry reattaches through the kept job)."""
        if self._job is None:
            return None
        released = release_job(self.hook, self._job, self._owner(), self._try_number)
        self.log.info("%s", describe_release(released, self._job, reason))
        if forget is not None and released is not Release.SUPERSEDED:
            self.forget_job(forget)
        return released

    def discard_job(self, external_id: JsonValue, reason: str, *, wait: bool = False) -> None:
        if self.release(reason) is Release.DELETE and wait:
            ref = self.followed
            self.hook.wait_until_deleted(ref.name, ref.namespace, JobKind(ref.kind), self.deletion_timeout)

    def discard_given_up(self, external_id: JsonValue, context: Context) -> bool:
        """The last try gave up on its job: delete it unless a newer try follows it (then the kept
        job stays, for that try's retry to reattach through)."""
        if self._job is None:
            self._job = JobRef.from_id(external_id, self.kind)
        released = self.release("the task gave up on it", forget=context)
        if released is None:  # not a job id this version reads: nothing to delete
            self.forget_job(context)
        return released is not Release.SUPERSEDED

    def trigger_ownership(self) -> Mapping[str, Any]:
        """What the trigger needs to delete the job on kill under the same rules."""
        return {"uid": self.followed.uid, "owner_labels": self._owner(), "try_number": self._try_number}
