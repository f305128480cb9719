"""to_jobset(): the plain JobSet equivalent to a PathwaysJob, compared with xpk's golden rendering."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from airflow_provider_pathways.gke.spec import (
    ControllerSpec,
    CustomComponent,
    PathwaysJobSpec,
    PathwaysSpecError,
    WorkerSpec,
)

Load = Callable[[str], Any]
XPK_JOBSET = "xpk-head-golden.jobset.yaml"


def _jobs(jobset: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {job["name"]: job for job in jobset["spec"]["replicatedJobs"]}


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    return job["template"]["spec"]["template"]["spec"]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _containers(pod: dict[str, Any], key: str = "containers") -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod.get(key, [])}


@pytest.fixture
def golden_spec(load_sample: Load) -> PathwaysJobSpec:
    """The spec of xpk's golden workload (the same inputs as its PathwaysJob rendering)."""
    return PathwaysJobSpec.from_dict(load_sample("xpk-1.7-golden.pathwaysjob.yaml"))


def test_golden_inputs_render_xpks_jobset(golden_spec: PathwaysJobSpec, load_sample: Load) -> None:
    expected = load_sample(XPK_JOBSET)
    # The three places where the rendering differs from xpk's, on purpose:
    # 1. JAX_BACKEND_TARGET names the head directly; xpk writes grpc://$(PATHWAYS_HEAD):29000 (same host).
    head_env = _pod(_jobs(expected)["pathways-head"])["containers"][0]["env"]
    (target,) = [e for e in head_env if e["name"] == "JAX_BACKEND_TARGET"]
    assert target["value"].strip() == "grpc://$(PATHWAYS_HEAD):29000"
    target["value"] = "grpc://golden-workload-pathways-head-0-0.golden-workload:29000"
    # 2. failurePolicy.maxRestarts is written out (xpk omits the default 0).
    expected["spec"]["failurePolicy"]["maxRestarts"] = 0
    # 3. xpk labels worker pods with its own workload label.
    del _jobs(expected)["worker"]["template"]["spec"]["template"]["metadata"]

    assert golden_spec.to_jobset() == expected


def test_golden_jobset_fields_that_matter(golden_spec: PathwaysJobSpec, load_sample: Load) -> None:
    expected, actual = load_sample(XPK_JOBSET), golden_spec.to_jobset()
    assert actual["metadata"] == expected["metadata"]
    assert [j["name"] for j in actual["spec"]["replicatedJobs"]] == ["pathways-head", "worker"]
    for name in ("pathways-head", "worker"):
        ours, theirs = _jobs(actual)[name], _jobs(expected)[name]
        assert ours["replicas"] == theirs["replicas"]
        for key in ("parallelism", "completions", "backoffLimit", "completionMode"):
            assert ours["template"]["spec"][key] == theirs["template"]["spec"][key], (name, key)
        ours_pod, theirs_pod = _pod(ours), _pod(theirs)
        for key in ("initContainers", "containers"):
            ours_c, theirs_c = _containers(ours_pod, key), _containers(theirs_pod, key)
            assert ours_c.keys() == theirs_c.keys()
            for cname, container in ours_c.items():
                assert container["image"] == theirs_c[cname]["image"]
                assert container.get("args") == theirs_c[cname].get("args")
                assert _env(container).keys() == _env(theirs_c[cname]).keys()
        assert ours_pod["nodeSelector"] == theirs_pod["nodeSelector"]
    rm = _containers(_pod(_jobs(actual)["pathways-head"]), "initContainers")["pathways-rm"]
    assert "--instance_count=1" in rm["args"]
    assert "--instance_type=tpuv5:2x2x1" in rm["args"]
    assert "--gcs_scratch_location=gs://cloud-pathways-staging/tmp" in rm["args"]


