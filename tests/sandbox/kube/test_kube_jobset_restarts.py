"""JobSet v0.12 restarts in the stand-in: the ``RestartingJobSet`` condition, the ``RestartJob``
actions, the feature-gated webhook rules and elastic ``parallelism``. Each test names the upstream
file and function it follows (kubernetes-sigs/jobset v0.12.0)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client import ApiException

from tests.sandbox.kube.conftest import JS_GROUP, JS_PLURAL, JS_VERSION

JS = (JS_GROUP, JS_VERSION)
KNOB = "sandbox.pathways.dev/"
LONG = {f"{KNOB}program-seconds": "30"}
GATES = f"{KNOB}jobset-feature-gates"
WEBHOOK = 'admission webhook "vjobset.kb.io" denied the request: '
JSON_PATCH = "application/json-patch+json"


def _condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def _true(obj: dict[str, Any] | None, type_: str) -> bool:
    return (_condition(obj, type_) or {}).get("status") == "True"


def _rjob(obj: dict[str, Any] | None, name: str) -> dict[str, Any]:
    for entry in ((obj or {}).get("status") or {}).get("replicatedJobsStatus") or []:
        if entry.get("name") == name:
            return entry
    return {}


def _when(value: Any, predicate: Callable[[Any], Any]) -> Any:
    return value if value is not None and predicate(value) else None


def _all_ready(jobset: dict[str, Any] | None, slices: int = 2) -> bool:
    return _rjob(jobset, "pathways-head").get("ready") == 1 and _rjob(jobset, "worker").get("ready") == slices


def _history(custom: Any, namespace: str, name: str, since: str, until: Callable[[dict], bool]) -> list[dict]:
    """Every state the JobSet went through after resourceVersion ``since`` up to the first one
    ``until`` accepts (a watch replays them all, however late it starts)."""
    states: list[dict] = []
    stream = watch.Watch()
    for event in stream.stream(
        custom.list_namespaced_custom_object,
        *JS,
        namespace,
        JS_PLURAL,
        field_selector=f"metadata.name={name}",
        resource_version=since,
        timeout_seconds=20,
    ):
        states.append(event["object"])
        if until(event["object"]):
            stream.stop()
    assert states and until(states[-1]), f"the watch ended before the expected state; last {states[-1:]}"
    return states


def _events(core: Any, namespace: str, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the events about ``name``, oldest first."""
    items = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    items.sort(key=lambda e: int(e.metadata.resource_version))
    return [(e.type, e.reason, e.message) for e in items]


