"""A task instance's jobs on GKE: found by owner labels, marked by the try that follows them, and
deleted only under the rules of :mod:`airflow_provider_pathways.gke.ownership`. The client
libraries are imported when a call needs them (DAG files import the operators)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_pathways.gke.ownership import (
    RELEASE_ATTEMPTS,
    JobRef,
    Release,
    delete_preconditions,
    follow_mark,
    owner_selector,
    release_verdict,
)
from airflow_provider_pathways.gke.resources import PATHWAYS_JOB, JobKind

if TYPE_CHECKING:
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

MERGE_PATCH = "application/merge-patch+json"
_CONFLICT = 409


def mark_followed(hook: PathwaysJobHook, ref: JobRef, try_number: int) -> None:
    """Write ``try_number`` into the job's follower annotation; an older try then leaves it alone."""
    kind = JobKind(ref.kind)
    hook._call(
        lambda: hook.custom_object_client.patch_namespaced_custom_object(
            **kind.resource.object_coordinates(ref.namespace, ref.name),
            body=follow_mark(try_number),
            _content_type=MERGE_PATCH,
        ),
        gone=None,
    )


def _owned_by_pathways_job(obj: Mapping[str, Any]) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("kind") == PATHWAYS_JOB.kind for ref in refs)


def owned_jobs(hook: PathwaysJobHook, namespace: str, owner: Mapping[str, str]) -> list[JobRef]:
    """The task instance's jobs in ``namespace``, of either kind, whatever their names (a
    PathwaysJob's JobSet carries its labels too, and is not a job of its own)."""
    found = []
    for kind in JobKind:
        coordinates = kind.resource.coordinates(namespace)
        listing: dict[str, Any] = hook._call(
            lambda: hook.custom_object_client.list_namespaced_custom_object(
                **coordinates,  # noqa: B023  (called at once)
                label_selector=owner_selector(owner),
            ),
            gone={},
        )
        for obj in listing.get("items") or []:
            if kind is JobKind.JOBSET and _owned_by_pathways_job(obj):
                continue
            found.append(JobRef.of(obj, kind.value))
    return found


def release_job(
    hook: PathwaysJobHook, ref: JobRef, owner: Mapping[str, str], try_number: int | None
) -> Release:
    """Delete the job if it is still this task instance's and no newer try follows it; the delete
    names the UID and resourceVersion the decision was taken on, and is decided again when the
    object changed meanwhile."""
    from kubernetes.client import ApiException

    kind = JobKind(ref.kind)
    verdict = Release.GONE
    for _ in range(RELEASE_ATTEMPTS):
        obj = hook.get_object(kind.resource, ref.name, ref.namespace)
        verdict = release_verdict(obj, ref, owner, try_number)
        if verdict is not Release.DELETE:
            return verdict
        assert obj is not None
        try:
            deleted = hook.delete_job(ref.name, ref.namespace, kind, preconditions=delete_preconditions(obj))
        except ApiException as err:
            if err.status != _CONFLICT:
                raise
            continue
        return Release.DELETE if deleted else Release.GONE
    raise _changed_on_every_delete(ref, verdict)


def _changed_on_every_delete(ref: JobRef, verdict: Release) -> RuntimeError:
    """A job that changed before each delete could run (409 on its preconditions) was not deleted:
    the caller must not forget it. (``verdict`` is the last decision: only a delete loops.)"""
    assert verdict is Release.DELETE
    return RuntimeError(
        f"{ref} changed before each of {RELEASE_ATTEMPTS} deletes (409 Conflict on the UID and "
        "resourceVersion preconditions); it was not deleted"
    )


async def a_release_job(
    hook: PathwaysJobHook, ref: JobRef, owner: Mapping[str, str], try_number: int | None
) -> Release:
    """Async twin of :func:`release_job`."""
    from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

    kind = JobKind(ref.kind)
    verdict = Release.GONE
    for _ in range(RELEASE_ATTEMPTS):
        async with hook.a_client() as api_client:
            obj = await hook.a_get_object(kind.resource, ref.name, ref.namespace, api_client)
        verdict = release_verdict(obj, ref, owner, try_number)
        if verdict is not Release.DELETE:
            return verdict
        assert obj is not None
        try:
            deleted = await hook.a_delete_job(
                ref.name, ref.namespace, kind, preconditions=delete_preconditions(obj)
            )
        except AsyncApiException as err:
            if err.status != _CONFLICT:
                raise
            continue
        return Release.DELETE if deleted else Release.GONE
    raise _changed_on_every_delete(ref, verdict)
