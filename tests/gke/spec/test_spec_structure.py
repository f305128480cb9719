"""Structural validation against the CRD schema, and the bounded YAML loader."""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import pytest

from airflow_provider_pathways.gke.spec import PathwaysJobSpec, PathwaysSpecError
from airflow_provider_pathways.gke.spec.yaml_io import MAX_YAML_BYTES

MAIN = {"name": "main", "image": "python:3.12"}


def _spec(**pod: Any) -> PathwaysJobSpec:
    return PathwaysJobSpec.from_tpu_type(
        "v6e-16",
        name="train",
        pathways_dir="gs://my-bucket/x",
        template={"spec": {"containers": [dict(MAIN)], **pod}},
    )


def _fields(spec: PathwaysJobSpec, kind: str = "PathwaysJob") -> list[str]:
    return [p.field for p in spec.problems(kind)]


@pytest.mark.parametrize(
    ("pod", "field", "text"),
    [
        (
            {"initContainers": 5},
            "spec.controller.template.spec.initContainers",
            "must be a list, not integer 5",
        ),
        ({"volumes": "x"}, "spec.controller.template.spec.volumes", "must be a list"),
        ({"tolerations": "x"}, "spec.controller.template.spec.tolerations", "must be a list"),
        (
            {"nodeSelector": {"pool": 3}},
            "spec.controller.template.spec.nodeSelector['pool']",
            "must be a string",
        ),
        ({"hostNetwork": "yes"}, "spec.controller.template.spec.hostNetwork", "true or false"),
        (
            {"terminationGracePeriodSeconds": 2**70},
            "spec.controller.template.spec.terminationGracePeriodSeconds",
            "int64",
        ),
    ],
)
def test_pod_template_types_are_checked(pod: dict[str, Any], field: str, text: str) -> None:
    spec = _spec(**pod)
    for kind in ("PathwaysJob", "JobSet"):
        (problem,) = spec.problems(kind)
        assert problem.field == field and text in problem.problem, problem
    with pytest.raises(PathwaysSpecError) as excinfo:
        spec.to_jobset()  # refused with the field, not a TypeError
    assert field in str(excinfo.value)


def test_container_field_types_and_unknown_fields() -> None:
    spec = _spec()
    spec.controller.template["spec"]["containers"][0].update(
        command="python x.py",
        comand=["python"],
        ports=[{"containerPort": "80"}],
        resources={"limits": {"cpu": []}},
    )
    problems = {p.field: p for p in spec.problems()}
    base = "spec.controller.template.spec.containers[0]"
    assert "['python', 'x.py']" in problems[f"{base}.command"].fix
    assert "dropped" in problems[f"{base}.comand"].problem
    assert "integer" in problems[f"{base}.ports[0].containerPort"].problem
    assert "integer or a string" in problems[f"{base}.resources.limits['cpu']"].problem


