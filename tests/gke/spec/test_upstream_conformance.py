"""Conformance with the upstream controllers: each test names the upstream file whose rule it pins.

The tables below were generated from the upstream sources, not from this provider's data files:
``CONTROLLER_TOPOLOGIES`` from pathways-job v0.1.4 ``pathwaysjob_controller.go``
(``ValidTpuTopologiesMap``, in the controller's order) and ``tests/data/upstream/gke-tpu-types.tsv``
from xpk's ``system_characteristics.py`` (GKE's TPU node pools).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from airflow_provider_pathways.gke import tpu
from airflow_provider_pathways.gke.spec import PathwaysJobSpec, WorkerSpec
from airflow_provider_pathways.gke.spec.validation import machine_problems
from airflow_provider_pathways.gke.task_job import default_job_name

UPSTREAM = Path(__file__).resolve().parents[2] / "data" / "upstream"
CRD_MACHINE_TYPES = (  # pathwaysjob_types.go: +kubebuilder:validation:Enum of MachineType
    "tpu7x-standard-4t",
    "ct6e-standard-4t",
    "ct6e-standard-8t",
    "ct5p-hightpu-4t",
    "ct5lp-hightpu-4t",
    "ct5lp-hightpu-8t",
    "ct4p-hightpu-4t",
)
CONTROLLER_TOPOLOGIES: dict[str, str] = {
    "tpu7x-standard-4t": (
        "12x12x12 12x12x16 12x12x20 12x12x24 12x12x28 12x12x36 12x16x16 12x16x20 12x16x24 12x16x28 "
        "12x20x20 12x20x24 12x24x24 16x16x16 16x16x20 16x16x24 16x16x32 16x20x28 16x24x24 2x2x1 2x2x2 "
        "2x2x4 2x4x4 4x12x116 4x12x12 4x12x124 4x12x20 4x12x28 4x12x44 4x12x52 4x12x68 4x12x76 4x12x92 "
        "4x20x20 4x20x28 4x20x44 4x20x52 4x20x68 4x20x76 4x28x28 4x28x44 4x28x52 4x4x116 4x4x12 4x4x124 "
        "4x4x148 4x4x164 4x4x172 4x4x188 4x4x20 4x4x212 4x4x236 4x4x244 4x4x28 4x4x4 4x4x44 4x4x52 4x4x68 "
        "4x4x76 4x4x8 4x4x92 4x8x116 4x8x12 4x8x124 4x8x148 4x8x164 4x8x172 4x8x188 4x8x20 4x8x28 4x8x44 "
        "4x8x52 4x8x68 4x8x76 4x8x8 4x8x92 8x12x12 8x12x16 8x12x20 8x12x28 8x12x44 8x12x52 8x16x16 "
        "8x16x20 8x16x28 8x16x44 8x20x20 8x20x28 8x8x12 8x8x16 8x8x20 8x8x28 8x8x44 8x8x52 8x8x68 8x8x76 "
        "8x8x8 8x8x92"
    ),
    "ct6e-standard-4t": "1x1 2x2 2x4 4x4 4x8 8x8 8x16 16x16",
    "ct6e-standard-8t": "2x4",
    "ct5p-hightpu-4t": (
        "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x4x12 4x8x8 4x4x20 4x8x12 4x4x28 8x8x8 4x12x12 4x8x20 "
        "4x4x44 8x8x12 4x4x52 4x8x28 4x12x20 8x8x16 4x4x68 8x12x12 4x4x76 8x8x20 4x12x28 4x8x44 4x4x92 "
        "8x12x16 4x20x20 4x8x52 12x12x12 8x8x28 4x4x116 8x12x20 4x4x124 8x16x16 4x12x44 4x8x68 4x20x28 "
        "12x12x16 4x4x148 4x8x76 4x12x52 8x16x20 4x4x164 8x12x28 4x4x172 8x8x44 12x12x20 4x8x92 4x4x188 "
        "12x16x16 4x28x28 8x20x20 4x12x68 8x8x52 4x4x212 12x12x24 4x20x44 8x16x28 4x12x76 4x8x116 4x4x236 "
        "12x16x20 4x4x244 4x8x124 12x12x28 16x16x16 4x20x52 8x12x44 8x8x68 4x12x92 8x20x28 12x16x24 "
        "4x8x148 12x20x20 8x8x76 4x28x44 8x12x52 16x16x20 12x12x36 4x8x164 12x16x28 4x20x68 4x8x172 "
        "4x12x116 8x16x44 12x20x24 4x28x52 8x8x92 4x12x124 4x8x188 4x20x76 16x16x24 12x24x24 16x20x28"
    ),
    "ct5lp-hightpu-4t": "2x2 2x4 4x4 4x8 8x8 8x16 16x16",
    "ct5lp-hightpu-8t": "2x4",
    "ct4p-hightpu-4t": "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x8x8 4x4x16 8x8x8 8x8x12 8x8x16 4x16x16 8x16x16",
}
# GKE's single-host v5e/v6e node pools that xpk's table leaves out (GKE documentation, "Plan TPUs").
GKE_SINGLE_HOST = {
    ("ct5lp-hightpu-1t", "1x1"),
    ("ct5lp-hightpu-4t", "2x2"),
    ("ct5lp-hightpu-8t", "2x4"),
    ("ct6e-standard-8t", "2x4"),
}
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _gke_rows() -> list[dict[str, str]]:
    lines = [
        line for line in (UPSTREAM / "gke-tpu-types.tsv").read_text().splitlines() if not line.startswith("#")
    ]
    return list(csv.DictReader(lines, delimiter="\t"))


def _candidates() -> list[str]:
    """Every topology any table knows, plus shapes none does."""
    known = {t for shapes in CONTROLLER_TOPOLOGIES.values() for t in shapes.split()}
    known |= {row["topology"] for row in _gke_rows()}
    return sorted(known | {"3x3", "1x1x1", "2x2x3", "4x4x5", "16x16x16x2", "4by4", ""})


def _rejected_topology(machine_type: str, topology: str, kind: str) -> bool:
    fields = [p.field for p in machine_problems(WorkerSpec(machine_type, topology), kind)]
    assert "spec.workers[0].type" not in fields, fields
    return "spec.workers[0].topology" in fields


def _spec(machine_type: str, topology: str, **changes: object) -> PathwaysJobSpec:
    spec = PathwaysJobSpec(
        name="conform",
        workers=WorkerSpec(machine_type, topology, num_slices=2),
        pathways_dir="gs://my-bucket/x",
    )
    for key, value in changes.items():
        setattr(spec, key, value)
    return spec


@pytest.mark.parametrize("machine_type", CRD_MACHINE_TYPES)
def test_pathwaysjob_accepts_exactly_the_controllers_topologies(machine_type: str) -> None:
    """pathwaysjob_controller.go ValidTpuTopologiesMap: every machine type x topology, both ways."""
    accepted = set(CONTROLLER_TOPOLOGIES[machine_type].split())
    for topology in _candidates():
        rejected = _rejected_topology(machine_type, topology, "PathwaysJob")
        assert rejected == (topology not in accepted), (machine_type, topology)
    assert set(tpu.topologies_for(machine_type, "PathwaysJob")) == accepted


def test_controller_map_has_the_crd_machine_types() -> None:
    """pathwaysjob_controller.go ValidTpuTopologiesMap keys = pathwaysjob_types.go MachineType enum."""
    assert set(CONTROLLER_TOPOLOGIES) == set(CRD_MACHINE_TYPES) == set(tpu.machine_types())
    for machine_type in ("ct6e-standard-1t", "tpu7x-standard-1t", "n2-standard-8"):
        (problem,) = machine_problems(WorkerSpec(machine_type, "1x1"), "PathwaysJob")
        assert problem.field == "spec.workers[0].type"


@pytest.mark.parametrize(
    ("machine_type", "topology", "accepted"),
    [
        ("ct4p-hightpu-4t", "4x4x12", False),  # v4-384 in GKE's table; not in the controller's map
        ("ct4p-hightpu-4t", "4x16x16", True),  # in the controller's map; not in GKE's table
        ("ct4p-hightpu-4t", "4x4x16", True),
        ("ct5p-hightpu-4t", "4x8x196", False),
        ("tpu7x-standard-4t", "4x44x52", False),
        ("ct6e-standard-4t", "1x1", True),
    ],
)
def test_pathwaysjob_cases_from_the_field(machine_type: str, topology: str, accepted: bool) -> None:
    """pathwaysjob_controller.go ValidTpuTopologiesMap: the pairs where GKE's table and the map differ."""
    problems = _spec(machine_type, topology).problems("PathwaysJob")
    assert (problems == []) == accepted, problems
    if not accepted:
        (problem,) = problems
        assert problem.field == "spec.workers[0].topology"
        assert "ValidTpuTopologiesMap" in problem.problem


