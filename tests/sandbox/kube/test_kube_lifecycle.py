"""Simulated controllers: PathwaysJob -> JobSet -> Jobs -> pods, the program, failures and scenarios."""

from __future__ import annotations

import re
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes_asyncio import client as aclient
from kubernetes_asyncio import config as aconfig
from kubernetes_asyncio import watch as awatch

PW = ("pathways-job.pathways.domain", "v1")
JS = ("jobset.x-k8s.io", "v1alpha2")
WL = ("kueue.x-k8s.io", "v1beta1")
LONG = {"sandbox.pathways.dev/program-seconds": "30"}


def _types(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in (obj.get("status") or {}).get("conditions") or []]


def _true(obj: dict[str, Any] | None, type_: str) -> bool:
    return any(
        c["type"] == type_ and c["status"] == "True"
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
    )


def _when(value: Any, predicate: Any) -> Any:
    """``value`` when ``predicate(value)`` holds, else None (for ``wait_for``)."""
    return value if value is not None and predicate(value) else None


def _pods(core: k8s.CoreV1Api, namespace: str, selector: str = "") -> list[k8s.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=selector).items


def _running(pw_api: Any, namespace: str, name: str) -> dict[str, Any] | None:
    jobset = pw_api.jobset(namespace, name)
    return jobset if _true(jobset, "StartupPolicyCompleted") else None


async def test_slices_come_up_one_by_one_and_program_completes(
    kube, pw_api, core, namespace, make_pathways_job, helpers, wait_for
):
    created = pw_api.create(
        namespace,
        make_pathways_job(
            "steady", num_slices=3, annotations={"sandbox.pathways.dev/slice-delay-seconds": "0.1"}
        ),
    )
    api = await aconfig.new_client_from_config(config_file=str(kube.kubeconfig))
    ready_seen: list[tuple[int, int]] = []
    try:
        aco = aclient.CustomObjectsApi(api)
        # Every JobSet change since the PathwaysJob was created is replayed, however late we start.
        async with awatch.Watch().stream(
            aco.list_namespaced_custom_object,
            *JS,
            namespace,
            "jobsets",
            field_selector="metadata.name=steady",
            resource_version=created["metadata"]["resourceVersion"],
            timeout_seconds=20,
        ) as stream:
            async for event in stream:
                jobset = event["object"]
                head = helpers.rjob_status(jobset, "pathways-head").get("ready", 0)
                workers = helpers.rjob_status(jobset, "worker").get("ready", 0)
                if not ready_seen or ready_seen[-1] != (head, workers):
                    ready_seen.append((head, workers))
                if (jobset.get("status") or {}).get("terminalState"):
                    break
    finally:
        await api.close()
    worker_counts = [w for _, w in ready_seen]
    progress = [w for i, w in enumerate(worker_counts) if i == 0 or w != worker_counts[i - 1]]
    assert progress[: progress.index(3) + 1] == [0, 1, 2, 3], ready_seen
    first_worker = next(i for i, (_, w) in enumerate(ready_seen) if w > 0)
    assert ready_seen[first_worker - 1][0] == 1  # the head was ready before any slice
    pw = wait_for(
        lambda: _when(pw_api.get(namespace, "steady"), lambda o: o.get("status", {}).get("terminalState"))
    )
    assert pw["status"]["terminalState"] == "Completed"
    assert _types(pw) == [("Pending", "False"), ("Running", "False"), ("Completed", "True")]
    assert pw["status"]["conditions"][-1]["reason"] == "AllJobsCompleted"
    assert pw["status"].get("restarts", 0) == 0
    jobset = pw_api.jobset(namespace, "steady")
    assert jobset["status"]["terminalState"] == "Completed" and _true(jobset, "Completed")
    assert helpers.rjob_status(jobset, "pathways-head")["succeeded"] == 1
    [head] = _pods(core, namespace, "jobset.sigs.k8s.io/replicatedjob-name=pathways-head")
    assert head.status.phase == "Succeeded"
    main = next(c for c in head.status.container_statuses if c.name == "main")
    assert main.state.terminated.exit_code == 0 and main.state.terminated.reason == "Completed"
    # The native sidecars (proxy, resource manager) are stopped by the kubelet once the program
    # ended (SIGTERM after the main containers: kubernetes/kubernetes#120620): 143, the pod's phase
    # still the program's, and never before the program's end.
    sidecars = {c.name: c.state.terminated for c in head.status.init_container_statuses or []}
    assert sidecars and all(t.exit_code == 143 and t.reason == "Error" for t in sidecars.values())
    assert all(t.finished_at >= main.state.terminated.finished_at for t in sidecars.values())
    log = core.read_namespaced_pod_log(
        head.metadata.name, namespace, container="main", _preload_content=False
    ).data
    assert b"Number of JAX devices is 24" in log  # 3 slices x 2 VMs x 4 chips