def _create(custom: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return custom.create_namespaced_custom_object(*JS, namespace, JS_PLURAL, body)


def _refused(call: Callable[[], Any]) -> dict[str, Any]:
    with pytest.raises(ApiException) as excinfo:
        call()
    assert excinfo.value.status == 422, excinfo.value.body
    return json.loads(excinfo.value.body)


def _jobset(
    make_jobset: Any, name: str, *, gates: str = "", rules: list[dict] | None = None, **kw: Any
) -> dict:
    annotations = dict(LONG, **({GATES: gates} if gates else {}))
    body = make_jobset(name, annotations={**annotations, **kw.pop("annotations", {})}, **kw)
    if rules is not None:
        body["spec"]["failurePolicy"]["rules"] = rules
    return body


# ---------------------------------------------------------------------------- RestartingJobSet


def test_a_restart_sets_restarting_until_every_job_is_ready_again(
    kube, custom, core, pw_api, namespace, make_pathways_job, wait_for
) -> None:
    """failure_policy.go restartJobSetActionApplier: Restarting True, reason DefaultFailurePolicy
    (no rule matched), message as the action's event, in the write that bumps restarts (whose
    replicatedJobsStatus still counts the failed Job: calculateReplicatedJobStatuses runs first);
    jobset_controller.go reconcile: False JobsReady "all jobs are ready" once allJobsReady;
    setJobSetFailedCondition: False JobSetFailed "jobset failed", updateCondition keeping the
    lastTransitionTime when only the reason and message change."""
    created = pw_api.create(namespace, make_pathways_job("rs", max_restarts=1, annotations=LONG))
    since = created["metadata"]["resourceVersion"]
    wait_for(lambda: _all_ready(pw_api.jobset(namespace, "rs")), what="first start")
    assert _condition(pw_api.jobset(namespace, "rs"), "RestartingJobSet") is None  # never restarted yet
    kube.action(namespace, "rs", "preempt-slice", slice=1)
    states = _history(
        custom,
        namespace,
        "rs",
        since,
        lambda js: (_condition(js, "RestartingJobSet") or {}).get("status") == "False",
    )
    first = next(js for js in states if (js.get("status") or {}).get("restarts") == 1)
    restarting = _condition(first, "RestartingJobSet")
    message = "applying RestartJobSet failure policy action (first failed job: rs-worker-1)"
    assert restarting is not None
    assert (restarting["status"], restarting["reason"], restarting["message"]) == (
        "True",
        "DefaultFailurePolicy",
        message,
    )
    assert first["status"]["conditions"][-1]["type"] == "RestartingJobSet"  # appended: a new type
    assert _rjob(first, "worker")["failed"] == 1  # the counts of the attempt being replaced
    during = [js for js in states if (js.get("status") or {}).get("restarts") == 1][:-1]
    assert all(_true(js, "RestartingJobSet") and not _all_ready(js) for js in during)
    ready = states[-1]
    done = _condition(ready, "RestartingJobSet")
    assert done is not None
    assert (done["reason"], done["message"]) == ("JobsReady", "all jobs are ready") and _all_ready(ready)
    events = _events(core, namespace, "rs")
    assert ("Warning", "DefaultFailurePolicy", message) in events
    assert ("Warning", "RestartJobSetFailurePolicyAction", message) in events
    assert ("Normal", "JobsReady", "all jobs are ready") in events
    assert events.index(("Warning", "DefaultFailurePolicy", message)) < events.index(
        ("Warning", "RestartJobSetFailurePolicyAction", message)
    )
    pw = pw_api.get(namespace, "rs")
    assert pw["status"]["conditions"][-1]["type"] == "Running"  # the PathwaysJob does not mirror it

    kube.action(namespace, "rs", "fail-program", exit_code=3)
    failed = wait_for(
        lambda: _when(pw_api.jobset(namespace, "rs"), lambda js: js["status"].get("terminalState"))
    )
    assert _condition(failed, "Failed")["reason"] == "ReachedMaxRestarts"  # type: ignore[index]
    ended = _condition(failed, "RestartingJobSet")
    assert ended is not None
    assert (ended["status"], ended["reason"], ended["message"]) == ("False", "JobSetFailed", "jobset failed")
    assert ended["lastTransitionTime"] == done["lastTransitionTime"]
    assert failed["status"]["conditions"][-1]["type"] == "Failed"  # updated in place, not appended
    assert ("Normal", "JobSetFailed", "jobset failed") in _events(core, namespace, "rs")


def test_a_named_rule_gives_the_reason_and_completion_ends_the_restart(
    kube, custom, core, pw_api, namespace, make_jobset, wait_for
) -> None:
    """failure_policy.go restartJobSetAndIgnoreMaxRestartsActionApplier: reason FailurePolicy_<rule
    name>, restarts bumped but not restartsCountTowardsMax; setJobSetCompletedCondition: Restarting
    False JobSetCompleted with the completion's message."""
    rules = [
        {
            "name": "preempted",
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureReasons": ["PodFailurePolicy"],
        }
    ]
    _create(custom, namespace, _jobset(make_jobset, "named", rules=rules))
    wait_for(lambda: _all_ready(pw_api.jobset(namespace, "named")), what="first start")
    kube.action(namespace, "named", "preempt-slice", slice=0)
    jobset = wait_for(
        lambda: _when(pw_api.jobset(namespace, "named"), lambda js: js["status"].get("restarts") == 1)
    )
    restarting = _condition(jobset, "RestartingJobSet")
    assert restarting is not None and restarting["reason"] == "FailurePolicy_preempted"
    assert restarting["message"] == (
        "applying RestartJobSetAndIgnoreMaxRestarts failure policy action (first failed job: named-worker-0)"
    )
    assert "restartsCountTowardsMax" not in jobset["status"]
    wait_for(lambda: _all_ready(pw_api.jobset(namespace, "named")), what="second start")
    kube.action(namespace, "named", "complete-program")
    done = wait_for(
        lambda: _when(pw_api.jobset(namespace, "named"), lambda js: js["status"].get("terminalState"))
    )
    assert done["status"]["terminalState"] == "Completed"
    ended = _condition(done, "RestartingJobSet")
    assert ended is not None
    assert (ended["status"], ended["reason"], ended["message"]) == (
        "False",
        "JobSetCompleted",
        "jobset completed successfully",
    )
    events = _events(core, namespace, "named")
    assert (
        "Warning",
        "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction",
        restarting["message"],
    ) in events
    assert ("Normal", "JobSetCompleted", "jobset completed successfully") in events


def test_suspending_a_restarting_jobset_ends_the_restart(
    kube, custom, pw_api, namespace, make_jobset, wait_for
) -> None:
    """jobset_controller.go setJobSetSuspendedCondition: Restarting False JobSetSuspended "jobset is
    suspended"; while a Job of the new attempt never gets ready, Restarting stays True."""
    body = _jobset(make_jobset, "held", max_restarts=1, annotations={f"{KNOB}max-ready-slices": "1"})
    _create(custom, namespace, body)
    wait_for(lambda: _rjob(pw_api.jobset(namespace, "held"), "worker").get("ready") == 1, what="slice 0 up")
    kube.action(namespace, "held", "preempt-slice", slice=0)
    wait_for(
        lambda: _when(
            pw_api.jobset(namespace, "held"),
            lambda js: js["status"].get("restarts") == 1 and _rjob(js, "worker").get("ready") == 1,
        ),
        what="slice 0 up again",
    )
    assert _true(pw_api.jobset(namespace, "held"), "RestartingJobSet")  # slice 1 is never ready
    custom.patch_namespaced_custom_object(*JS, namespace, JS_PLURAL, "held", {"spec": {"suspend": True}})
    jobset = wait_for(lambda: _when(pw_api.jobset(namespace, "held"), lambda js: _true(js, "Suspended")))
    ended = _condition(jobset, "RestartingJobSet")
    assert ended is not None
    assert (ended["status"], ended["reason"], ended["message"]) == (
        "False",
        "JobSetSuspended",
        "jobset is suspended",
    )


# ---------------------------------------------------------------------------- RestartJob


def test_restart_job_recreates_only_the_failed_job(
    kube, custom, core, batch, pw_api, namespace, make_jobset, wait_for
) -> None:
    """failure_policy.go restartJobActionApplier/failurePolicyRecreateJob: jobRestarts[index] and
    jobRestartsCountTowardsMax[index] += 1, restarts unchanged, no Restarting condition, event
    RestartJobFailurePolicyAction; jobset_controller.go getChildJobs: the Job whose
    job-restart-attempt is below jobRestarts[index] is deleted and made again (labelAndAnnotateObject
    labels it with the new attempt); totalRestartsCountTowardsMax counts it against maxRestarts."""
    rules = [{"name": "slice", "action": "RestartJob", "targetReplicatedJobs": ["worker"]}]
    _create(
        custom, namespace, _jobset(make_jobset, "rj", gates="RestartJob=true", rules=rules, max_restarts=1)
    )
    wait_for(lambda: _all_ready(pw_api.jobset(namespace, "rj")), what="first start")
    before = {j.metadata.name: j for j in batch.list_namespaced_job(namespace).items}
    assert before["rj-worker-1"].metadata.labels["jobset.sigs.k8s.io/job-restart-attempt"] == "0"
    kube.action(namespace, "rj", "preempt-slice", slice=1)
    jobset = wait_for(
        lambda: _when(
            pw_api.jobset(namespace, "rj"),
            lambda js: _rjob(js, "worker").get("jobRestarts") == [0, 1] and _all_ready(js),
        ),
        what="worker 1 restarted alone and ready",
    )
    assert jobset["status"]["restarts"] == 0 and "restartsCountTowardsMax" not in jobset["status"]
    assert _rjob(jobset, "worker")["jobRestartsCountTowardsMax"] == [0, 1]
    assert "jobRestarts" not in _rjob(jobset, "pathways-head")
    assert _condition(jobset, "RestartingJobSet") is None
    after = {j.metadata.name: j for j in batch.list_namespaced_job(namespace).items}
    assert after["rj-worker-1"].metadata.uid != before["rj-worker-1"].metadata.uid
    for kept in ("rj-pathways-head-0", "rj-worker-0"):
        assert after[kept].metadata.uid == before[kept].metadata.uid
    labels = after["rj-worker-1"].metadata.labels
    assert (
        labels["jobset.sigs.k8s.io/job-restart-attempt"],
        labels["jobset.sigs.k8s.io/restart-attempt"],
    ) == (
        "1",
        "0",
    )
    message = "applying RestartJob failure policy action (first failed job: rj-worker-1)"
    assert ("Warning", "RestartJobFailurePolicyAction", message) in _events(core, namespace, "rj")

    kube.action(namespace, "rj", "preempt-slice", slice=0)
    failed = wait_for(
        lambda: _when(pw_api.jobset(namespace, "rj"), lambda js: js["status"].get("terminalState"))
    )
    reason = _condition(failed, "Failed")
    assert reason is not None and reason["reason"] == "ReachedMaxRestarts"
    assert (
        reason["message"]
        == "jobset failed due to reaching max number of restarts (first failed job: rj-worker-0)"
    )


def test_restart_job_and_ignore_max_restarts_never_uses_up_the_budget(
    kube, custom, pw_api, namespace, make_jobset, wait_for
) -> None:
    """failure_policy.go restartJobAndIgnoreMaxRestartsActionApplier: jobRestarts[index] += 1 only,
    no maxRestarts check."""
    rules = [
        {"name": "slice", "action": "RestartJobAndIgnoreMaxRestarts", "targetReplicatedJobs": ["worker"]}
    ]
    _create(custom, namespace, _jobset(make_jobset, "rji", gates="RestartJob=true", rules=rules))
    for count in (1, 2):
        wait_for(lambda: _all_ready(pw_api.jobset(namespace, "rji")), what=f"start {count}")
        kube.action(namespace, "rji", "preempt-slice", slice=0)
        wait_for(
            lambda c=count: _rjob(pw_api.jobset(namespace, "rji"), "worker").get("jobRestarts") == [c, 0],
            what=f"restart {count}",
        )
    jobset = pw_api.jobset(namespace, "rji")
    assert "jobRestartsCountTowardsMax" not in _rjob(jobset, "worker")
    assert not jobset["status"].get("terminalState") and jobset["status"]["restarts"] == 0


# ---------------------------------------------------------------------------- webhook and CRD


def test_restart_job_actions_need_their_feature_gate(custom, namespace, make_jobset) -> None:
    """jobset_webhook.go validateFailurePolicy: RestartJob actions only with the RestartJob gate
    (features.go: Alpha, off by default), then at most 1024 replicas per replicated job; the CRD's
    enum of actions."""
    rules = [{"action": "RestartJob"}]
    status = _refused(lambda: _create(custom, namespace, _jobset(make_jobset, "nogate", rules=rules)))
    assert status["message"].startswith(WEBHOOK)
    assert (
        "RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not allowed when "
        "RestartJob feature gate is disabled" in status["message"]
    )
    many = _jobset(make_jobset, "many", gates="RestartJob=true", rules=rules, num_slices=1025)
    status = _refused(lambda: _create(custom, namespace, many))
    assert "a replicated job with replicas > 1024" in status["message"]
    odd = _jobset(make_jobset, "odd", rules=[{"action": "RestartSlice"}])
    status = _refused(lambda: _create(custom, namespace, odd))
    assert not status["message"].startswith(WEBHOOK)
    assert (
        'spec.failurePolicy.rules[0].action: Unsupported value: "RestartSlice": supported values: '
        in (status["message"])
    )
    gated = _jobset(make_jobset, "gated", gates="RestartJob=true", rules=rules)
    created = _create(custom, namespace, gated)
    assert created["spec"]["failurePolicy"]["rules"][0]["name"] == "failurePolicyRule0"


def test_in_place_restart_needs_its_gate_and_job_settings(custom, namespace, make_jobset) -> None:
    """jobset_webhook.go ValidateCreate: restartStrategy InPlaceRestart only with the InPlaceRestart
    gate; with it, each replicated job needs backoffLimit MaxInt32, podReplacementPolicy Failed and
    completions equal to parallelism."""
    body = _jobset(make_jobset, "inplace")
    body["spec"]["failurePolicy"]["restartStrategy"] = "InPlaceRestart"
    status = _refused(lambda: _create(custom, namespace, body))
    assert (
        "InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled"
        in (status["message"])
    )
    body["metadata"]["annotations"][GATES] = "InPlaceRestart=true"
    causes = _refused(lambda: _create(custom, namespace, body))["details"]["causes"]
    head = "spec.replicatedJobs[0].template.spec"
    assert {
        "reason": "FieldValueInvalid",
        "field": f"{head}.backoffLimit",
        "message": (
            "Invalid value: 0: replicatedJob pathways-head: must be set to 2147483647 (MaxInt32) when "
            "in-place restart is enabled"
        ),
    } in causes
    assert {
        "reason": "FieldValueInvalid",
        "field": f"{head}.podReplacementPolicy",
        "message": (
            "Invalid value: null: replicatedJob pathways-head: must be set to Failed when in-place restart "
            "is enabled"
        ),
    } in causes
    for rjob in body["spec"]["replicatedJobs"]:
        rjob["template"]["spec"].update(backoffLimit=2**31 - 1, podReplacementPolicy="Failed")
    assert _create(custom, namespace, body)["spec"]["failurePolicy"]["restartStrategy"] == "InPlaceRestart"


# ---------------------------------------------------------------------------- elastic JobSets


def _scale(custom: Any, namespace: str, name: str, parallelism: int, completions: int | None = None) -> Any:
    ops = [
        {"op": "replace", "path": "/spec/replicatedJobs/1/template/spec/parallelism", "value": parallelism},
        {
            "op": "replace",
            "path": "/spec/replicatedJobs/1/template/spec/completions",
            "value": completions or parallelism,
        },
    ]
    return custom.patch_namespaced_custom_object(
        *JS, namespace, JS_PLURAL, name, ops, _content_type=JSON_PATCH
    )


def test_replicas_are_immutable_even_for_an_elastic_jobset(
    custom, pw_api, namespace, make_jobset, wait_for
) -> None:
    """jobset_webhook.go ValidateUpdate: spec.replicatedJobs is immutable (ValidateImmutableField)
    but for parallelism/completions with the ElasticJobSet gate; v0.12 keeps replicas immutable."""
    _create(custom, namespace, _jobset(make_jobset, "fixed", gates="ElasticJobSet=true"))
    wait_for(lambda: _all_ready(pw_api.jobset(namespace, "fixed")), what="start")
    ops = [{"op": "replace", "path": "/spec/replicatedJobs/1/replicas", "value": 3}]
    status = _refused(
        lambda: custom.patch_namespaced_custom_object(
            *JS, namespace, JS_PLURAL, "fixed", ops, _content_type=JSON_PATCH
        )
    )
    assert status["message"].startswith(WEBHOOK)
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: []v1alpha2.ReplicatedJob{...}: field is immutable",
            "field": "spec.replicatedJobs",
        }
    ]
    assert pw_api.jobset(namespace, "fixed")["spec"]["replicatedJobs"][1]["replicas"] == 2