def test_from_tpu_type_v4_384_is_a_jobset_slice() -> None:
    """pathwaysjob_controller.go ValidTpuTopologiesMap lacks 4x4x12; GKE (tpu-types.tsv) has it."""
    spec = PathwaysJobSpec.from_tpu_type("v4-384", name="big", pathways_dir="gs://my-bucket/x")
    assert (spec.workers.type, spec.workers.topology) == ("ct4p-hightpu-4t", "4x4x12")
    assert spec.problems("JobSet") == []
    (problem,) = spec.problems("PathwaysJob")
    assert "kind='JobSet'" in problem.fix


def test_jobset_accepts_exactly_gkes_table() -> None:
    """xpk system_characteristics.py (tpu-types.tsv) plus GKE's single-host machine types."""
    offered: dict[str, set[str]] = {}
    for row in _gke_rows():
        offered.setdefault(row["gce_machine_type"], set()).add(row["topology"])
    for machine_type, topology in GKE_SINGLE_HOST:
        offered.setdefault(machine_type, set()).add(topology)
    assert set(offered) == set(tpu.gke_machine_types())
    for machine_type, topologies in offered.items():
        for topology in _candidates():
            rejected = _rejected_topology(machine_type, topology, "JobSet")
            assert rejected == (topology not in topologies), (machine_type, topology)