def test_jobs_pods_names_labels_and_headless(
    kube, pw_api, core, batch, namespace, make_pathways_job, wait_for
):
    pw_api.create(namespace, make_pathways_job("hl", headless=True))
    jobset = wait_for(lambda: _running(pw_api, namespace, "hl"), what="all slices up")
    uid = jobset["metadata"]["uid"]
    jobs = {j.metadata.name: j for j in batch.list_namespaced_job(namespace).items}
    assert set(jobs) == {"hl-pathways-head-0", "hl-worker-0", "hl-worker-1"}
    assert all(j.metadata.owner_references[0].uid == uid for j in jobs.values())
    assert jobs["hl-worker-1"].spec.parallelism == 2 and jobs["hl-worker-1"].status.ready == 2
    pods = _pods(core, namespace)
    assert len(pods) == 1 + 2 * 2
    worker = next(
        p
        for p in pods
        if p.metadata.labels["job-name"] == "hl-worker-1"
        and p.metadata.labels["batch.kubernetes.io/job-completion-index"] == "1"
    )
    assert re.fullmatch(r"hl-worker-1-1-[a-z0-9]{5}", worker.metadata.name)
    assert worker.spec.hostname == "hl-worker-1-1" and worker.spec.subdomain == "hl"
    labels = worker.metadata.labels
    assert labels["jobset.sigs.k8s.io/jobset-name"] == "hl"
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "worker"
    assert labels["jobset.sigs.k8s.io/job-index"] == "1"
    assert worker.status.phase == "Running"
    assert any(c.type == "Ready" and c.status == "True" for c in worker.status.conditions)
    assert worker.status.container_statuses[0].ready and worker.status.container_statuses[0].state.running
    pw = wait_for(lambda: _when(pw_api.get(namespace, "hl"), lambda o: _true(o, "Running")))
    assert _types(pw)[-1] == ("Running", "True") and "terminalState" not in pw["status"]
    with pytest.raises(Exception, match="headless"):
        kube.action(namespace, "hl", "fail-program", exit_code=1)
    [head] = _pods(core, namespace, "jobset.sigs.k8s.io/replicatedjob-name=pathways-head")
    with pytest.raises(k8s.ApiException) as exc:
        core.read_namespaced_pod_log(head.metadata.name, namespace)  # two containers: must name one
    assert exc.value.status == 400 and "choose one of: [pathways-rm pathways-proxy]" in exc.value.body
    rm_log = core.read_namespaced_pod_log(
        head.metadata.name, namespace, container="pathways-rm", _preload_content=False
    ).data
    assert b"resource manager" in rm_log


