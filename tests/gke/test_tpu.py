"""The TPU type table and the machine types a PathwaysJob accepts."""

from __future__ import annotations

from importlib import resources

import pytest

from airflow_provider_pathways.gke import tpu


def test_bundled_table_keeps_its_source_line() -> None:
    text = resources.files("airflow_provider_pathways").joinpath("data/tpu-types.tsv").read_text("utf-8")
    assert text.startswith("# source: AI-Hypercomputer/xpk@")


def test_table_rows() -> None:
    rows = tpu.tpu_types()
    assert rows["v6e-16"] == tpu.TpuType(
        device_type="v6e-16",
        topology="4x4",
        vms_per_slice=4,
        chips_per_vm=4,
        gke_accelerator="tpu-v6e-slice",
        gce_machine_type="ct6e-standard-4t",
        pathways_tpu_version="tpuv6e",
        pathways_instance_type="tpuv6e:4x4",
    )
    assert rows["v5p-8"].gce_machine_type == "ct5p-hightpu-4t"
    assert rows["v4-16"].topology == "2x2x2"
    assert rows["v5litepod-16"].pathways_instance_type == "tpuv5e:4x4"
    assert rows["v6e-16"].chips == 16


def test_machine_types_are_the_crd_enum() -> None:
    assert set(tpu.machine_types()) == set(tpu.PATHWAYS_MACHINE_TYPES)
    assert len(tpu.PATHWAYS_MACHINE_TYPES) == 7


@pytest.mark.parametrize(
    ("machine_type", "expected"),
    [
        ("ct6e-standard-4t", ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")),
        ("ct5lp-hightpu-4t", ("2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")),
        ("ct6e-standard-8t", ("2x4",)),
        ("ct5lp-hightpu-8t", ("2x4",)),
    ],
)
def test_planar_topologies(machine_type: str, expected: tuple[str, ...]) -> None:
    assert tpu.machine_types()[machine_type].topologies == expected


@pytest.mark.parametrize("machine_type", ["ct5p-hightpu-4t", "ct4p-hightpu-4t", "tpu7x-standard-4t"])
def test_3d_topologies_are_the_controllers_not_the_gke_table(machine_type: str) -> None:
    """pathwaysjob_controller.go (v0.1.4) ValidTpuTopologiesMap differs from GKE's table both ways."""
    machine = tpu.machine_types()[machine_type]
    assert all(len(tpu.parse_topology(t)) == 3 for t in machine.topologies)
    from_table = set(tpu.topologies_for(machine_type, "JobSet"))
    assert set(tpu.topologies_for(machine_type, "PathwaysJob")) == set(machine.topologies)
    assert from_table != set(machine.topologies)


def test_v4_differs_from_the_gke_table() -> None:
    assert not tpu.controller_accepts("ct4p-hightpu-4t", "4x4x12")
    assert "4x4x12" in tpu.topologies_for("ct4p-hightpu-4t", "JobSet")
    assert tpu.controller_accepts("ct4p-hightpu-4t", "4x16x16")
    assert tpu.controller_accepts("ct4p-hightpu-4t", "4x4x16")
    assert "4x16x16" not in tpu.topologies_for("ct4p-hightpu-4t", "JobSet")


def test_derived_values_agree_with_the_table() -> None:
    checked = 0
    for row in tpu.tpu_types().values():
        machine = tpu.get_machine_type(row.gce_machine_type)
        if machine is None or row.topology not in machine.topologies:
            continue
        assert machine.instance_type(row.topology) == row.pathways_instance_type, row
        assert machine.vms_per_slice(row.topology) == row.vms_per_slice, row
        assert machine.chips_per_vm == row.chips_per_vm, row
        assert machine.gke_accelerator == row.gke_accelerator, row
        checked += 1
    assert checked > 150


def test_eight_chip_machines_have_one_vm_per_2x4_slice() -> None:
    assert tpu.machine_types()["ct6e-standard-8t"].vms_per_slice("2x4") == 1
    assert tpu.machine_types()["ct6e-standard-4t"].vms_per_slice("2x4") == 2
    assert tpu.machine_types()["ct6e-standard-4t"].vms_per_slice("1x1") == 1


@pytest.mark.parametrize(
    ("name", "device_type"),
    [("v6e-16", "v6e-16"), ("V6E-16", "v6e-16"), ("v5e-16", "v5litepod-16"), (" v4-8 ", "v4-8")],
)
def test_lookup_normalises_names(name: str, device_type: str) -> None:
    row = tpu.lookup_tpu_type(name)
    assert row is not None and row.device_type == device_type


def test_lookup_of_unknown_types() -> None:
    assert tpu.lookup_tpu_type("v9-8") is None
    assert tpu.get_machine_type("ct6e-standard-1t") is None


def test_pathways_device_types_exclude_other_machine_types() -> None:
    names = tpu.pathways_device_types()
    assert "v6e-16" in names and "tpu7x-8" in names and "v5litepod-8" in names
    assert "v6e-1" not in names and "tpu7x-2" not in names and "tpu7-8" not in names
    assert "v4-384" not in names  # 4x4x12: GKE has it, the controller does not


def test_single_host_machine_types_are_in_the_gke_table() -> None:
    slices = tpu.gke_slices()
    assert slices[("ct6e-standard-1t", "1x1")].chips_per_vm == 1
    assert slices[("ct6e-standard-4t", "2x2")].vms_per_slice == 1
    assert slices[("ct6e-standard-8t", "2x4")].chips_per_vm == 8
    assert slices[("ct5lp-hightpu-1t", "1x1")].chips_per_vm == 1
    assert slices[("ct5lp-hightpu-8t", "2x4")].instance_type == "tpuv5e1t:2x4"
    assert tpu.lookup_tpu_type("v6e-1").gce_machine_type == "ct6e-standard-1t"
    assert tpu.lookup_tpu_type("v5e-4").gce_machine_type == "ct5lp-hightpu-4t"


def test_controller_only_pair_keeps_the_controllers_shape() -> None:
    """ct6e-standard-4t 1x1: the controller accepts it and asks for 4 chips on one VM."""
    shape = tpu.slice_shape("ct6e-standard-4t", "1x1")
    assert shape is not None and (shape.vms_per_slice, shape.chips_per_vm) == (1, 4)
    assert tpu.slice_shape("ct6e-standard-4t", "1x1", "JobSet") is None


@pytest.mark.parametrize("topology", ["", "4", "4x", "0x4", "2x2x2x2", "axb", "4X4"])
def test_parse_topology_rejects(topology: str) -> None:
    with pytest.raises(ValueError):
        tpu.parse_topology(topology)


def test_device_type_for() -> None:
    assert tpu.device_type_for("ct5p-hightpu-4t", "2x2x1") == "v5p-8"
    assert tpu.device_type_for("ct6e-standard-4t", "3x3") is None