@pytest.mark.parametrize("row", _gke_rows(), ids=lambda row: row["device_type_key"])
def test_jobset_renders_gkes_shape(row: dict[str, str]) -> None:
    """xpk system_characteristics.py: VMs per slice and chips per VM of every device type."""
    spec = PathwaysJobSpec.from_tpu_type(
        row["device_type_key"], name="conform", pathways_dir="gs://my-bucket/x"
    )
    assert spec.problems("JobSet") == []
    worker = spec.to_jobset()["spec"]["replicatedJobs"][1]["template"]["spec"]
    assert worker["parallelism"] == worker["completions"] == int(row["vms_per_slice"])
    pod = worker["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["google.com/tpu"] == row["chips_per_vm"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": row["gke_accelerator"],
        "cloud.google.com/gke-tpu-topology": row["topology"],
    }


@pytest.mark.parametrize(
    "machine_type", ["ct6e-standard-1t", "ct6e-standard-8t", "ct5lp-hightpu-1t", "ct5lp-hightpu-8t"]
)
def test_jobset_takes_single_host_machine_types(machine_type: str) -> None:
    """GKE single-host v5e/v6e node pools: -1t (1x1, 1 chip), -8t (2x4, one VM of 8 chips)."""
    topology = "1x1" if machine_type.endswith("-1t") else "2x4"
    spec = _spec(machine_type, topology)
    assert spec.problems("JobSet") == []
    worker = spec.to_jobset()["spec"]["replicatedJobs"][1]["template"]["spec"]
    assert worker["parallelism"] == 1
    chips = worker["template"]["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"]
    assert chips == ("1" if machine_type.endswith("-1t") else "8")


