"""The stand-in's Kueue runs ``waitForPodsReady`` as Kueue 0.19 does by default: ``PodsReady`` on the
Workload, eviction for ``PodsReadyTimeout``, requeuing with backoff, deactivation at the limit.

Each rule names the upstream file it comes from (kubernetes-sigs/kueue)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from sandbox.kube.controllers.kueue import (
    BACKOFF_BASE,
    BACKOFF_LIMIT,
    BACKOFF_MAX,
    PODS_READY_TIMEOUT,
    WaitForPodsReady,
)
from tests.sandbox.kube.conftest import KNOB
from tests.sandbox.kube.test_kube_kueue import QUEUE, _cond, _workload, _workload_if_any


def test_the_defaults_are_kueue_0_19s() -> None:
    """kueue apis/config/v1beta2/defaults.go: waitForPodsReady is on with DefaultWaitForPodsReadyTimeout
    (30 min), requeuingStrategy.backoffBaseSeconds DefaultRequeuingBackoffBaseSeconds (60),
    backoffMaxSeconds DefaultRequeuingBackoffMaxSeconds (3600), backoffLimitCount unset (requeued
    for ever). pkg/workload/workload.go UpdateRequeueState: the n-th requeue waits base * 2^(n-1),
    at most the max."""
    settings = WaitForPodsReady()
    assert (settings.timeout, settings.backoff_base, settings.backoff_max) == (1800, 60, 3600)
    assert settings.backoff_limit is None
    assert [settings.backoff(n) for n in (1, 2, 3, 6, 7, 20)] == [60, 120, 240, 1920, 3600, 3600]
    assert WaitForPodsReady.of({"metadata": {}}) == settings
    knobs = {PODS_READY_TIMEOUT: "2.5", BACKOFF_BASE: "1", BACKOFF_MAX: "3", BACKOFF_LIMIT: "4"}
    tuned = WaitForPodsReady.of({"metadata": {"annotations": knobs}})
    assert (tuned.timeout, tuned.backoff_base, tuned.backoff_max, tuned.backoff_limit) == (2.5, 1, 3, 4)
    assert WaitForPodsReady.of({"metadata": {"annotations": {PODS_READY_TIMEOUT: "soon"}}}) == settings


def _never_ready(make_jobset: Any, name: str, queue: str, **knobs: str) -> dict[str, Any]:
    """A queued JobSet whose worker pods never become ready (``max-ready-slices: 0`` keeps them
    Pending, unschedulable), with short waitForPodsReady settings."""
    values = {"max-ready-slices": "0", **{k.replace("_", "-"): v for k, v in knobs.items()}}
    body = make_jobset(name, annotations={KNOB + k: v for k, v in values.items()})
    body["metadata"]["labels"] = {QUEUE: queue}
    return body


def _evictions(workload: dict[str, Any]) -> dict[tuple[str, str], int]:
    stats = ((workload.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
    return {(e["reason"], e["underlyingCause"]): e["count"] for e in stats}


def _stamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def test_a_workload_whose_pods_are_ready_has_started(custom, namespace, make_jobset, pw_api, wait_for):
    """jobframework/reconciler.go generatePodsReadyCondition: False WaitForStart until
    kueue_jobset_integration.go PodsReady (every replicated job's Jobs ready), then True Started."""
    body = make_jobset("starts", annotations={KNOB + "program-seconds": "30"})
    body["metadata"]["labels"] = {QUEUE: f"q-{namespace}"}
    jobset = pw_api.create_jobset(namespace, body)
    pods_ready = lambda: _cond(_workload_if_any(custom, namespace, jobset), "PodsReady")  # noqa: E731
    started = wait_for(lambda: (c := pods_ready()).get("reason") == "Started" and c)
    assert started["status"] == "True"
    assert started["message"] == "All pods reached readiness and the workload is running"
    workload = _workload(custom, namespace, jobset)
    assert "requeueState" not in workload["status"] and _cond(workload, "Evicted") == {}


def test_pods_never_ready_are_evicted_requeued_with_backoff_and_admitted_again(
    custom, namespace, make_jobset, pw_api, wait_for
):
    """kueue core/workload_controller.go: an admitted Workload whose PodsReady stays False
    (WaitForStart) past the timeout is evicted, reason PodsReadyTimeout (workload_types.go
    WorkloadEvictedByPodsReadyTimeout), message "Exceeded the PodsReady timeout <ns>/<workload>";
    workload.go UpdateRequeueState counts the requeue and sets requeueAt; jobframework/reconciler.go
    suspends the JobSet and sets Requeued False; at requeueAt Requeued is True BackoffFinished and
    requeueAt cleared; it is admitted again and times out again, counted in schedulingStats."""
    queue = f"q-{namespace}"
    jobset = pw_api.create_jobset(
        namespace,
        _never_ready(
            make_jobset,
            "slow",
            queue,
            kueue_pods_ready_timeout_seconds="1",
            kueue_backoff_base_seconds="0.5",
            kueue_backoff_max_seconds="10",
        ),
    )
    waiting = wait_for(lambda: (c := _cond(_workload_if_any(custom, namespace, jobset), "PodsReady")) and c)
    assert (waiting["status"], waiting["reason"]) == ("False", "WaitForStart")
    assert waiting["message"] == "Not all pods are ready or succeeded"
    wait_for(lambda: _cond(_workload_if_any(custom, namespace, jobset), "Admitted").get("status") == "True")
    evicted = wait_for(
        lambda: (
            (w := _workload(custom, namespace, jobset)) and _cond(w, "Evicted").get("status") == "True" and w
        ),
        what="the PodsReadyTimeout eviction",
    )
    name = evicted["metadata"]["name"]
    condition = _cond(evicted, "Evicted")
    assert condition["reason"] == "PodsReadyTimeout"
    assert condition["message"] == f"Exceeded the PodsReady timeout {namespace}/{name}"
    requeued = _cond(evicted, "Requeued")
    assert (requeued["status"], requeued["reason"]) == ("False", "PodsReadyTimeout")
    assert _cond(evicted, "Admitted")["status"] == "False"
    state = evicted["status"]["requeueState"]
    assert state["count"] == 1
    backoff = _stamp(state["requeueAt"]) - _stamp(condition["lastTransitionTime"])
    assert 0 <= backoff <= 1  # base 0.5 s; timestamps have second precision
    assert _evictions(evicted) == {("PodsReadyTimeout", "WaitForStart"): 1}
    wait_for(lambda: pw_api.jobset(namespace, "slow")["spec"]["suspend"] is True)
    # the backoff ends: back in the queue and admitted again ...
    readmitted = wait_for(
        lambda: (
            (w := _workload(custom, namespace, jobset))
            and _cond(w, "Requeued").get("reason") == "BackoffFinished"
            and w
        ),
        what="the end of the backoff",
    )
    assert _cond(readmitted, "Requeued")["status"] == "True"
    assert _cond(readmitted, "Requeued")["message"] == "The workload backoff was finished"
    assert readmitted["status"]["requeueState"] == {"count": 1}  # requeueAt cleared
    # ... and evicted again, its backoff doubled
    again = wait_for(
        lambda: (
            (w := _workload(custom, namespace, jobset))
            and int((w["status"].get("requeueState") or {}).get("count", 0)) == 2
            and w
        ),
        what="the second PodsReadyTimeout eviction",
    )
    assert _evictions(again) == {("PodsReadyTimeout", "WaitForStart"): 2}
    assert _cond(again, "Evicted")["reason"] == "PodsReadyTimeout"
    assert _cond(again, "PodsReady")["reason"] == "WaitForStart"  # never ready since its creation
    backoff = _stamp(again["status"]["requeueState"]["requeueAt"]) - _stamp(
        _cond(again, "Evicted")["lastTransitionTime"]
    )
    assert 0 <= backoff <= 2


def test_the_requeuing_limit_deactivates_the_workload(custom, namespace, make_jobset, pw_api, wait_for):
    """kueue core/workload_controller.go triggerDeactivation: the timeout that would exceed
    backoffLimitCount deactivates the Workload instead (spec.active false, Evicted
    DeactivatedDueToRequeuingLimitExceeded, requeueState cleared; workload_types.go
    WorkloadRequeuingLimitExceeded); schedulingStats keeps every eviction."""
    jobset = pw_api.create_jobset(
        namespace,
        _never_ready(
            make_jobset,
            "gives-up",
            f"q-{namespace}",
            kueue_pods_ready_timeout_seconds="0.4",
            kueue_backoff_base_seconds="0.2",
            kueue_backoff_limit_count="1",
        ),
    )
    final = wait_for(
        lambda: (w := _workload(custom, namespace, jobset)) and w["spec"].get("active") is False and w,
        timeout=15,
        what="the deactivation",
    )
    evicted = _cond(final, "Evicted")
    assert (evicted["status"], evicted["reason"]) == ("True", "DeactivatedDueToRequeuingLimitExceeded")
    assert "exceeding the maximum number of re-queuing retries" in evicted["message"]
    assert _cond(final, "Requeued")["status"] == "False"
    assert "requeueState" not in final["status"]
    assert _evictions(final) == {
        ("PodsReadyTimeout", "WaitForStart"): 1,
        ("Deactivated", "RequeuingLimitExceeded"): 1,
    }
    wait_for(lambda: pw_api.jobset(namespace, "gives-up")["spec"]["suspend"] is True)


@pytest.mark.parametrize("readmit", ["never", "auto"])
def test_the_evict_action_for_pods_ready_timeout_counts_a_requeue(
    custom, kube, namespace, make_jobset, pw_api, wait_for, readmit
):
    """The ``evict`` action takes the same path: a running Workload (PodsReady was True) is counted
    under the cause WaitForRecovery (workload_types.go WorkloadWaitForRecovery: it had started);
    ``admit`` ends its backoff at once."""
    body = make_jobset("ran", annotations={KNOB + "program-seconds": "30"})
    body["metadata"]["labels"] = {QUEUE: f"q-{namespace}"}
    jobset = pw_api.create_jobset(namespace, body)
    pods_ready = lambda: _cond(_workload_if_any(custom, namespace, jobset), "PodsReady")  # noqa: E731
    wait_for(lambda: pods_ready().get("reason") == "Started")
    kube.action(namespace, "ran", "evict", reason="PodsReadyTimeout", readmit=readmit)
    workload = _workload(custom, namespace, jobset)
    assert _evictions(workload) == {("PodsReadyTimeout", "WaitForRecovery"): 1}
    assert workload["status"]["requeueState"]["count"] == 1
    kube.action(namespace, "ran", "admit")
    workload = _workload(custom, namespace, jobset)
    assert _cond(workload, "Admitted")["status"] == "True"
    assert _cond(workload, "Requeued")["reason"] == "BackoffFinished"
    assert "requeueAt" not in workload["status"]["requeueState"]
