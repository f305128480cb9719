"""The stand-in's Kueue: suspension at creation, Workload names, quota, priority, delay knob, evictions."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from tests.sandbox.kube.conftest import KNOB

WL = ("kueue.x-k8s.io", "v1beta1")
QUEUE = "kueue.x-k8s.io/queue-name"


def _workload_name(jobset: dict[str, Any]) -> str:
    """kueue workload_names.go GetWorkloadNameForOwnerWithGVK for a JobSet."""
    md = jobset["metadata"]
    digest = hashlib.sha1(f"JobSet\njobset.x-k8s.io\n{md['name']}\n{md['uid']}".encode()).hexdigest()[:5]
    return f"jobset-{md['name']}-{digest}"


def _workload(custom: Any, namespace: str, jobset: dict[str, Any]) -> dict[str, Any]:
    return custom.get_namespaced_custom_object(*WL, namespace, "workloads", _workload_name(jobset))


def _workload_if_any(custom: Any, namespace: str, jobset: dict[str, Any]) -> dict[str, Any] | None:
    """The JobSet's Workload, or None while Kueue has not made it yet (it does so after the create)."""
    from kubernetes.client.exceptions import ApiException

    try:
        return _workload(custom, namespace, jobset)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _cond(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return {}


def _queued(make_jobset: Any, name: str, queue: str, **annotations: str) -> dict[str, Any]:
    body = make_jobset(name, annotations={KNOB + k.replace("_", "-"): v for k, v in annotations.items()})
    body["metadata"]["labels"] = {QUEUE: queue}
    return body


@pytest.fixture
def queue(kube: Any, namespace: str) -> Any:
    """A LocalQueue name of this test; its quota is cleared afterwards."""
    name = f"q-{namespace}"
    yield name
    kube.control("kueue", method="POST", queue=name, quota_chips="none")


def test_queued_jobset_is_suspended_at_creation(
    custom, kube, namespace, make_jobset, pw_api, queue, wait_for, helpers
):
    """kueue defaults.go ApplyDefaultForSuspend; workload_names.go for the Workload's name."""
    created = pw_api.create_jobset(
        namespace, _queued(make_jobset, "held", queue, kueue_admit_after_seconds="never")
    )
    assert created["spec"]["suspend"] is True  # mutated at admission, before any controller ran
    workload = wait_for(lambda: _cond(_workload_if_any(custom, namespace, created), "QuotaReserved"))
    assert workload["status"] == "False" and workload["reason"] == "Pending"
    assert "couldn't assign flavors" in workload["message"]
    wl = _workload(custom, namespace, created)
    assert wl["spec"]["queueName"] == queue
    assert wl["metadata"]["ownerReferences"][0]["name"] == "held"
    wait_for(lambda: _cond(pw_api.jobset(namespace, "held"), "Suspended").get("status") == "True")
    assert helpers.rjob_status(pw_api.jobset(namespace, "held"), "worker")["ready"] == 0
    kube.action(namespace, "held", "admit")
    admitted = _workload(custom, namespace, created)
    assert (
        _cond(admitted, "QuotaReserved")["status"] == "True"
        and _cond(admitted, "Admitted")["status"] == "True"
    )
    assert pw_api.jobset(namespace, "held")["spec"]["suspend"] is False
    wait_for(lambda: helpers.rjob_status(pw_api.jobset(namespace, "held"), "worker").get("ready") == 2)


def test_an_admitted_jobset_suspended_by_someone_else_is_started_again(
    custom, kube, namespace, make_jobset, pw_api, queue, wait_for, helpers
):
    """kueue jobframework/reconciler.go, "7. handle job is suspended": a suspended job whose
    Workload is admitted is unsuspended ("Job admitted, unsuspending"); a JobSet with a queue is
    never left suspended under an admitted Workload (the provider would wait on it for ever)."""
    created = pw_api.create_jobset(namespace, _queued(make_jobset, "kept-running", queue))
    wait_for(
        lambda: helpers.rjob_status(pw_api.jobset(namespace, "kept-running"), "worker").get("ready") == 2
    )
    custom.patch_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "kept-running", {"spec": {"suspend": True}}
    )
    wait_for(lambda: pw_api.jobset(namespace, "kept-running")["spec"]["suspend"] is False)
    assert _cond(_workload(custom, namespace, created), "Admitted")["status"] == "True"


def test_pathwaysjob_labels_reach_the_jobset(custom, namespace, make_pathways_job, pw_api, queue, wait_for):
    """pathwaysjob_controller.go copies the PathwaysJob's labels to its JobSet, so Kueue queues it."""
    body = make_pathways_job(
        "pwq", labels={QUEUE: queue}, annotations={KNOB + "kueue-admit-after-seconds": "0.3"}
    )
    pw_api.create(namespace, body)
    jobset = wait_for(lambda: pw_api.jobset(namespace, "pwq"))
    assert jobset["metadata"]["labels"][QUEUE] == queue
    wait_for(lambda: _cond(_workload_if_any(custom, namespace, jobset), "Admitted").get("status") == "True")
    assert "wait time since queued" in _cond(_workload(custom, namespace, jobset), "QuotaReserved")["message"]