def test_multi_slice_v6e_jobset() -> None:
    spec = PathwaysJobSpec.from_tpu_type(
        "v6e-16",
        num_slices=3,
        name="big",
        namespace="ml",
        pathways_dir="gs://my-bucket/x",
        pathways_version="jax-0.5.3",
        max_restarts=5,
        template={"spec": {"containers": [{"name": "main", "image": "python:3.12", "env": [{"name": "A"}]}]}},
    )
    jobset = spec.to_jobset()
    assert jobset["metadata"] == {"name": "big", "namespace": "ml"}
    assert jobset["spec"]["failurePolicy"] == {"restartStrategy": "Recreate", "maxRestarts": 5}
    head, worker = _jobs(jobset)["pathways-head"], _jobs(jobset)["worker"]
    assert worker["replicas"] == 3
    assert worker["template"]["spec"]["parallelism"] == worker["template"]["spec"]["completions"] == 4
    assert worker["template"]["spec"]["backoffLimit"] == 16
    worker_pod = _pod(worker)
    assert worker_pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
    }
    (worker_container,) = worker_pod["containers"]
    assert worker_container["image"] == "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.5.3"
    assert worker_container["resources"] == {"limits": {"google.com/tpu": "4"}}
    sidecars = _containers(_pod(head), "initContainers")
    assert sidecars["pathways-proxy"]["image"] == (
        "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.5.3"
    )
    assert "--instance_count=3" in sidecars["pathways-rm"]["args"]
    assert "--instance_type=tpuv6e:4x4" in sidecars["pathways-rm"]["args"]
    main = _containers(_pod(head))["main"]
    assert [e["name"] for e in main["env"]] == [
        "PATHWAYS_HEAD",
        "JAX_PLATFORMS",
        "XCLOUD_ENVIRONMENT",
        "JAX_BACKEND_TARGET",
        "A",
    ]
    assert _env(main)["JAX_PLATFORMS"] == "proxy"
    assert _env(main)["JAX_BACKEND_TARGET"] == spec.proxy_address == "grpc://big-pathways-head-0-0.big:29000"
    assert _pod(head)["restartPolicy"] == "Never"
    assert jobset["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["pathways-head"]}


def test_user_values_of_injected_env_are_replaced(load_sample: Load) -> None:
    spec = PathwaysJobSpec.from_dict(load_sample("upstream-colocated-python.pathwaysjob.yaml"))
    main = _containers(_pod(_jobs(spec.to_jobset())["pathways-head"]))["main"]
    names = [e["name"] for e in main["env"]]
    assert len(names) == len(set(names))
    assert (
        _env(main)["JAX_BACKEND_TARGET"]
        == "grpc://pathways-colocated-pathways-head-0-0.pathways-colocated:29000"
    )


def test_headless_jobset_runs_rm_and_proxy_as_containers() -> None:
    spec = PathwaysJobSpec.from_tpu_type(
        "v5p-16", num_slices=2, name="shell", pathways_dir="gs://my-bucket/x"
    )
    jobset = spec.to_jobset()
    head_pod = _pod(_jobs(jobset)["pathways-head"])
    assert list(_containers(head_pod)) == ["pathways-proxy", "pathways-rm"]
    assert "initContainers" not in head_pod
    assert all("restartPolicy" not in c for c in head_pod["containers"])
    assert "successPolicy" not in jobset["spec"]
    assert _jobs(jobset)["worker"]["template"]["spec"]["parallelism"] == 2


def test_elastic_metrics_and_custom_components(load_sample: Load) -> None:
    spec = PathwaysJobSpec.from_dict(load_sample("upstream-elastic.pathwaysjob.yaml"))
    spec.pathways_dir = "gs://my-bucket/elastic"
    spec.controller.enable_metrics_collection = True
    spec.custom_components = [
        CustomComponent("proxy_server", image="gcr.io/p/proxy:dev", custom_flags=["--proxy_flag=1"]),
        CustomComponent("worker", custom_env=[{"name": "W", "value": "1"}]),
        CustomComponent("colocated_python_sidecar", image="gcr.io/p/sidecar:1"),
    ]
    jobset = spec.to_jobset()
    head_pod, worker = _pod(_jobs(jobset)["pathways-head"]), _jobs(jobset)["worker"]
    proxy = _containers(head_pod, "initContainers")["pathways-proxy"]
    assert proxy["image"] == "gcr.io/p/proxy:dev"
    assert proxy["args"][-3:] == [
        "--enable_metrics_collection=true",
        "--proxy_flag=1",
        "--num_elastic_slices=1",
    ]
    # elastic: backoffLimit is VMs x maxSliceRestarts (2 VMs x 4)
    assert worker["template"]["spec"]["backoffLimit"] == 8
    worker_pod = _pod(worker)
    assert _env(worker_pod["containers"][0])["W"] == "1"
    assert "--enable_metrics_collection=true" in worker_pod["containers"][0]["args"]
    assert worker_pod["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] == "tpu-v4-podslice"
    (sidecar,) = worker_pod["initContainers"]
    assert sidecar["image"] == "gcr.io/p/sidecar:1" and sidecar["restartPolicy"] == "Always"


def test_worker_node_selector_and_scheduling(load_sample: Load) -> None:
    spec = PathwaysJobSpec.from_dict(load_sample("upstream-basic.pathwaysjob.yaml"))
    worker_pod = _pod(_jobs(spec.to_jobset())["worker"])
    assert worker_pod["nodeSelector"]["cloud.google.com/reservation-name"] == "reservation-name"
    assert worker_pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x2x2"


def test_colocated_head_runs_beside_the_workers() -> None:
    """Colocate mode as pathwaysjob_controller.go (pathways-job v0.1.4) renders it:
    MakePathwaysHeadJobForColocateHeadWithWorkersDeployment gives the head the TPU node selector
    (makeTPUNodeSelector) and MakeWorkerJob gives the workers MakePodAffinityRules."""
    spec = PathwaysJobSpec.from_tpu_type(
        "v6e-8",
        name="infer",
        pathways_dir="gs://my-bucket/x",
        deployment_mode="colocate_head_with_workers",
        node_selector={"cloud.google.com/reservation-name": "res"},
        template={
            "spec": {
                "containers": [{"name": "main", "image": "python:3.12"}],
                "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu-np"},
            }
        },
    )
    jobs = _jobs(spec.to_jobset())
    head, worker = jobs["pathways-head"], jobs["worker"]
    assert "metadata" not in head["template"]  # no exclusive CPU-node placement
    head_pod, worker_pod = _pod(head), _pod(worker)
    tpu_selector = {
        "cloud.google.com/reservation-name": "res",
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "2x4",
    }
    assert head_pod["nodeSelector"] == tpu_selector == worker_pod["nodeSelector"]
    assert "affinity" not in head_pod
    assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in head_pod["tolerations"]
    affinity = worker_pod["affinity"]
    (attract,) = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert attract["labelSelector"]["matchExpressions"] == [
        {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "In", "values": ["infer"]}
    ]
    assert attract["topologyKey"] == "cloud.google.com/gke-nodepool"
    (repel,) = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert repel["labelSelector"]["matchExpressions"] == [
        {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "NotIn", "values": ["infer"]},
        {"key": "job-name", "operator": "Exists"},
    ]


def test_default_mode_has_no_affinity() -> None:
    spec = PathwaysJobSpec.from_tpu_type("v6e-8", name="train", pathways_dir="gs://my-bucket/x")
    jobs = _jobs(spec.to_jobset())
    assert "affinity" not in _pod(jobs["worker"]) and "affinity" not in _pod(jobs["pathways-head"])
    assert jobs["pathways-head"]["template"]["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname"
    }


def test_eight_chip_machines() -> None:
    spec = PathwaysJobSpec(
        name="small",
        workers=WorkerSpec("ct6e-standard-8t", "2x4", num_slices=2),
        pathways_dir="gs://my-bucket/x",
    )
    worker = _jobs(spec.to_jobset())["worker"]
    assert worker["template"]["spec"]["parallelism"] == 1
    assert _pod(worker)["containers"][0]["resources"] == {"limits": {"google.com/tpu": "8"}}


def test_to_jobset_does_not_change_the_spec(golden_spec: PathwaysJobSpec) -> None:
    before = copy.deepcopy(golden_spec)
    first = golden_spec.to_jobset()
    _pod(_jobs(first)["pathways-head"])["containers"][0]["env"].clear()
    assert golden_spec == before
    assert golden_spec.to_jobset() != first


def test_to_jobset_needs_name_and_shape() -> None:
    spec = PathwaysJobSpec(
        workers=WorkerSpec("ct6e-standard-4t", "3x3", num_slices=0), controller=ControllerSpec()
    )
    with pytest.raises(PathwaysSpecError) as excinfo:
        spec.to_jobset()
    assert [p.field for p in excinfo.value.problems] == [
        "metadata.name",
        "spec.workers[0].topology",
        "spec.workers[0].numSlices",
    ]


def test_to_yaml_of_the_jobset(golden_spec: PathwaysJobSpec) -> None:
    assert yaml.safe_load(golden_spec.to_yaml(jobset=True)) == golden_spec.to_jobset()
