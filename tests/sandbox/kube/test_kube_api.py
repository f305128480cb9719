"""The stand-in's API surface through the official ``kubernetes`` client: auth, CRUD, errors, selectors."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import client as k8s

PW = ("pathways-job.pathways.domain", "v1")
JS = ("jobset.x-k8s.io", "v1alpha2")


def _raw(url: str, token: str | None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _error(err: k8s.ApiException) -> dict[str, Any]:
    return json.loads(err.body)


def test_auth_required_and_token_not_echoed(kube):
    for token in (None, "wrong-token", kube.token + "x"):
        code, body = _raw(f"{kube.url}/apis/{PW[0]}/{PW[1]}/namespaces/default/pathwaysjobs", token)
        assert code == 401
        assert body["kind"] == "Status" and body["reason"] == "Unauthorized" and body["code"] == 401
        assert kube.token not in json.dumps(body)
        if token:
            assert token not in json.dumps(body)
    code, body = _raw(f"{kube.url}/version", kube.token)
    assert code == 200 and body["major"] == "1"


def test_discovery(api_client, kube):
    assert k8s.VersionApi(api_client).get_code().git_version.startswith("v1.")
    groups = {g.name for g in k8s.ApisApi(api_client).get_api_versions().groups}
    assert {"batch", "jobset.x-k8s.io", "pathways-job.pathways.domain", "kueue.x-k8s.io"} <= groups
    _, resources = _raw(f"{kube.url}/apis/{PW[0]}/{PW[1]}", kube.token)
    assert {"pathwaysjobs", "pathwaysjobs/status"} <= {r["name"] for r in resources["resources"]}


def test_create_get_list_and_server_fields(custom, namespace, make_pathways_job):
    manifest = make_pathways_job(
        "crud", headless=True, annotations={"sandbox.pathways.dev/max-ready-slices": "0"}
    )
    manifest["status"] = {"terminalState": "Completed"}  # ignored: status only changes through /status
    created, code, _ = custom.create_namespaced_custom_object_with_http_info(
        *PW, namespace, "pathwaysjobs", manifest
    )
    assert code == 201
    md = created["metadata"]
    assert md["uid"] and md["creationTimestamp"] and md["generation"] == 1 and md["namespace"] == namespace
    assert isinstance(md["resourceVersion"], str) and int(md["resourceVersion"]) > 0
    assert "status" not in created or created["status"].get("terminalState") != "Completed"
    # Schema defaults are applied.
    assert created["spec"]["workers"][0]["maxSliceRestarts"] == 1
    fetched = custom.get_namespaced_custom_object(*PW, namespace, "pathwaysjobs", "crud")
    assert fetched["metadata"]["uid"] == md["uid"]
    listing = custom.list_namespaced_custom_object(*PW, namespace, "pathwaysjobs")
    assert [i["metadata"]["name"] for i in listing["items"]] == ["crud"]
    assert int(listing["metadata"]["resourceVersion"]) >= int(md["resourceVersion"])
    everywhere = custom.list_cluster_custom_object(*PW, "pathwaysjobs")
    assert any(i["metadata"]["namespace"] == namespace for i in everywhere["items"])


def test_already_exists_and_not_found(custom, namespace, make_pathways_job):
    manifest = make_pathways_job("dup", headless=True)
    custom.create_namespaced_custom_object(*PW, namespace, "pathwaysjobs", manifest)
    with pytest.raises(k8s.ApiException) as exc:
        custom.create_namespaced_custom_object(*PW, namespace, "pathwaysjobs", manifest)
    assert exc.value.status == 409
    body = _error(exc.value)
    assert body["kind"] == "Status" and body["reason"] == "AlreadyExists" and body["details"]["name"] == "dup"
    with pytest.raises(k8s.ApiException) as exc:
        custom.get_namespaced_custom_object(*PW, namespace, "pathwaysjobs", "missing")
    assert exc.value.status == 404
    body = _error(exc.value)
    assert body["reason"] == "NotFound"
    assert body["message"] == 'pathwaysjobs.pathways-job.pathways.domain "missing" not found'


@pytest.mark.parametrize(
    ("mutate", "field", "text"),
    [
        (
            lambda m: m["spec"]["workers"][0].update(type="ct9-bogus-4t"),
            "spec.workers[0].type",
            "Unsupported value",
        ),
        (lambda m: m["spec"].pop("controller"), "spec.controller", "Required value"),
        (lambda m: m["spec"].update(maxRestarts="three"), "spec.maxRestarts", "must be of type integer"),
        (lambda m: m["spec"]["workers"].append(dict(m["spec"]["workers"][0])), "spec.workers", "Too many: 2"),
        (
            lambda m: m["spec"]["controller"].update(deploymentMode="fancy"),
            "spec.controller.deploymentMode",
            "fancy",
        ),
    ],
)
def test_schema_rejection_names_the_field(custom, namespace, make_pathways_job, mutate, field, text):
    manifest = make_pathways_job("bad", headless=True)
    mutate(manifest)
    with pytest.raises(k8s.ApiException) as exc:
        custom.create_namespaced_custom_object(*PW, namespace, "pathwaysjobs", manifest)
    assert exc.value.status == 422
    body = _error(exc.value)
    assert body["reason"] == "Invalid" and body["details"]["kind"] == "PathwaysJob"
    assert f"{field}: " in body["message"] and text in body["message"]
    assert body["message"].startswith('PathwaysJob.pathways-job.pathways.domain "bad" is invalid: ')
    assert field in [c["field"] for c in body["details"]["causes"]]


def test_invalid_name_and_unknown_fields(custom, namespace, make_pathways_job):
    with pytest.raises(k8s.ApiException) as exc:
        custom.create_namespaced_custom_object(*PW, namespace, "pathwaysjobs", make_pathways_job("Bad_Name"))
    assert exc.value.status == 422 and "metadata.name" in _error(exc.value)["message"]
    manifest = make_pathways_job("pruned", headless=True)
    manifest["spec"]["notAField"] = True
    created = custom.create_namespaced_custom_object(*PW, namespace, "pathwaysjobs", manifest)
    assert "notAField" not in created["spec"]


def test_update_patch_immutability_and_conflict(custom, namespace, make_pathways_job):
    created = custom.create_namespaced_custom_object(
        *PW, namespace, "pathwaysjobs", make_pathways_job("upd", headless=True)
    )
    # Merge patch of metadata: no generation bump.
    patched = custom.patch_namespaced_custom_object(
        *PW, namespace, "pathwaysjobs", "upd", {"metadata": {"labels": {"team": "a"}}}
    )
    assert patched["metadata"]["labels"] == {"team": "a"} and patched["metadata"]["generation"] == 1
    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    # Replace with a mutable spec change: generation bump; status in the body is ignored. The
    # controller writes status concurrently, so retry on 409 as clients do.
    for _ in range(20):
        body = custom.get_namespaced_custom_object(*PW, namespace, "pathwaysjobs", "upd")
        body["spec"]["controller"]["elasticSlices"] = 1
        body["status"] = {"terminalState": "Failed"}
        try:
            replaced = custom.replace_namespaced_custom_object(*PW, namespace, "pathwaysjobs", "upd", body)
            break
        except k8s.ApiException as err:
            assert err.status == 409
    assert replaced["metadata"]["generation"] == 2
    assert (replaced.get("status") or {}).get("terminalState") != "Failed"
    # Immutable fields (x-kubernetes-validations self == oldSelf).
    with pytest.raises(k8s.ApiException) as exc:
        custom.patch_namespaced_custom_object(
            *PW, namespace, "pathwaysjobs", "upd", {"spec": {"maxRestarts": 5}}
        )
    assert exc.value.status == 422 and "spec.maxRestarts" in _error(exc.value)["message"]
    assert "maxRestarts is immutable" in _error(exc.value)["message"]
    # Stale resourceVersion: 409 Conflict; no resourceVersion at all: 422 (custom resources).
    body["metadata"]["resourceVersion"] = str(int(replaced["metadata"]["resourceVersion"]) - 1)
    with pytest.raises(k8s.ApiException) as exc:
        custom.replace_namespaced_custom_object(*PW, namespace, "pathwaysjobs", "upd", body)
    assert exc.value.status == 409 and _error(exc.value)["reason"] == "Conflict"
    del body["metadata"]["resourceVersion"]
    with pytest.raises(k8s.ApiException) as exc:
        custom.replace_namespaced_custom_object(*PW, namespace, "pathwaysjobs", "upd", body)
    assert exc.value.status == 422 and "metadata.resourceVersion" in _error(exc.value)["message"]
    # JSON patch.
    ops = [{"op": "add", "path": "/metadata/annotations/note", "value": "x"}]
    jp = custom.patch_namespaced_custom_object(
        *PW, namespace, "pathwaysjobs", "upd", ops, _content_type="application/json-patch+json"
    )
    assert jp["metadata"]["annotations"]["note"] == "x"


def test_status_subresource(custom, namespace, make_pathways_job):
    custom.create_namespaced_custom_object(
        *PW,
        namespace,
        "pathwaysjobs",
        make_pathways_job("st", headless=True, annotations={"sandbox.pathways.dev/max-ready-slices": "0"}),
    )
    current = custom.get_namespaced_custom_object(*PW, namespace, "pathwaysjobs", "st")
    patched = custom.patch_namespaced_custom_object_status(
        *PW,
        namespace,
        "pathwaysjobs",
        "st",
        {"status": {"terminalState": "Completed"}, "spec": {"maxRestarts": 9}},
    )
    assert patched["status"]["terminalState"] == "Completed"
    assert patched["spec"]["maxRestarts"] == current["spec"]["maxRestarts"]
    assert patched["metadata"]["generation"] == current["metadata"]["generation"]
    status = custom.get_namespaced_custom_object_status(*PW, namespace, "pathwaysjobs", "st")
    assert status["status"]["terminalState"] == "Completed"
    # /status is validated against the schema too.
    bad = {"status": {"conditions": [{"type": "Running", "status": "Maybe"}]}}
    with pytest.raises(k8s.ApiException) as exc:
        custom.patch_namespaced_custom_object_status(*PW, namespace, "pathwaysjobs", "st", bad)
    assert exc.value.status == 422 and "status.conditions[0]" in _error(exc.value)["message"]


def test_label_and_field_selectors(custom, namespace, make_pathways_job):
    for name, labels in (
        ("a", {"tier": "x", "team": "red"}),
        ("b", {"tier": "y"}),
        ("c", {"tier": "z", "team": "b"}),
    ):
        custom.create_namespaced_custom_object(
            *PW, namespace, "pathwaysjobs", make_pathways_job(name, headless=True, labels=labels)
        )

    def names(**kw: Any) -> list[str]:
        items = custom.list_namespaced_custom_object(*PW, namespace, "pathwaysjobs", **kw)["items"]
        return [i["metadata"]["name"] for i in items]

    assert names(label_selector="tier=x") == ["a"]
    assert names(label_selector="tier==x") == ["a"]
    assert names(label_selector="tier!=x") == ["b", "c"]
    assert names(label_selector="tier in (x, z)") == ["a", "c"]
    assert names(label_selector="tier notin (x,z)") == ["b"]
    assert names(label_selector="team") == ["a", "c"]
    assert names(label_selector="!team") == ["b"]
    assert names(label_selector="team,tier=z") == ["c"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.name!=b") == ["a", "c"]
    assert names(field_selector=f"metadata.namespace={namespace}") == ["a", "b", "c"]
    assert names(field_selector="metadata.namespace=elsewhere") == []
    page = custom.list_namespaced_custom_object(*PW, namespace, "pathwaysjobs", limit=2)
    assert len(page["items"]) == 2 and page["metadata"]["continue"]
    rest = custom.list_namespaced_custom_object(
        *PW, namespace, "pathwaysjobs", limit=2, _continue=page["metadata"]["continue"]
    )
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c"]


def test_read_only_resources_and_events(core, batch, namespace):
    assert core.list_namespaced_pod(namespace).items == []
    assert batch.list_namespaced_job(namespace).items == []
    assert core.list_namespaced_event(namespace).items == []
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}
    with pytest.raises(k8s.ApiException) as exc:
        core.create_namespaced_pod(namespace, pod)
    assert exc.value.status == 405
    with pytest.raises(k8s.ApiException) as exc:
        core.read_namespaced_pod("nope", namespace)
    assert exc.value.status == 404 and _error(exc.value)["message"] == 'pods "nope" not found'


def test_garbage_collection_cascade(custom, core, batch, namespace, make_pathways_job, wait_for, pw_api):
    custom.create_namespaced_custom_object(
        *PW, namespace, "pathwaysjobs", make_pathways_job("gc", headless=True)
    )
    wait_for(lambda: len(core.list_namespaced_pod(namespace).items) == 1 + 2 * 2, what="all pods created")
    js = pw_api.jobset(namespace, "gc")
    owner = js["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "PathwaysJob" and owner["name"] == "gc" and owner["controller"] is True
    deleted, code, _ = custom.delete_namespaced_custom_object_with_http_info(
        *PW, namespace, "pathwaysjobs", "gc"
    )
    assert code == 200 and deleted["metadata"]["name"] == "gc"
    assert pw_api.jobset(namespace, "gc") is None
    assert batch.list_namespaced_job(namespace).items == []
    assert core.list_namespaced_pod(namespace).items == []


def test_orphan_propagation_keeps_dependents(custom, core, batch, namespace, make_jobset, wait_for):
    custom.create_namespaced_custom_object(*JS, namespace, "jobsets", make_jobset("orph", num_slices=1))
    wait_for(lambda: len(batch.list_namespaced_job(namespace).items) == 2, what="jobs created")
    custom.delete_namespaced_custom_object(*JS, namespace, "jobsets", "orph", propagation_policy="Orphan")
    jobs = batch.list_namespaced_job(namespace).items
    assert len(jobs) == 2 and all(not j.metadata.owner_references for j in jobs)
    # batch/v1 Jobs orphan their pods by default; Background deletes them.
    pods_before = len(core.list_namespaced_pod(namespace).items)
    batch.delete_namespaced_job(jobs[0].metadata.name, namespace)
    assert len(core.list_namespaced_pod(namespace).items) == pods_before
    batch.delete_namespaced_job(jobs[1].metadata.name, namespace, propagation_policy="Background")
    assert all(
        p.metadata.labels.get("job-name") != jobs[1].metadata.name
        for p in core.list_namespaced_pod(namespace).items
    )


def test_request_counters(kube, custom, namespace):
    kube.control("requests/reset")
    custom.list_namespaced_custom_object(*PW, namespace, "pathwaysjobs")
    with pytest.raises(k8s.ApiException):
        custom.get_namespaced_custom_object(*PW, namespace, "pathwaysjobs", "x")
    counts = kube.control("requests")
    assert counts["by_verb_resource"] == {"get pathwaysjobs": 1, "list pathwaysjobs": 1}
    assert counts["total"] == 2
    assert kube.control("requests/reset")["total"] == 0


def test_a_finalizer_holds_a_deleted_object_until_it_is_removed(
    custom, batch, namespace, make_jobset, wait_for
):
    """Graceful deletion: the object gets deletionTimestamp and stays while it has finalizers;
    Foreground takes its dependents first; removing the last finalizer removes it."""
    custom.create_namespaced_custom_object(*JS, namespace, "jobsets", make_jobset("held", num_slices=1))
    wait_for(lambda: len(batch.list_namespaced_job(namespace).items) == 2, what="jobs created")
    hold = {"metadata": {"finalizers": ["example.com/hold"]}}
    custom.patch_namespaced_custom_object(*JS, namespace, "jobsets", "held", hold)
    marked = custom.delete_namespaced_custom_object(
        *JS, namespace, "jobsets", "held", propagation_policy="Foreground"
    )
    stamp = marked["metadata"]["deletionTimestamp"]
    assert (
        stamp
        and custom.get_namespaced_custom_object(*JS, namespace, "jobsets", "held")["metadata"][
            "deletionTimestamp"
        ]
        == stamp
    )
    assert batch.list_namespaced_job(namespace).items == []  # and the JobSet controller leaves it alone
    again = custom.delete_namespaced_custom_object(*JS, namespace, "jobsets", "held")
    assert again["metadata"]["deletionTimestamp"] == stamp
    custom.patch_namespaced_custom_object(
        *JS, namespace, "jobsets", "held", {"metadata": {"finalizers": None}}
    )
    with pytest.raises(k8s.ApiException) as gone:
        custom.get_namespaced_custom_object(*JS, namespace, "jobsets", "held")
    assert gone.value.status == 404


def test_injected_faults_can_answer_one_verb(kube, custom, namespace):
    kube.control("faults", method="POST", status=403, count=1, verb="DELETE")
    custom.list_namespaced_custom_object(*PW, namespace, "pathwaysjobs")  # a GET is not affected
    with pytest.raises(k8s.ApiException) as refused:
        custom.delete_namespaced_custom_object(*PW, namespace, "pathwaysjobs", "x")
    assert refused.value.status == 403 and json.loads(refused.value.body)["reason"] == "Forbidden"
    with pytest.raises(k8s.ApiException) as missing:
        custom.delete_namespaced_custom_object(*PW, namespace, "pathwaysjobs", "x")
    assert missing.value.status == 404