def test_quota_holds_the_second_job_until_the_first_finishes(
    custom, kube, namespace, make_jobset, pw_api, queue, wait_for
):
    """A ClusterQueue's quota: the second Workload waits until the first is Finished."""
    kube.control("kueue", method="POST", queue=queue, quota_chips=8)  # one JobSet: 2 slices x 4 chips
    first = pw_api.create_jobset(namespace, _queued(make_jobset, "first", queue, program_seconds="0.5"))
    second = pw_api.create_jobset(namespace, _queued(make_jobset, "second", queue, program_seconds="0.2"))
    wait_for(lambda: _cond(_workload_if_any(custom, namespace, first), "Admitted").get("status") == "True")
    pending = wait_for(lambda: _cond(_workload_if_any(custom, namespace, second), "QuotaReserved"))
    assert pending["status"] == "False" and "insufficient unused quota" in pending["message"]
    assert pw_api.jobset(namespace, "second")["spec"]["suspend"] is True
    finished = lambda: _cond(_workload_if_any(custom, namespace, first), "Finished")  # noqa: E731
    wait_for(lambda: finished().get("status") == "True", timeout=15)
    assert _cond(_workload(custom, namespace, first), "Finished")["reason"] == "Succeeded"
    wait_for(lambda: _cond(_workload_if_any(custom, namespace, second), "Admitted").get("status") == "True")


def test_higher_priority_preempts_within_the_queue(
    custom, kube, namespace, make_jobset, pw_api, queue, wait_for
):
    """kueue workload_types.go: Evicted reason Preempted with Preempted reason InClusterQueue."""
    kube.control("kueue", method="POST", queue=queue, quota_chips=8)
    low = _queued(make_jobset, "low", queue, program_seconds="60")
    low["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "low"
    low = pw_api.create_jobset(namespace, low)
    wait_for(lambda: _cond(_workload_if_any(custom, namespace, low), "Admitted").get("status") == "True")
    high = _queued(make_jobset, "high", queue, program_seconds="60")
    high["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high"
    high = pw_api.create_jobset(namespace, high)
    wait_for(lambda: _cond(_workload_if_any(custom, namespace, high), "Admitted").get("status") == "True")
    evicted = _workload(custom, namespace, low)
    assert (_cond(evicted, "Evicted")["status"], _cond(evicted, "Evicted")["reason"]) == ("True", "Preempted")
    assert _cond(evicted, "Preempted")["reason"] == "InClusterQueue"
    assert _cond(evicted, "QuotaReserved")["status"] == "False"
    assert pw_api.jobset(namespace, "low")["spec"]["suspend"] is True


@pytest.mark.parametrize(
    ("reason", "evicted_reason"),
    [
        ("PodsReadyTimeout", "PodsReadyTimeout"),
        ("NodeFailures", "NodeFailures"),
        ("RequeuingLimitExceeded", "DeactivatedDueToRequeuingLimitExceeded"),
    ],
)
def test_evictions_with_the_real_reasons(
    custom, kube, namespace, make_jobset, pw_api, queue, wait_for, reason, evicted_reason
):
    """kueue workload_types.go: WorkloadEvictedByPodsReadyTimeout, ...DueToNodeFailures, requeuing limit."""
    jobset = pw_api.create_jobset(namespace, _queued(make_jobset, "ev", queue, program_seconds="60"))
    wait_for(lambda: _cond(_workload_if_any(custom, namespace, jobset), "Admitted").get("status") == "True")
    kube.action(namespace, "ev", "evict", reason=reason)
    workload = _workload(custom, namespace, jobset)
    assert (_cond(workload, "Evicted")["status"], _cond(workload, "Evicted")["reason"]) == (
        "True",
        evicted_reason,
    )
    if reason == "RequeuingLimitExceeded":
        assert workload["spec"]["active"] is False
        assert _cond(workload, "Requeued")["status"] == "False"
        assert pw_api.jobset(namespace, "ev")["spec"]["suspend"] is True
    else:  # requeued (after its backoff for a PodsReadyTimeout); admitted again once the queue takes it
        requeued = _cond(workload, "Requeued")
        if reason == "PodsReadyTimeout":  # jobframework/reconciler.go: Requeued False until requeueAt
            assert (requeued["status"], requeued["reason"]) == ("False", "PodsReadyTimeout")
            assert workload["status"]["requeueState"]["count"] == 1
        else:
            assert requeued["status"] == "True"
        kube.action(namespace, "ev", "admit")
        workload = _workload(custom, namespace, jobset)
        assert (
            _cond(workload, "Admitted")["status"] == "True"
            and _cond(workload, "Evicted")["status"] == "False"
        )