def test_program_failure_exit_code_and_logs(
    pw_api, core, batch, namespace, make_pathways_job, wait_for, helpers
):
    pw_api.create(
        namespace, make_pathways_job("boom", annotations={"sandbox.pathways.dev/program-exit-code": "3"})
    )
    pw = wait_for(
        lambda: _when(pw_api.get(namespace, "boom"), lambda o: o.get("status", {}).get("terminalState"))
    )
    assert pw["status"]["terminalState"] == "Failed"
    assert pw["status"]["conditions"][-1]["type"] == "Failed"
    assert pw["status"]["conditions"][-1]["reason"] == "ReachedMaxRestarts"
    jobset = pw_api.jobset(namespace, "boom")
    failed = helpers.condition(jobset, "Failed")
    assert failed["reason"] == "ReachedMaxRestarts"
    assert failed["message"].startswith("jobset failed due to reaching max number of restarts")
    head_job = batch.read_namespaced_job("boom-pathways-head-0", namespace)
    assert any(c.type == "Failed" and c.reason == "BackoffLimitExceeded" for c in head_job.status.conditions)
    [head] = _pods(core, namespace, "jobset.sigs.k8s.io/replicatedjob-name=pathways-head")
    assert head.status.phase == "Failed"
    terminated = next(c for c in head.status.container_statuses if c.name == "main").state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    tail = core.read_namespaced_pod_log(
        head.metadata.name, namespace, container="main", tail_lines=1, _preload_content=False
    ).data.decode()
    assert tail == "RuntimeError: the program failed with exit code 3\n"
    stamped = core.read_namespaced_pod_log(
        head.metadata.name,
        namespace,
        container="main",
        timestamps=True,
        since_seconds=60,
        _preload_content=False,
    ).data.decode()
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z Initializing pathwaysutils", stamped)


def test_preemption_restarts_then_reaches_max_restarts(
    kube, pw_api, core, batch, namespace, make_pathways_job, wait_for, helpers
):
    pw_api.create(namespace, make_pathways_job("pre", max_restarts=1, annotations=LONG))
    wait_for(lambda: _running(pw_api, namespace, "pre"), what="first start")
    kube.action(namespace, "pre", "preempt-slice", slice=1)
    jobset = wait_for(
        lambda: _when(pw_api.jobset(namespace, "pre"), lambda js: js["status"].get("restarts") == 1)
    )
    assert jobset["status"]["restartsCountTowardsMax"] == 1 and not jobset["status"].get("terminalState")
    pw = pw_api.get(namespace, "pre")
    assert _types(pw)[-1] == ("Running", "True")  # stale after the restart, as upstream
    assert "restarts" not in pw["status"]
    wait_for(
        lambda: (
            _running(pw_api, namespace, "pre")
            and len(
                _pods(
                    core,
                    namespace,
                    "jobset.sigs.k8s.io/restart-attempt=1,jobset.sigs.k8s.io/replicatedjob-name=worker",
                )
            )
            == 4
        ),
        what="second start",
    )
    kube.action(namespace, "pre", "preempt-slice", slice=0)
    jobset = wait_for(
        lambda: _when(pw_api.jobset(namespace, "pre"), lambda js: js["status"].get("terminalState"))
    )
    assert jobset["status"]["terminalState"] == "Failed"
    assert helpers.condition(jobset, "Failed")["reason"] == "ReachedMaxRestarts"
    pw = wait_for(lambda: _when(pw_api.get(namespace, "pre"), lambda o: o["status"].get("terminalState")))
    assert pw["status"]["conditions"][-1]["reason"] == "ReachedMaxRestarts"
    job = batch.read_namespaced_job("pre-worker-0", namespace)
    failed = next(c for c in job.status.conditions if c.type == "Failed")
    assert failed.reason == "PodFailurePolicy" and "DisruptionTarget" in failed.message
    preempted = _pods(core, namespace, "job-name=pre-worker-0")
    assert preempted and all(p.status.phase == "Failed" for p in preempted)
    disruption = next(c for c in preempted[0].status.conditions if c.type == "DisruptionTarget")
    assert disruption.status == "True" and disruption.reason == "PreemptionByScheduler"


def test_suspend_by_client_patch_and_resume(
    kube, custom, pw_api, core, namespace, make_pathways_job, wait_for, helpers
):
    pw_api.create(namespace, make_pathways_job("sus", annotations=LONG))
    wait_for(lambda: _running(pw_api, namespace, "sus"))
    custom.patch_namespaced_custom_object(*JS, namespace, "jobsets", "sus", {"spec": {"suspend": True}})
    jobset = wait_for(lambda: _when(pw_api.jobset(namespace, "sus"), lambda js: _true(js, "Suspended")))
    wait_for(lambda: not _pods(core, namespace), what="pods deleted")
    jobset = wait_for(
        lambda: _when(
            pw_api.jobset(namespace, "sus"), lambda js: helpers.rjob_status(js, "worker")["suspended"] == 2
        )
    )
    assert helpers.rjob_status(jobset, "worker")["ready"] == 0
    assert helpers.condition(jobset, "Suspended")["reason"] == "SuspendedJobs"
    pw = wait_for(
        lambda: _when(pw_api.get(namespace, "sus"), lambda o: _types(o)[-1] == ("Suspended", "True"))
    )
    assert "terminalState" not in pw["status"]
    kube.action(namespace, "sus", "resume")
    jobset = wait_for(
        lambda: _when(
            pw_api.jobset(namespace, "sus"),
            lambda js: (
                helpers.condition(js, "Suspended")["status"] == "False"
                and helpers.rjob_status(js, "worker")["ready"] == 2
            ),
        )
    )
    assert helpers.condition(jobset, "Suspended")["reason"] == "ResumeJobs"
    assert len(_pods(core, namespace)) == 5