def test_elastic_parallelism_rescales_running_jobs(
    kube, custom, core, batch, pw_api, namespace, make_jobset, wait_for
) -> None:
    """jobset_webhook.go ValidateUpdate (ElasticJobSet): parallelism and completions of an Indexed
    replicated job may change together, >= 1, never once finished; jobset_controller.go
    syncJobScaling patches the active Jobs; the Job controller runs the new indexes and removes
    those >= completions (Elastic Indexed Jobs); a Job is ready again once its pods all are
    (calculateReplicatedJobStatuses)."""
    _create(custom, namespace, _jobset(make_jobset, "el", gates="ElasticJobSet=true"))
    wait_for(lambda: _all_ready(pw_api.jobset(namespace, "el")), what="start")
    status = _refused(lambda: _scale(custom, namespace, "el", 2, 3))
    assert "completions must be equal to parallelism for Elastic Indexed Jobs" in status["message"]
    status = _refused(lambda: _scale(custom, namespace, "el", 0))
    assert (
        "spec.replicatedJobs[1].template.spec.parallelism: Invalid value: 0: parallelism must be >= 1"
        in (status["message"])
    )
    _scale(custom, namespace, "el", 2)

    def workers(count: int) -> bool:
        jobs = [batch.read_namespaced_job(f"el-worker-{i}", namespace) for i in (0, 1)]
        return all(
            j.spec.parallelism == count and j.spec.completions == count and j.status.ready == count
            for j in jobs
        )

    wait_for(lambda: workers(2) and _all_ready(pw_api.jobset(namespace, "el")), what="two pods per slice")
    assert len(core.list_namespaced_pod(namespace, label_selector="job-name=el-worker-0").items) == 2
    _scale(custom, namespace, "el", 1)
    wait_for(lambda: workers(1), what="one pod per slice again")
    wait_for(
        lambda: len(core.list_namespaced_pod(namespace, label_selector="job-name=el-worker-1").items) == 1,
        what="index 1 removed",
    )
    kube.action(namespace, "el", "complete-program")
    wait_for(lambda: _when(pw_api.jobset(namespace, "el"), lambda js: js["status"].get("terminalState")))
    status = _refused(lambda: _scale(custom, namespace, "el", 2))
    assert status["details"]["causes"][0] == {
        "reason": "FieldValueForbidden",
        "message": "Forbidden: Cannot mutate parallelism or completions when JobSet is in a terminal state "
        "(Completed or Failed)",
        "field": "spec.replicatedJobs[1].template.spec",
    }


def test_parallelism_is_immutable_without_the_elastic_gate(
    custom, pw_api, namespace, make_jobset, wait_for
) -> None:
    """jobset_webhook.go ValidateUpdate: without ElasticJobSet the whole of replicatedJobs is immutable."""
    _create(custom, namespace, _jobset(make_jobset, "rigid"))
    status = _refused(lambda: _scale(custom, namespace, "rigid", 2))
    assert (
        "spec.replicatedJobs: Invalid value: []v1alpha2.ReplicatedJob{...}: field is immutable"
        in status["message"]
    )
