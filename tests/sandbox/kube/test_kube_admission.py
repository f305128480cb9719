"""The stand-in validates what it stores as a real cluster does: Kubernetes' object validation, the
JobSet webhook's create-time rules, and the PathwaysJob controller's reaction to a refused JobSet."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiException

from tests.sandbox.kube.conftest import JS_GROUP, JS_PLURAL, JS_VERSION, PW_GROUP, PW_PLURAL, PW_VERSION

WEBHOOK = 'admission webhook "vjobset.kb.io" denied the request: '


def _create_jobset(custom: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return custom.create_namespaced_custom_object(JS_GROUP, JS_VERSION, namespace, JS_PLURAL, body)


def _refused(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as excinfo:
        call()
    assert excinfo.value.status == 422, excinfo.value.body
    return json.loads(excinfo.value.body)


def test_jobset_name_of_22_is_admitted_and_23_is_refused(custom, namespace, make_jobset) -> None:
    """jobset_webhook.go validateCoordinatorLabelValue: '<name>-pathways-head-0-0.<name>' <= 63."""
    _create_jobset(custom, namespace, make_jobset("a" * 22))
    status = _refused(lambda: _create_jobset(custom, namespace, make_jobset("b" * 23)))
    assert status["message"].startswith(WEBHOOK + 'JobSet.jobset.x-k8s.io "' + "b" * 23 + '" is invalid: ')
    assert 'for coordinator label "jobset.sigs.k8s.io/coordinator"' in status["message"]
    assert "must be no more than 63 characters" in status["message"]


def test_short_subdomain_frees_the_name_up_to_the_job_names(custom, namespace, make_jobset) -> None:
    """jobset_webhook.go: with spec.network.subdomain the coordinator fits, Job/pod names still bind."""
    ok = make_jobset("c" * 36)
    ok["spec"]["network"]["subdomain"] = "pw"
    _create_jobset(custom, namespace, ok)
    too_long = make_jobset("d" * 47, num_slices=10)
    too_long["spec"]["network"]["subdomain"] = "pw"
    status = _refused(lambda: _create_jobset(custom, namespace, too_long))
    assert (
        "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"
        in (status["message"])
    )


def test_replicas_times_parallelism_above_maxint32_is_refused(custom, namespace, make_jobset) -> None:
    """jobset_webhook.go ValidateCreate: replicas x parallelism <= MaxInt32."""
    body = make_jobset("big", num_slices=1_000_000_000, vms=4)
    status = _refused(lambda: _create_jobset(custom, namespace, body))
    assert (
        "the product of replicas and parallelism must not exceed 2147483647 for replicatedJob 'worker'"
        in (status["message"])
    )


def test_webhook_checks_coordinator_and_policies(custom, namespace, make_jobset) -> None:
    """jobset_webhook.go: coordinator target, success policy targets, failure rule names and reasons."""
    body = make_jobset("policies")
    body["spec"]["coordinator"] = {"replicatedJob": "nope"}
    body["spec"]["successPolicy"]["targetReplicatedJobs"] = ["missing"]
    body["spec"]["failurePolicy"]["rules"] = [
        {"action": "FailJobSet", "onJobFailureReasons": ["OOMKilled"]},
        {"name": "9bad", "action": "FailJobSet"},
    ]
    message = _refused(lambda: _create_jobset(custom, namespace, body))["message"]
    assert "coordinator replicatedJob nope does not exist" in message
    assert "invalid replicatedJob name 'missing' does not appear in .spec.ReplicatedJobs" in message
    assert "invalid job failure reason 'OOMKilled'" in message
    assert "invalid failure policy rule name '9bad'" in message


@pytest.mark.parametrize(
    ("change", "field", "text"),
    [
        (lambda md: md.setdefault("labels", {}).update(team="x" * 64), "metadata.labels", "no more than 63"),
        (lambda md: md.setdefault("labels", {}).update(team="a b"), "metadata.labels", "a valid label"),
        (lambda md: md.setdefault("labels", {}).update({"bad key/x/y": "v"}), "metadata.labels", "prefix"),
        (
            lambda md: md.setdefault("annotations", {}).update(big="x" * (256 * 1024)),
            "metadata.annotations",
            "Too long",
        ),
        (lambda md: md.update(name="Upper"), "metadata.name", "RFC 1123 subdomain"),
    ],
)
def test_object_metadata_is_validated(custom, namespace, make_pathways_job, change, field, text) -> None:
    """apimachinery ValidateObjectMeta: names, label keys and values, annotation size (256 KiB)."""
    body = make_pathways_job("meta")
    change(body["metadata"])
    status = _refused(
        lambda: custom.create_namespaced_custom_object(PW_GROUP, PW_VERSION, namespace, PW_PLURAL, body)
    )
    causes = status["details"]["causes"]
    assert any(c["field"] == field and text in c["message"] for c in causes), causes


def test_long_pathwaysjob_name_fails_in_a_retry_loop(
    kube, pw_api, namespace, make_pathways_job, wait_for
) -> None:
    """pathwaysjob_controller.go Reconcile: a JobSet-create error (here the JobSet webhook refusing a
    23-character name, jobset_webhook.go) -> terminalState Failed, no conditions, create retried."""
    name = "start-pathways-29babb0b"
    pw_api.create(namespace, make_pathways_job(name))  # the PathwaysJob itself has no webhook
    failed = wait_for(
        lambda: (pw_api.get(namespace, name).get("status") or {}).get("terminalState") == "Failed"
    )
    assert failed
    status = pw_api.get(namespace, name)["status"]
    assert "conditions" not in status
    assert pw_api.jobset(namespace, name) is None
    key = f"{namespace}/{name}"
    wait_for(lambda: kube.control("state")["jobsetCreateFailures"].get(key, 0) >= 3, what="create retries")


def test_generated_pods_carry_a_valid_coordinator_label(
    core, pw_api, namespace, make_pathways_job, wait_for
) -> None:
    """jobset_controller.go labelAndAnnotateObject: the coordinator label on every pod."""
    name = "a" * 22
    pw_api.create(namespace, make_pathways_job(name))
    pods = wait_for(lambda: core.list_namespaced_pod(namespace).items)
    value = pods[0].metadata.labels["jobset.sigs.k8s.io/coordinator"]
    assert value == f"{name}-pathways-head-0-0.{name}" and len(value) == 63