def test_duplicate_keys_in_lists_the_api_server_merges() -> None:
    spec = _spec()
    spec.controller.template["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}, {"name": "A"}]
    (problem,) = spec.problems()
    assert problem.field == "spec.controller.template.spec.containers[0].env[1].name"


def test_structural_problems_come_first_and_semantic_ones_follow() -> None:
    spec = _spec(initContainers=5)
    spec.pathways_dir = "s3://x"
    spec.controller.deployment_mode = "sideways"
    assert _fields(spec) == [
        "spec.controller.deploymentMode",
        "spec.controller.template.spec.initContainers",
        "spec.pathwaysDir",
    ]


def test_manifest_without_controller_is_refused() -> None:
    """pathwaysjob_types.go: ``controller`` is required (the CRD's ``required: [controller, workers]``)."""
    manifest = _spec().to_pathwaysjob()
    del manifest["spec"]["controller"]
    with pytest.raises(PathwaysSpecError) as excinfo:
        PathwaysJobSpec.from_dict(manifest)
    (problem,) = excinfo.value.problems
    assert problem.field == "spec.controller" and "headless" in problem.problem


@pytest.mark.parametrize("source", [None, 42, ["a: 1"], {"spec": {}}])
def test_from_yaml_of_non_text(source: Any) -> None:
    with pytest.raises(PathwaysSpecError) as excinfo:
        PathwaysJobSpec.from_yaml(source)
    (problem,) = excinfo.value.problems
    assert problem.field == "<yaml>" and "not YAML text" in problem.problem


def test_from_yaml_accepts_utf8_bytes() -> None:
    text = _spec().to_yaml()
    assert PathwaysJobSpec.from_yaml(text.encode()) == PathwaysJobSpec.from_yaml(text)


def test_duplicate_keys_are_refused() -> None:
    text = (
        _spec().to_yaml().replace("  pathwaysDir: gs://my-bucket/x\n", "  pathwaysDir: gs://a-bucket/x\n" * 2)
    )
    with pytest.raises(
        PathwaysSpecError, match=r"duplicate key 'pathwaysDir' on line \d+ \(first on line \d+\)"
    ):
        PathwaysJobSpec.from_yaml(text)


def test_merge_keys_and_small_aliases_still_work() -> None:
    text = """
apiVersion: pathways-job.pathways.domain/v1
kind: PathwaysJob
metadata: {name: train}
spec:
  pathwaysDir: gs://my-bucket/x
  workers: [{type: ct6e-standard-4t, topology: 4x4, numSlices: 2}]
  controller:
    deploymentMode: default
    template:
      spec:
        containers:
        - &main {name: main, image: python:3.12, env: &env [{name: A, value: "1"}]}
        - {<<: *main, name: helper, env: *env}
"""
    spec = PathwaysJobSpec.from_yaml(text)
    assert spec.problems() == []
    assert [c["name"] for c in spec.controller.containers] == ["main", "helper"]


BOMB = "\n".join(
    [
        "apiVersion: pathways-job.pathways.domain/v1",
        "kind: PathwaysJob",
        "metadata: {name: bomb}",
        'x0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(f"x{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)),
        "spec:",
        "  workers: [{type: ct6e-standard-4t, topology: 4x4, numSlices: 1}]",
        "  controller:",
        "    deploymentMode: default",
        "    template: {spec: {containers: [{name: main, image: x, args: *a9}]}}",
    ]
)


def test_alias_bomb_is_refused_in_bounded_time_and_memory() -> None:
    assert len(BOMB.encode()) < 1000  # 9**10 strings once expanded
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(PathwaysSpecError) as excinfo:
            PathwaysJobSpec.from_yaml(BOMB)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "expands to" in str(excinfo.value) and "aliases" in str(excinfo.value)
    assert elapsed < 1.0 and peak < 4 * 1024 * 1024, (elapsed, peak)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("&a [*a]", "recursive"),
        ("[" * 200 + "]" * 200, "nested"),
        ("a: " + "x" * (MAX_YAML_BYTES + 1), "bytes"),
    ],
)
def test_hostile_documents_are_refused_before_they_are_expanded(text: str, message: str) -> None:
    """The bound that fires names itself; how fast is measured in bench/bench_spec_load.py."""
    with pytest.raises(PathwaysSpecError, match=message):
        PathwaysJobSpec.from_yaml(text)


def test_largest_accepted_document_loads_validates_and_renders() -> None:
    """Just under MAX_YAML_BYTES (its cost against plain PyYAML: bench/bench_spec_load.py)."""
    env = "".join(f"          - {{name: V{i}, value: '{'x' * 40}'}}\n" for i in range(2500))
    text = (
        _spec().to_yaml().replace("        - name: main\n", f"        - name: main\n          env:\n{env}", 1)
    )
    assert len(text.encode()) < MAX_YAML_BYTES
    spec = PathwaysJobSpec.from_yaml(text)
    assert spec.problems() == []
    assert (
        len(spec.to_pathwaysjob()["spec"]["controller"]["template"]["spec"]["containers"][0]["env"]) == 2500
    )
    spec.to_jobset()