def test_invalid_topology_fails_without_conditions_or_jobset(pw_api, namespace, make_pathways_job, wait_for):
    pw_api.create(namespace, make_pathways_job("topo", machine="ct5lp-hightpu-4t", topology="3x3"))
    pw = wait_for(lambda: _when(pw_api.get(namespace, "topo"), lambda o: o.get("status")))
    assert pw["status"] == {"terminalState": "Failed"}
    assert pw_api.jobset(namespace, "topo") is None


def test_plain_jobset_mode(pw_api, core, namespace, make_jobset, wait_for, helpers):
    created = pw_api.create_jobset(namespace, make_jobset("plain", num_slices=2, vms=2))
    assert (
        created["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"]
        == "Never"
    )
    jobset = wait_for(
        lambda: _when(pw_api.jobset(namespace, "plain"), lambda js: js.get("status", {}).get("terminalState"))
    )
    assert jobset["status"]["terminalState"] == "Completed"
    assert helpers.condition(jobset, "Completed")["reason"] == "AllJobsCompleted"
    [head] = _pods(core, namespace, "jobset.sigs.k8s.io/replicatedjob-name=pathways-head")
    assert head.metadata.labels["jobset.sigs.k8s.io/coordinator"] == "plain-pathways-head-0-0.plain"
    log = core.read_namespaced_pod_log(
        head.metadata.name, namespace, container="jax-tpu", _preload_content=False
    )
    assert b"Number of JAX devices is 16" in log.data


def test_fail_program_action_with_pods_deleted_after_failure(
    kube, pw_api, core, batch, namespace, make_pathways_job, wait_for
):
    notes = {**LONG, "sandbox.pathways.dev/delete-pods-after-failure": "true"}
    pw_api.create(namespace, make_pathways_job("gone", annotations=notes))
    wait_for(lambda: _running(pw_api, namespace, "gone"))
    result = kube.action(namespace, "gone", "fail-program", exit_code=7)
    assert result["exit_code"] == 7 and result["pods"]
    jobset = wait_for(
        lambda: _when(pw_api.jobset(namespace, "gone"), lambda js: js["status"].get("terminalState"))
    )
    assert jobset["status"]["terminalState"] == "Failed"
    wait_for(lambda: not _pods(core, namespace), what="failed pods deleted")
    head_job = batch.read_namespaced_job("gone-pathways-head-0", namespace)
    assert head_job.status.failed == 1
    assert any(c.type == "Failed" and c.reason == "BackoffLimitExceeded" for c in head_job.status.conditions)


def test_lose_node_pods_vanish_and_job_fails(
    kube, pw_api, core, batch, namespace, make_pathways_job, wait_for
):
    pw_api.create(namespace, make_pathways_job("lost", max_restarts=0, annotations=LONG))
    wait_for(lambda: _running(pw_api, namespace, "lost"))
    result = kube.action(namespace, "lost", "lose-node", slice=0)
    assert len(result["pods"]) == 2
    assert not _pods(core, namespace, "job-name=lost-worker-0")
    job = batch.read_namespaced_job("lost-worker-0", namespace)
    assert job.status.failed == 2 and any(
        c.type == "Failed" and c.reason == "PodFailurePolicy" for c in job.status.conditions
    )
    pw = wait_for(lambda: _when(pw_api.get(namespace, "lost"), lambda o: o["status"].get("terminalState")))
    assert pw["status"]["terminalState"] == "Failed"


