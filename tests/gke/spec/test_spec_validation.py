"""validate() and problems(): every invalid value is reported with its field path and a fix."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_pathways.gke.spec import (
    COMPONENT_TYPES,
    ControllerSpec,
    CustomComponent,
    PathwaysJobSpec,
    PathwaysSpecError,
    WorkerSpec,
)

Validate = Callable[[dict[str, Any]], None]


def _template(*containers: dict[str, Any], **pod: Any) -> dict[str, Any]:
    return {"spec": {"containers": list(containers), **pod}}


MAIN = {"name": "main", "image": "python:3.12"}


def valid_spec() -> PathwaysJobSpec:
    """A spec with every optional field set to a valid value."""
    return PathwaysJobSpec(
        name="train-job",
        namespace="ml-team",
        labels={"kueue.x-k8s.io/queue-name": "tpu-queue", "team": ""},
        annotations={"example.com/note": "free text: {json} ok"},
        workers=WorkerSpec(
            type="ct6e-standard-4t",
            topology="4x4",
            num_slices=4,
            max_slice_restarts=2,
            termination_grace_period_seconds=30,
            priority_class_name="high-priority",
            node_selector={"cloud.google.com/reservation-name": "my-res"},
        ),
        controller=ControllerSpec(
            deployment_mode="default",
            main_container_name="main",
            elastic_slices=1,
            enable_metrics_collection=True,
            template=_template(MAIN, {"name": "helper", "image": "busybox"}, restartPolicy="Never"),
        ),
        pathways_dir="gs://my-bucket/pathways/run-1",
        pathways_version="jax-0.5.3",
        max_restarts=2,
        custom_components=[
            CustomComponent(
                "worker", custom_flags=["--xla_flag=true"], custom_env=[{"name": "A", "value": "1"}]
            ),
            CustomComponent(
                "colocated_python_sidecar", image="us-docker.pkg.dev/p/r/sidecar@sha256:" + "a" * 64
            ),
        ],
    )


def test_valid_spec_has_no_problems(assert_valid_manifest: Validate) -> None:
    spec = valid_spec()
    assert spec.problems() == []
    assert spec.validate() is spec
    assert_valid_manifest(spec.to_pathwaysjob())


def _with(**changes: Any) -> Callable[[], PathwaysJobSpec]:
    """A factory of valid_spec() with fields replaced; dotted keys reach into workers / controller."""

    def build() -> PathwaysJobSpec:
        spec = valid_spec()
        for key, value in changes.items():
            if key.startswith("workers__"):
                spec.workers = dataclasses.replace(spec.workers, **{key.removeprefix("workers__"): value})
            elif key.startswith("controller__"):
                spec.controller = dataclasses.replace(
                    spec.controller, **{key.removeprefix("controller__"): value}
                )
            else:
                setattr(spec, key, value)
        return spec

    return build


INVALID = [
    ("no-name", _with(name=None), "metadata.name", "is missing"),
    ("uppercase-name", _with(name="Train_Job"), "metadata.name", "'train-job'"),
    ("name-starts-with-digit", _with(name="1job"), "metadata.name", "start with a letter"),
    ("name-too-long", _with(name="a" * 23), "metadata.name", "at most 22 characters"),
    ("bad-namespace", _with(namespace="ML_Team"), "metadata.namespace", "namespace"),
    ("bad-label-key", _with(labels={"bad key": "x"}), "metadata.labels['bad key']", "key"),
    ("long-label-value", _with(labels={"team": "x" * 64}), "metadata.labels['team']", "63"),
    ("int-label-value", _with(labels={"replicas": 3}), "metadata.labels['replicas']", "string"),
    ("bad-annotation-key", _with(annotations={"/x": "y"}), "metadata.annotations['/x']", "prefix"),
    ("unknown-machine", _with(workers__type="ct6e-standard-1t"), "spec.workers[0].type", "ct6e-standard-4t"),
    (
        "device-type-as-machine",
        _with(workers__type="v6e-16"),
        "spec.workers[0].type",
        "from_tpu_type('v6e-16')",
    ),
    ("bad-topology", _with(workers__topology="3x3"), "spec.workers[0].topology", "2x2, 2x4, 4x4"),
    ("3d-topology-on-v6e", _with(workers__topology="2x2x2"), "spec.workers[0].topology", "16x16"),
    ("malformed-topology", _with(workers__topology="4by4"), "spec.workers[0].topology", "AxB"),
    (
        "8t-topology",
        _with(workers__type="ct6e-standard-8t", workers__topology="4x4"),
        "spec.workers[0].topology",
        "use one of: 2x4",
    ),
    (
        "v5p-2d-topology",
        _with(workers__type="ct5p-hightpu-4t", workers__topology="4x4"),
        "spec.workers[0].topology",
        "2x2x1",
    ),
    ("zero-slices", _with(workers__num_slices=0), "spec.workers[0].numSlices", "1 or more"),
    ("string-slices", _with(workers__num_slices="2"), "spec.workers[0].numSlices", "integer"),
    (
        "negative-slice-restarts",
        _with(workers__max_slice_restarts=-1),
        "spec.workers[0].maxSliceRestarts",
        "0",
    ),
    (
        "negative-grace",
        _with(workers__termination_grace_period_seconds=-5),
        "spec.workers[0].terminationGracePeriodSeconds",
        "0 or more",
    ),
    (
        "bad-priority-class",
        _with(workers__priority_class_name="High Prio"),
        "spec.workers[0].priorityClassName",
        "",
    ),
    (
        "int-node-selector-value",
        _with(workers__node_selector={"pool": 1}),
        "spec.workers[0].nodeSelector['pool']",
        "quote",
    ),
    (
        "conflicting-node-selector",
        _with(workers__node_selector={"cloud.google.com/gke-tpu-topology": "2x4"}),
        "spec.workers[0].nodeSelector['cloud.google.com/gke-tpu-topology']",
        "remove",
    ),
    ("negative-max-restarts", _with(max_restarts=-1), "spec.maxRestarts", "0 or more"),
    ("bool-max-restarts", _with(max_restarts=True), "spec.maxRestarts", "integer"),
    ("bad-version", _with(pathways_version="jax 0.5"), "spec.pathwaysVersion", "jax-0.5.3"),
    ("no-pathways-dir", _with(pathways_dir=None), "spec.pathwaysDir", "gs://"),
    ("s3-pathways-dir", _with(pathways_dir="s3://bucket/x"), "spec.pathwaysDir", "gs://"),
    ("placeholder-bucket", _with(pathways_dir="gs://<test-bucket>/tmp"), "spec.pathwaysDir", "bucket"),
    ("short-bucket", _with(pathways_dir="gs://ab/x"), "spec.pathwaysDir", "3 to 63"),
    ("google-bucket", _with(pathways_dir="gs://my-google-bucket"), "spec.pathwaysDir", "google"),
    (
        "bad-mode",
        _with(controller__deployment_mode="colocated"),
        "spec.controller.deploymentMode",
        "colocate",
    ),
    ("elastic-all-slices", _with(controller__elastic_slices=4), "spec.controller.elasticSlices", "at most 3"),
    ("negative-elastic", _with(controller__elastic_slices=-1), "spec.controller.elasticSlices", "0 or more"),
    (
        "string-metrics-flag",
        _with(controller__enable_metrics_collection="yes"),
        "spec.controller.enableMetricsCollection",
        "bool",
    ),
    (
        "main-container-not-in-template",
        _with(controller__main_container_name="trainer"),
        "spec.controller.mainContainerName",
        "one of main, helper",
    ),
    (
        "template-without-containers",
        _with(controller__template={"spec": {"containers": []}}),
        "spec.controller.template.spec.containers",
        "at least one container",
    ),
    (
        "pod-spec-not-wrapped",
        _with(controller__template={"containers": [MAIN]}),
        "spec.controller.template.containers",
        "under 'spec:'",
    ),
    (
        "container-without-image",
        _with(controller__template=_template({"name": "main"})),
        "spec.controller.template.spec.containers[0].image",
        "image",
    ),
    (
        "container-without-name",
        _with(controller__template=_template(MAIN, {"image": "busybox"})),
        "spec.controller.template.spec.containers[1].name",
        "name",
    ),
    (
        "container-named-like-the-proxy",
        _with(controller__template=_template(MAIN, {"name": "pathways-proxy", "image": "busybox"})),
        "spec.controller.template.spec.containers[1].name",
        "rename",
    ),
    (
        "duplicate-container-names",
        _with(controller__template=_template(MAIN, MAIN)),
        "spec.controller.template.spec.containers[1].name",
        "unique",
    ),
    (
        "numeric-env-value",
        _with(controller__template=_template({**MAIN, "env": [{"name": "N", "value": 8}]})),
        "spec.controller.template.spec.containers[0].env[0].value",
        'value: "8"',
    ),
    (
        "restart-policy-always",
        _with(controller__template=_template(MAIN, restartPolicy="Always")),
        "spec.controller.template.spec.restartPolicy",
        "Never or OnFailure",
    ),
    (
        "five-components",
        _with(
            custom_components=[
                *(CustomComponent(t, image="busybox") for t in COMPONENT_TYPES),
                CustomComponent("worker"),
            ]
        ),
        ("spec.customComponents", "spec.customComponents[4].componentType"),
        "at most 4",
    ),
    (
        "duplicate-component",
        _with(custom_components=[CustomComponent("worker"), CustomComponent("worker")]),
        "spec.customComponents[1].componentType",
        "merge",
    ),
    (
        "unknown-component",
        _with(custom_components=[CustomComponent("rm")]),
        "spec.customComponents[0].componentType",
        "pathways_server",
    ),
    (
        "placeholder-image",
        _with(custom_components=[CustomComponent("colocated_python_sidecar", image="<sidecar image>")]),
        "spec.customComponents[0].image",
        "image reference",
    ),
    (
        "flag-not-text",
        _with(custom_components=[CustomComponent("worker", custom_flags=["--a=1", 2])]),  # type: ignore[list-item]
        "spec.customComponents[0].customFlags[1]",
        "--name=value",
    ),
]


def test_enough_distinct_invalid_specs() -> None:
    assert len({case[0] for case in INVALID}) == len(INVALID) >= 20


@pytest.mark.parametrize(
    ("build", "field", "fix_text"), [case[1:] for case in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_spec_is_rejected(
    build: Callable[[], PathwaysJobSpec], field: str | tuple[str, ...], fix_text: str
) -> None:
    fields = (field,) if isinstance(field, str) else field
    spec = build()
    with pytest.raises(PathwaysSpecError) as excinfo:
        spec.validate()
    problems = excinfo.value.problems
    assert tuple(p.field for p in problems) == fields, problems
    problem = problems[0]
    assert fix_text in f"{problem.problem} {problem.fix}"
    assert all(p.fix for p in problems)
    lines = str(excinfo.value).splitlines()
    assert len(lines) == 1 + len(fields)
    for line, name in zip(lines[1:], fields, strict=True):
        assert line.startswith(f"- {name}: ") and ". Fix: " in line


def test_several_errors_are_all_listed() -> None:
    spec = PathwaysJobSpec(
        name="Bad_Name",
        workers=WorkerSpec(type="ct6e-standard-4t", topology="3x3", num_slices=0),
        controller=ControllerSpec(deployment_mode="nope", elastic_slices=-1),
        pathways_dir="/local/dir",
        max_restarts=-2,
        custom_components=[CustomComponent("rm"), CustomComponent("worker"), CustomComponent("worker")],
    )
    with pytest.raises(PathwaysSpecError) as excinfo:
        spec.validate()
    fields = [p.field for p in excinfo.value.problems]
    # Schema problems first (the CRD's enums and list keys), then the semantic ones.
    assert fields == [
        "spec.controller.deploymentMode",
        "spec.customComponents[0].componentType",
        "spec.customComponents[2].componentType",
        "metadata.name",
        "spec.workers[0].topology",
        "spec.workers[0].numSlices",
        "spec.maxRestarts",
        "spec.pathwaysDir",
        "spec.controller.elasticSlices",
    ]
    lines = str(excinfo.value).splitlines()
    assert lines[0] == "invalid PathwaysJob spec: 9 problems"
    assert [line.split(": ", 1)[0] for line in lines[1:]] == [f"- {f}" for f in fields]
    assert spec.problems() == excinfo.value.problems


def test_name_limit_is_the_coordinator_label() -> None:
    """jobset_webhook.go validateCoordinatorLabelValue: '<name>-pathways-head-0-0.<name>' <= 63."""
    for kind in ("PathwaysJob", "JobSet"):
        spec = valid_spec()
        spec.name = "a" * 22
        assert spec.problems(kind) == []
        spec.name = "a" * 23
        (problem,) = spec.problems(kind)
        assert problem.field == "metadata.name"
        assert "jobset.sigs.k8s.io/coordinator" in problem.problem and "63" in problem.problem
        assert "at most 22 characters" in problem.fix
        assert ("retry loop" in problem.problem) == (kind == "PathwaysJob")


def test_pod_names_never_bind_before_the_coordinator_label() -> None:
    """jobset_webhook.go: generated pod names '<name>-worker-<i>-<j>-xxxxx' are DNS-1035 labels; with
    int32 slice counts they stay within 63 characters for every 22-character name."""
    spec = valid_spec()
    spec.workers = WorkerSpec("ct5p-hightpu-4t", "4x12x124", num_slices=2**31 - 1)
    spec.controller = dataclasses.replace(spec.controller, elastic_slices=None)
    assert spec.max_name_length == 22
    assert len(f"{'a' * 22}-worker-{2**31 - 2}-{spec.vms_per_slice - 1}-xxxxx") <= 63


def test_placeholder_sample_loads_then_fails_validation(load_sample: Callable[[str], Any]) -> None:
    spec = PathwaysJobSpec.from_dict(load_sample("upstream-colocated-python.pathwaysjob.yaml"))
    assert {p.field for p in spec.problems()} == {"spec.pathwaysDir", "spec.customComponents[0].image"}


def test_headless_spec_needs_no_template() -> None:
    spec = PathwaysJobSpec.from_tpu_type("v5litepod-16", name="notebook", pathways_dir="gs://my-bucket/x")
    assert spec.problems() == []


def test_tpu7x_and_v4_specs_are_valid(assert_valid_manifest: Validate) -> None:
    for tpu_type in ("tpu7x-8", "tpu7x-128", "v4-16", "v5p-8", "v6e-256"):
        spec = PathwaysJobSpec.from_tpu_type(
            tpu_type, num_slices=2, name="job", pathways_dir="gs://my-bucket/x"
        )
        assert spec.problems() == [], tpu_type
        assert_valid_manifest(spec.to_pathwaysjob())


def test_schema_fixture_rejects_bad_manifests(assert_valid_manifest: Validate) -> None:
    manifest = valid_spec().to_pathwaysjob()
    manifest["spec"]["workers"][0]["type"] = "ct6e-standard-1t"
    with pytest.raises(AssertionError, match="ct6e-standard-1t"):
        assert_valid_manifest(manifest)
    manifest = valid_spec().to_pathwaysjob()
    manifest["spec"]["workers"][0]["numslices"] = 2
    with pytest.raises(AssertionError, match="numslices"):
        assert_valid_manifest(manifest)


def test_what_the_controller_accepts_in_custom_components_is_accepted(
    assert_valid_manifest: Validate,
) -> None:
    """pathwaysjob_controller.go v0.1.4: AppendCustomComponentFlags appends customFlags verbatim
    (absl also reads ``-name=value``); MakeComponentImage falls back to the default image when
    ``image`` is empty; MakeColocateHeadWithWorkersPythonInitContainers adds no sidecar without one."""
    spec = dataclasses.replace(
        valid_spec(),
        custom_components=[
            CustomComponent("worker", image="", custom_flags=["-v=1", "--xla_flag=true"]),
            CustomComponent("pathways_server", image="", custom_flags=["--vmodule=rm=2"]),
            CustomComponent("colocated_python_sidecar", image=""),
        ],
    )
    assert spec.problems() == []
    assert_valid_manifest(spec.to_pathwaysjob())
    jobset = spec.to_jobset()
    containers = [
        c
        for rjob in jobset["spec"]["replicatedJobs"]
        for c in rjob["template"]["spec"]["template"]["spec"].get("containers", [])
        + rjob["template"]["spec"]["template"]["spec"].get("initContainers", [])
    ]
    worker = next(c for c in containers if c["name"] == "pathways-worker")
    assert worker["image"] == "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.5.3"
    assert worker["args"][-2:] == ["-v=1", "--xla_flag=true"]
    assert "colocated-python-sidecar" not in {c["name"] for c in containers}
