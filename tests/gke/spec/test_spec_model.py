"""Building, loading and rendering PathwaysJob specs."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_pathways.gke.spec import (
    API_VERSION,
    KIND,
    ControllerSpec,
    CustomComponent,
    PathwaysJobSpec,
    PathwaysSpecError,
    SpecProblem,
    WorkerSpec,
)

SAMPLES_DIR = Path(__file__).resolve().parents[2] / "data" / "samples"
UPSTREAM_SAMPLES = sorted(p.name for p in SAMPLES_DIR.glob("upstream-*.pathwaysjob.yaml"))
XPK_PATHWAYSJOB = "xpk-1.7-golden.pathwaysjob.yaml"

Validate = Callable[[dict[str, Any]], None]
Load = Callable[[str], Any]

USER_TEMPLATE = {
    "spec": {
        "containers": [
            {"name": "trainer", "image": "python:3.12", "command": ["python", "-c", "print(1)"]},
        ]
    }
}


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def test_upstream_samples_exist() -> None:
    assert len(UPSTREAM_SAMPLES) == 3


# ---------------------------------------------------------------------- from_tpu_type


@pytest.mark.parametrize(
    ("tpu_type", "machine", "topology", "vms", "instance_type"),
    [
        ("v6e-16", "ct6e-standard-4t", "4x4", 4, "tpuv6e:4x4"),
        ("v5p-8", "ct5p-hightpu-4t", "2x2x1", 1, "tpuv5:2x2x1"),
        ("v4-16", "ct4p-hightpu-4t", "2x2x2", 2, "tpuv4:2x2x2"),
        ("tpu7x-32", "tpu7x-standard-4t", "2x2x4", 4, "tpu7x:2x2x4"),
        ("v5litepod-16", "ct5lp-hightpu-4t", "4x4", 4, "tpuv5e:4x4"),
        ("v5e-32", "ct5lp-hightpu-4t", "4x8", 8, "tpuv5e:4x8"),
    ],
)
def test_from_tpu_type(
    tpu_type: str, machine: str, topology: str, vms: int, instance_type: str, assert_valid_manifest: Validate
) -> None:
    spec = PathwaysJobSpec.from_tpu_type(
        tpu_type, num_slices=2, pathways_dir="gs://my-bucket/run", name="train", template=USER_TEMPLATE
    )
    assert spec.workers == WorkerSpec(type=machine, topology=topology, num_slices=2)
    assert spec.vms_per_slice == vms
    assert spec.instance_type == instance_type
    assert spec.controller.main_container_name == "trainer"
    assert spec.problems() == []
    manifest = spec.to_pathwaysjob()
    assert_valid_manifest(manifest)
    assert PathwaysJobSpec.from_dict(manifest) == spec


def test_from_tpu_type_passes_every_option(assert_valid_manifest: Validate) -> None:
    sidecar = CustomComponent("colocated_python_sidecar", image="gcr.io/p/sidecar:1")
    spec = PathwaysJobSpec.from_tpu_type(
        "v6e-16",
        num_slices=4,
        pathways_dir="gs://my-bucket/x",
        name="full",
        namespace="ml",
        labels={"team": "research"},
        annotations={"note": "anything goes: here"},
        template=USER_TEMPLATE,
        main_container_name="trainer",
        deployment_mode="colocate_head_with_workers",
        elastic_slices=1,
        enable_metrics_collection=True,
        pathways_version="jax-0.5.3",
        max_restarts=3,
        max_slice_restarts=2,
        termination_grace_period_seconds=60,
        priority_class_name="high",
        node_selector={"cloud.google.com/reservation-name": "res"},
        custom_components=[sidecar],
    )
    assert spec.problems() == []
    manifest = spec.to_pathwaysjob()
    assert_valid_manifest(manifest)
    assert manifest == {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": "full",
            "namespace": "ml",
            "labels": {"team": "research"},
            "annotations": {"note": "anything goes: here"},
        },
        "spec": {
            "maxRestarts": 3,
            "pathwaysVersion": "jax-0.5.3",
            "pathwaysDir": "gs://my-bucket/x",
            "customComponents": [
                {"componentType": "colocated_python_sidecar", "image": "gcr.io/p/sidecar:1"}
            ],
            "workers": [
                {
                    "type": "ct6e-standard-4t",
                    "topology": "4x4",
                    "numSlices": 4,
                    "maxSliceRestarts": 2,
                    "terminationGracePeriodSeconds": 60,
                    "priorityClassName": "high",
                    "nodeSelector": {"cloud.google.com/reservation-name": "res"},
                }
            ],
            "controller": {
                "deploymentMode": "colocate_head_with_workers",
                "mainContainerName": "trainer",
                "elasticSlices": 1,
                "enableMetricsCollection": True,
                "template": USER_TEMPLATE,
            },
        },
    }
    assert PathwaysJobSpec.from_yaml(spec.to_yaml()) == spec


def test_from_tpu_type_headless_defaults() -> None:
    spec = PathwaysJobSpec.from_tpu_type("v5p-8", name="shell", pathways_dir="gs://my-bucket/x")
    assert spec.controller == ControllerSpec()
    assert spec.to_pathwaysjob()["spec"] == {
        "pathwaysDir": "gs://my-bucket/x",
        "workers": [{"type": "ct5p-hightpu-4t", "topology": "2x2x1", "numSlices": 1}],
        "controller": {"deploymentMode": "default", "mainContainerName": "main"},
    }


@pytest.mark.parametrize("tpu_type", ["v6e-1", "tpu7x-2", "tpu7-8", "v4-384", "v9-16", "nonsense"])
def test_from_tpu_type_rejects_types_a_pathwaysjob_cannot_run(tpu_type: str) -> None:
    with pytest.raises(PathwaysSpecError) as excinfo:
        PathwaysJobSpec.from_tpu_type(tpu_type, name="x", pathways_dir="gs://my-bucket/x", kind="PathwaysJob")
    (problem,) = excinfo.value.problems
    assert problem.field == "spec.workers[0].type"
    assert tpu_type in problem.problem
    assert "v6e-16" in problem.fix and "v5p-8" in problem.fix and "tpu7x-8" in problem.fix
    assert "spec.workers[0].type" in str(excinfo.value)


@pytest.mark.parametrize(
    ("tpu_type", "machine_type", "topology", "chips_per_vm"),
    [
        ("v6e-1", "ct6e-standard-1t", "1x1", 1),
        ("tpu7x-2", "tpu7x-standard-1t", "1x1x1", 1),
        ("v4-384", "ct4p-hightpu-4t", "4x4x12", 4),
        ("v5litepod-4", "ct5lp-hightpu-4t", "2x2", 4),
    ],
)
def test_gke_slices_the_controller_rejects_run_as_a_jobset(
    tpu_type: str, machine_type: str, topology: str, chips_per_vm: int
) -> None:
    spec = PathwaysJobSpec.from_tpu_type(tpu_type, name="x", pathways_dir="gs://my-bucket/x")
    assert (spec.workers.type, spec.workers.topology) == (machine_type, topology)
    assert spec.problems(kind="JobSet") == []
    worker = spec.to_jobset()["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
    assert worker["containers"][0]["resources"] == {"limits": {"google.com/tpu": str(chips_per_vm)}}
    if tpu_type != "v5litepod-4":  # the controller takes ct5lp-hightpu-4t 2x2
        assert [p.field for p in spec.problems(kind="PathwaysJob")] == [
            "spec.workers[0].type" if machine_type.endswith("-1t") else "spec.workers[0].topology"
        ]


def test_derived_names() -> None:
    spec = PathwaysJobSpec.from_tpu_type(
        "v6e-16", num_slices=2, name="llama", pathways_dir="gs://my-bucket/x"
    )
    assert spec.proxy_address == "grpc://llama-pathways-head-0-0.llama:29000"
    assert spec.head_host == "llama-pathways-head-0-0.llama"
    assert spec.worker_replicated_job == "worker"
    assert spec.head_replicated_job == "pathways-head"
    assert PathwaysJobSpec.worker_replicated_job == "worker"
    assert spec.chips_per_vm == 4
    assert spec.gke_accelerator == "tpu-v6e-slice"
    assert spec.device_type == "v6e-16"
    assert spec.image_tag == "latest"
    assert spec.max_name_length == 22


def test_vms_per_slice_of_eight_chip_machines() -> None:
    spec = PathwaysJobSpec(name="x", workers=WorkerSpec("ct5lp-hightpu-8t", "2x4"))
    assert spec.vms_per_slice == 1
    assert spec.chips_per_vm == 8
    assert spec.instance_type == "tpuv5e1t:2x4"


def test_derived_values_of_an_unusable_spec_raise() -> None:
    spec = PathwaysJobSpec(workers=WorkerSpec("ct6e-standard-4t", "3x3"))
    with pytest.raises(PathwaysSpecError, match=r"spec\.workers\[0\]\.topology"):
        _ = spec.vms_per_slice
    with pytest.raises(PathwaysSpecError, match=r"metadata\.name"):
        _ = spec.proxy_address


# ---------------------------------------------------------------------- samples


@pytest.mark.parametrize("sample", UPSTREAM_SAMPLES)
def test_upstream_samples_round_trip(sample: str, load_sample: Load, assert_valid_manifest: Validate) -> None:
    original = load_sample(sample)
    spec = PathwaysJobSpec.from_dict(copy.deepcopy(original))
    rendered = spec.to_pathwaysjob()
    assert rendered == original
    assert_valid_manifest(rendered)
    again = PathwaysJobSpec.from_dict(rendered)
    assert again == spec
    assert again.to_pathwaysjob() == original
    assert PathwaysJobSpec.from_yaml(spec.to_yaml()).to_pathwaysjob() == original
    assert PathwaysJobSpec.from_yaml((SAMPLES_DIR / sample).read_text()) == spec


@pytest.mark.parametrize("sample", UPSTREAM_SAMPLES)
def test_upstream_samples_load_but_do_not_validate(sample: str, load_sample: Load) -> None:
    spec = PathwaysJobSpec.from_dict(load_sample(sample))
    fields = [problem.field for problem in spec.problems()]
    assert "spec.pathwaysDir" in fields  # the placeholder gs://<test-bucket>/tmp
    with pytest.raises(PathwaysSpecError):
        spec.validate()


def test_upstream_elastic_sample_fields(load_sample: Load) -> None:
    spec = PathwaysJobSpec.from_dict(load_sample("upstream-elastic.pathwaysjob.yaml"))
    assert spec.name == "pathways-elastic"
    assert spec.workers == WorkerSpec("ct4p-hightpu-4t", "2x2x2", num_slices=2, max_slice_restarts=4)
    assert spec.controller.elastic_slices == 1
    assert spec.controller.main_container_name == "elastic-main"
    assert spec.max_restarts == 0
    assert spec.vms_per_slice == 2


def _xpk_inputs() -> PathwaysJobSpec:
    """The spec xpk 1.7 renders its golden PathwaysJob from, built field by field."""
    command = (SAMPLES_DIR / XPK_PATHWAYSJOB).read_text()
    container_command = yaml.safe_load(command)["spec"]["controller"]["template"]["spec"]["containers"][0][
        "command"
    ]
    template = {
        "spec": {
            "containers": [
                {
                    "name": "jax-tpu",
                    "image": "gcr.io/golden-project/dry-run-runner:prefix-current",
                    "imagePullPolicy": "Always",
                    "securityContext": {"privileged": True},
                    "command": container_command,
                    "resources": {"limits": {"cpu": "24", "memory": "100G"}},
                    "volumeMounts": [{"mountPath": "/tmp", "name": "shared-tmp"}],
                }
            ],
            "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu-np"},
            "hostNetwork": True,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "restartPolicy": "Never",
            "volumes": [{"hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}, "name": "shared-tmp"}],
        }
    }
    return PathwaysJobSpec(
        name="golden-workload",
        labels={
            "kueue.x-k8s.io/queue-name": "multislice-queue",
            "xpk.google.com/workload": "golden-workload",
        },
        max_restarts=0,
        workers=WorkerSpec(
            type="ct5p-hightpu-4t",
            topology="2x2x1",
            num_slices=1,
            max_slice_restarts=1,
            termination_grace_period_seconds=30,
            priority_class_name="medium",
        ),
        pathways_dir="gs://cloud-pathways-staging/tmp",
        controller=ControllerSpec(
            deployment_mode="default", main_container_name="jax-tpu", elastic_slices=0, template=template
        ),
    )


def test_xpk_golden_inputs_render_the_xpk_pathwaysjob(
    load_sample: Load, assert_valid_manifest: Validate
) -> None:
    # xpk leaves empty YAML keys (customComponents:, nodeSelector:, metadata:, env:) that load as null.
    expected = _drop_nulls(load_sample(XPK_PATHWAYSJOB))
    spec = _xpk_inputs()
    assert spec.problems() == []
    rendered = spec.to_pathwaysjob()
    assert rendered == expected
    assert_valid_manifest(rendered)


def test_xpk_golden_file_loads_to_the_same_spec(load_sample: Load, assert_valid_manifest: Validate) -> None:
    spec = PathwaysJobSpec.from_dict(load_sample(XPK_PATHWAYSJOB))
    assert spec.custom_components is None
    assert spec.workers.node_selector is None
    assert spec.to_pathwaysjob() == _xpk_inputs().to_pathwaysjob()
    assert_valid_manifest(spec.to_pathwaysjob())
    assert spec.problems() == []


# ---------------------------------------------------------------------- from_dict / from_yaml


def test_from_dict_accepts_a_bare_spec(load_sample: Load) -> None:
    manifest = load_sample("upstream-basic.pathwaysjob.yaml")
    spec = PathwaysJobSpec.from_dict(manifest["spec"], name="other", namespace="ml")
    assert spec.name == "other" and spec.namespace == "ml"
    assert spec.to_pathwaysjob()["spec"] == manifest["spec"]


def test_from_dict_ignores_status_and_server_metadata(load_sample: Load) -> None:
    manifest = load_sample("upstream-basic.pathwaysjob.yaml")
    live = copy.deepcopy(manifest)
    live["metadata"].update(
        uid="1234", resourceVersion="7", generation=1, creationTimestamp="2025-01-01T00:00:00Z"
    )
    live["status"] = {"terminalState": "", "restarts": 0}
    assert PathwaysJobSpec.from_dict(live).to_pathwaysjob() == manifest


def test_from_dict_lists_every_structural_problem() -> None:
    with pytest.raises(PathwaysSpecError) as excinfo:
        PathwaysJobSpec.from_dict(
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {"name": "x", "generateName": "x-"},
                "spec": {
                    "workers": [{"type": "ct6e-standard-4t", "topology": "4x4", "numslices": 2}],
                    "controller": {"deploymentMode": "default", "mainContainer": "main"},
                    "customComponents": [{"image": "x"}],
                    "pathwayDir": "gs://b/x",
                },
            }
        )
    fields = [problem.field for problem in excinfo.value.problems]
    assert fields == [
        "metadata.generateName",
        "spec.pathwayDir",
        "spec.workers[0].numslices",
        "spec.controller.mainContainer",
        "spec.customComponents[0].componentType",
    ]
    message = str(excinfo.value)
    assert "did you mean 'numSlices'?" in message
    assert "did you mean 'pathwaysDir'?" in message
    assert len(message.splitlines()) == 6


@pytest.mark.parametrize(
    ("workers", "field"),
    [
        (None, "spec.workers"),
        ([], "spec.workers"),
        ([{"type": "ct6e-standard-4t", "topology": "4x4"}] * 2, "spec.workers"),
        ({"type": "ct6e-standard-4t"}, "spec.workers"),
        (["ct6e-standard-4t"], "spec.workers[0]"),
        ([{"topology": "4x4"}], "spec.workers[0].type"),
    ],
)
def test_from_dict_needs_exactly_one_worker(workers: Any, field: str) -> None:
    spec: dict[str, Any] = {"controller": {"deploymentMode": "default"}}
    if workers is not None:
        spec["workers"] = workers
    with pytest.raises(PathwaysSpecError) as excinfo:
        PathwaysJobSpec.from_dict(
            {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "x"}, "spec": spec}
        )
    assert [p.field for p in excinfo.value.problems] == [field]


@pytest.mark.parametrize(
    ("document", "field", "text"),
    [
        ({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "spec": {}}, "kind", "to_jobset"),
        (
            {"apiVersion": "pathways-job.pathways.domain/v2", "kind": KIND, "spec": {}},
            "apiVersion",
            API_VERSION,
        ),
        ({"apiVersion": "v1", "kind": "Pod", "spec": {}}, "kind", "PathwaysJob"),
        ({"apiVersion": API_VERSION, "kind": KIND}, "spec", "missing"),
        ({"apiVersion": API_VERSION, "kind": KIND, "metadata": [], "spec": {}}, "metadata", "mapping"),
        (["not", "a", "mapping"], "<document>", "mapping"),
    ],
)
def test_from_dict_rejects_other_documents(document: Any, field: str, text: str) -> None:
    with pytest.raises(PathwaysSpecError) as excinfo:
        PathwaysJobSpec.from_dict(document)
    assert excinfo.value.problems[0].field == field
    assert text in str(excinfo.value)


def test_from_yaml_needs_exactly_one_document() -> None:
    with pytest.raises(PathwaysSpecError, match="contains 2 documents"):
        PathwaysJobSpec.from_yaml("kind: PathwaysJob\n---\nkind: PathwaysJob\n")
    with pytest.raises(PathwaysSpecError, match="contains 0 documents"):
        PathwaysJobSpec.from_yaml("# nothing\n")
    with pytest.raises(PathwaysSpecError, match="not valid YAML"):
        PathwaysJobSpec.from_yaml("spec: [unclosed\n")


def test_from_yaml_skips_empty_documents(load_sample: Load) -> None:
    text = "---\n" + (SAMPLES_DIR / "upstream-basic.pathwaysjob.yaml").read_text() + "\n---\n"
    assert PathwaysJobSpec.from_yaml(text).to_pathwaysjob() == load_sample("upstream-basic.pathwaysjob.yaml")


def test_to_yaml_writes_multiline_strings_as_blocks(load_sample: Load) -> None:
    text = PathwaysJobSpec.from_dict(load_sample("upstream-basic.pathwaysjob.yaml")).to_yaml()
    assert "- |\n" in text
    assert yaml.safe_load(text) == load_sample("upstream-basic.pathwaysjob.yaml")


def test_sub_specs_load_from_crd_mappings() -> None:
    assert WorkerSpec.from_dict(
        {"type": "ct4p-hightpu-4t", "topology": "2x2x2", "numSlices": 2}
    ) == WorkerSpec("ct4p-hightpu-4t", "2x2x2", 2)
    assert ControllerSpec.from_dict({"deploymentMode": "default", "elasticSlices": 1}).elastic_slices == 1
    assert CustomComponent.from_dict({"componentType": "worker", "customFlags": ["--a=1"]}).custom_flags == [
        "--a=1"
    ]
    with pytest.raises(PathwaysSpecError, match=r"spec\.workers\[0\]\.topology"):
        WorkerSpec.from_dict({"type": "ct4p-hightpu-4t"})


def test_rendering_does_not_share_state() -> None:
    spec = PathwaysJobSpec.from_tpu_type(
        "v6e-16", name="x", pathways_dir="gs://my-bucket/x", template=copy.deepcopy(USER_TEMPLATE)
    )
    manifest = spec.to_pathwaysjob()
    manifest["spec"]["controller"]["template"]["spec"]["containers"][0]["name"] = "changed"
    manifest["spec"]["workers"][0]["numSlices"] = 9
    assert spec.controller.template == USER_TEMPLATE
    assert spec.workers.num_slices == 1


def test_error_lists_every_problem_and_pickles() -> None:
    problems = [SpecProblem("a.b", "is wrong", "fix a"), SpecProblem("c", "is bad", "fix c")]
    error = PathwaysSpecError(problems)
    assert isinstance(error, ValueError)
    assert str(error).splitlines() == [
        "invalid PathwaysJob spec: 2 problems",
        "- a.b: is wrong. Fix: fix a",
        "- c: is bad. Fix: fix c",
    ]
    restored = pickle.loads(pickle.dumps(error))
    assert restored.problems == problems and str(restored) == str(error)
