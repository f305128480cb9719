"""cncf-kubernetes ``KubernetesHook`` and ``AsyncKubernetesHook`` against the stand-in via a kubeconfig."""

from __future__ import annotations

import json

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook

PW = ("pathways-job.pathways.domain", "v1")
CONN_ID = "kube_sandbox"  # set by the session fixture in conftest.py


def test_sync_hook_custom_objects_pods_logs_jobs(kube, namespace, make_pathways_job, wait_for):
    hook = KubernetesHook(conn_id=CONN_ID)
    ok, message = hook.test_connection()
    assert ok, message
    created = hook.create_custom_object(*PW, "pathwaysjobs", make_pathways_job("hooked"), namespace=namespace)
    assert created["metadata"]["uid"]
    fetched = hook.get_custom_object(*PW, "pathwaysjobs", "hooked", namespace=namespace)
    assert fetched["metadata"]["uid"] == created["metadata"]["uid"]
    done = wait_for(
        lambda: (
            hook.get_custom_object(*PW, "pathwaysjobs", "hooked", namespace=namespace)
            .get("status", {})
            .get("terminalState")
        )
    )
    assert done == "Completed"
    raw = hook.get_namespaced_pod_list(  # sends watch=False and returns the raw response
        label_selector="jobset.sigs.k8s.io/replicatedjob-name=pathways-head", namespace=namespace
    )
    pods = json.loads(raw.data)["items"]
    assert len(pods) == 1 and pods[0]["status"]["phase"] == "Succeeded"
    log = hook.get_pod_logs(pods[0]["metadata"]["name"], container="main", namespace=namespace).data.decode()
    assert "Number of JAX devices is 16" in log
    job = hook.get_job_status("hooked-pathways-head-0", namespace)
    assert hook.is_job_complete(job) and not hook.is_job_failed(job)
    hook.delete_custom_object(*PW, "pathwaysjobs", "hooked", namespace=namespace)
    assert hook.core_v1_client.list_namespaced_pod(namespace).items == []


async def test_async_hook_pod_logs_and_job(kube, pw_api, namespace, make_pathways_job, wait_for):
    pw_api.create(namespace, make_pathways_job("ahook"))
    wait_for(lambda: pw_api.get(namespace, "ahook").get("status", {}).get("terminalState"))
    hook = AsyncKubernetesHook(conn_id=CONN_ID)
    job = await hook.get_job_status("ahook-pathways-head-0", namespace)
    assert job.status.succeeded == 1
    async with hook.get_conn() as api:
        from kubernetes_asyncio import client as aclient

        pods = await aclient.CoreV1Api(api).list_namespaced_pod(namespace)
    [head] = pods.items
    pod = await hook.get_pod(head.metadata.name, namespace)
    assert pod.status.phase == "Succeeded"
    lines = await hook.read_logs(head.metadata.name, namespace, container_name="main")
    assert any("Number of JAX devices is 16" in line for line in lines)
    events = await hook.get_pod_events(head.metadata.name, namespace)
    assert any(e.reason == "Scheduled" for e in events.items)
