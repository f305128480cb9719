"""Which task instance and which try may delete a job: the rules, on plain objects."""

from __future__ import annotations

from typing import Any

from airflow_provider_pathways.gke.objects import MAX_JOB_NAME_LENGTH
from airflow_provider_pathways.gke.task_job import (
    FOLLOWED_BY_TRY,
    JobRef,
    Release,
    airflow_labels,
    fresh_job_name,
    release_verdict,
)

OWNER = airflow_labels("dag", "train", "manual__1", -1)
REF = JobRef("train-1", "ml", "PathwaysJob", "uid-1")


def job(uid: str = "uid-1", labels: dict[str, str] = OWNER, follower: int | None = None) -> dict[str, Any]:
    annotations = {FOLLOWED_BY_TRY: str(follower)} if follower is not None else {}
    return {"metadata": {"name": "train-1", "namespace": "ml", "uid": uid, "labels": labels,
                         "annotations": annotations}}  # fmt: skip


def test_a_try_deletes_only_its_task_instances_job_while_no_newer_try_follows_it() -> None:
    assert release_verdict(job(follower=3), REF, OWNER, 3) is Release.DELETE
    assert release_verdict(job(), REF, OWNER, 1) is Release.DELETE
    assert release_verdict(job(follower=4), REF, OWNER, 3) is Release.SUPERSEDED
    assert release_verdict(None, REF, OWNER, 3) is Release.GONE
    # another object took the name, or another run's job carries it
    assert release_verdict(job(uid="uid-2"), REF, OWNER, 3) is Release.NOT_OURS
    other_run = airflow_labels("dag", "train", "manual__2", -1)
    assert release_verdict(job(labels=other_run), JobRef("train-1", "ml", "PathwaysJob"), OWNER, 3) is (
        Release.NOT_OURS
    )


def test_a_fresh_job_is_named_for_its_try_within_the_name_limit() -> None:
    assert fresh_job_name("train", 2) == "train-2"
    long = "a" * MAX_JOB_NAME_LENGTH
    assert fresh_job_name(long, 12) == "a" * (MAX_JOB_NAME_LENGTH - 3) + "-12"
    assert len(fresh_job_name(long, 12)) == MAX_JOB_NAME_LENGTH


def test_status_is_read_only_from_the_job_with_the_followed_uid() -> None:
    from airflow_provider_pathways.gke.objects import JobKind, StatusOptions, the_job_objects

    pathways_job = {"metadata": {"uid": "pj-1"}}
    its_jobset = {"metadata": {"uid": "js-1", "ownerReferences": [{"kind": "PathwaysJob", "uid": "pj-1"}]}}
    other_jobset = {"metadata": {"uid": "js-2", "ownerReferences": [{"kind": "PathwaysJob", "uid": "pj-2"}]}}
    following = StatusOptions(uid="pj-1")
    assert the_job_objects(following, pathways_job, its_jobset) == (pathways_job, its_jobset)
    assert the_job_objects(following, {"metadata": {"uid": "pj-2"}}, other_jobset) == (None, None)
    assert the_job_objects(StatusOptions(), pathways_job, other_jobset) == (pathways_job, other_jobset)
    plain = StatusOptions(kind=JobKind.JOBSET, uid="js-1")
    assert the_job_objects(plain, None, its_jobset) == (None, its_jobset)
    assert the_job_objects(plain, None, other_jobset) == (None, None)