def test_validate_spec_false_renders_a_newer_machine_type() -> None:
    """The escape hatch: a machine type newer than the tables renders from its name."""
    spec = _spec("ct6e-standard-16t", "4x4")
    assert [p.field for p in spec.problems("JobSet")] == ["spec.workers[0].type"]
    worker = spec.to_jobset()["spec"]["replicatedJobs"][1]["template"]["spec"]
    assert worker["parallelism"] == 1
    assert worker["template"]["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"] == "16"


@pytest.mark.parametrize("kind", ["PathwaysJob", "JobSet"])
def test_names_of_22_characters_pass_and_23_fail(kind: str) -> None:
    """jobset_controller.go CoordinatorEndpoint writes '<name>-pathways-head-0-0.<name>' into a label;
    jobset_webhook.go validateCoordinatorLabelValue rejects values over 63 characters."""
    ok = _spec("ct6e-standard-4t", "4x4", name="a" * 22)
    assert ok.problems(kind) == []
    assert len(f"{ok.name}-pathways-head-0-0.{ok.name}") == 63
    long = _spec("ct6e-standard-4t", "4x4", name="a" * 23)
    (problem,) = long.problems(kind)
    assert problem.field == "metadata.name"
    assert "22" in problem.fix and "jobset.sigs.k8s.io/coordinator" in problem.problem


@pytest.mark.parametrize(
    "task_id",
    [
        "start_pathways",
        "train",
        "a" * 250,
        "Extract.Transform-and_Load_the_ENTIRE_dataset_for_training_run_42",
        "123_starts_with_digits",
        "___",
        "group.nested_group.very_long_task_name_inside_a_task_group",
    ],
)
def test_default_names_fit_for_long_task_ids(task_id: str) -> None:
    """jobset_webhook.go: the default name passes validateCoordinatorLabelValue (<= 22) and is DNS-1035."""
    runs = [f"scheduled__2026-01-0{day}T00:00:00+00:00" for day in range(1, 4)]
    names = {
        default_job_name("a_dag_with_a_long_name" * 5, task_id, run, index)
        for run in runs
        for index in (-1, 0, 7)
    }
    assert len(names) == 9  # one per task instance
    for name in names:
        assert len(name) <= 22 and DNS1035.match(name), name
        for kind in ("PathwaysJob", "JobSet"):
            assert _spec("ct6e-standard-4t", "4x4", name=name).problems(kind) == []
    again = default_job_name("a_dag_with_a_long_name" * 5, task_id, runs[0], -1)
    assert again == default_job_name("a_dag_with_a_long_name" * 5, task_id, runs[0], -1)


def test_the_example_dags_default_name_was_too_long_and_is_not_any_more() -> None:
    """jobset_webhook.go validateCoordinatorLabelValue: 'start-pathways-29babb0b' (23) is refused."""
    assert [p.field for p in _spec("ct6e-standard-4t", "4x4", name="start-pathways-29babb0b").problems()] == [
        "metadata.name"
    ]
    name = default_job_name("example_pathways_batch_inference", "start_pathways", "manual__x", -1)
    assert name.startswith("start-pathway-") and len(name) == 22


@pytest.mark.parametrize("kind", ["PathwaysJob", "JobSet"])
def test_replicas_times_parallelism_fits_int32(kind: str) -> None:
    """jobset_webhook.go ValidateCreate: replicas x parallelism must not exceed MaxInt32."""
    spec = _spec("ct6e-standard-4t", "4x4")  # 4 VMs per slice
    spec.workers.num_slices = (2**31 - 1) // 4
    assert spec.problems(kind) == []
    spec.workers.num_slices = 1_000_000_000
    (problem,) = spec.problems(kind)
    assert problem.field == "spec.workers[0].numSlices" and "2147483647" in problem.problem
    spec.workers.num_slices = 2**31
    assert [p.field for p in spec.problems(kind)] == ["spec.workers[0].numSlices"]