def test_evict_suspends_and_resume_readmits(
    kube, custom, pw_api, namespace, make_pathways_job, wait_for, helpers
):
    queued = make_pathways_job("ev", annotations=LONG, labels={"kueue.x-k8s.io/queue-name": "tpu-queue"})
    pw_api.create(namespace, queued)
    wait_for(lambda: _running(pw_api, namespace, "ev"))
    [workload] = custom.list_namespaced_custom_object(*WL, namespace, "workloads")["items"]
    assert _true(workload, "Admitted") and workload["spec"]["queueName"] == "tpu-queue"
    kube.action(namespace, "ev", "evict")
    workload = custom.get_namespaced_custom_object(*WL, namespace, "workloads", workload["metadata"]["name"])
    evicted = helpers.condition(workload, "Evicted")
    assert evicted["status"] == "True" and evicted["reason"] == "Preempted"
    assert not _true(workload, "Admitted")
    assert pw_api.jobset(namespace, "ev")["spec"]["suspend"] is True
    wait_for(lambda: _true(pw_api.jobset(namespace, "ev"), "Suspended"))
    kube.action(namespace, "ev", "resume")
    workload = custom.get_namespaced_custom_object(*WL, namespace, "workloads", workload["metadata"]["name"])
    assert _true(workload, "Admitted") and not _true(workload, "Evicted")
    wait_for(lambda: helpers.rjob_status(pw_api.jobset(namespace, "ev"), "worker")["ready"] == 2)


def test_max_ready_slices_caps_readiness(pw_api, core, namespace, make_pathways_job, wait_for, helpers):
    pw_api.create(
        namespace,
        make_pathways_job("cap", num_slices=3, annotations={"sandbox.pathways.dev/max-ready-slices": "2"}),
    )
    wait_for(lambda: helpers.rjob_status(pw_api.jobset(namespace, "cap"), "worker").get("ready") == 2)
    stuck = wait_for(
        lambda: [
            p
            for p in _pods(core, namespace, "job-name=cap-worker-2")
            if any(
                c.type == "PodScheduled" and c.reason == "Unschedulable" for c in p.status.conditions or []
            )
        ]
    )
    assert len(stuck) == 2 and all(p.status.phase == "Pending" for p in stuck)
    jobset = pw_api.jobset(namespace, "cap")
    assert helpers.rjob_status(jobset, "worker")["active"] == 3
    assert _true(jobset, "StartupPolicyInProgress") and not jobset["status"].get("terminalState")
    assert _types(pw_api.get(namespace, "cap")) == [("Pending", "True")]


def test_exceed_ephemeral_storage_evicts_like_the_kubelet(
    kube, pw_api, core, batch, namespace, make_pathways_job, wait_for
):
    """eviction_manager.go localStorageEviction: reason Evicted with helpers.go's message, no
    DisruptionTarget (so no pod failure policy matches), a Warning Evicted event."""
    pw_api.create(namespace, make_pathways_job("disk", max_restarts=0, annotations=LONG))
    wait_for(lambda: _running(pw_api, namespace, "disk"))
    result = kube.action(
        namespace, "disk", "exceed-ephemeral-storage", slice=0, replicatedJob="pathways-head"
    )
    [pod] = [
        p
        for p in _pods(core, namespace, "job-name=disk-pathways-head-0")
        if p.metadata.name in result["pods"]
    ]
    assert pod.status.phase == "Failed" and pod.status.reason == "Evicted"
    assert (
        pod.status.message.startswith("Container ")
        and 'local ephemeral storage limit "10Gi"' in pod.status.message
    )
    assert not any(c.type == "DisruptionTarget" for c in pod.status.conditions or [])
    assert {s.state.terminated.exit_code for s in pod.status.container_statuses} == {137}
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod.metadata.name}")
    assert any(e.reason == "Evicted" and e.type == "Warning" for e in events.items)
    head = wait_for(
        lambda: _when(batch.read_namespaced_job("disk-pathways-head-0", namespace), lambda j: j.status.failed)
    )
    assert any(c.type == "Failed" and c.reason == "BackoffLimitExceeded" for c in head.status.conditions)
