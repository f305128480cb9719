"""The TPU type table and the machine types a PathwaysJob accepts."""

from __future__ import annotations

from importlib import resources

import pytest

from airflow_provider_pathways import tpu


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
def test_3d_topologies_come_from_the_table(machine_type: str) -> None:
    machine = tpu.machine_types()[machine_type]
    from_table = {r.topology for r in tpu.tpu_types().values() if r.gce_machine_type == machine_type}
    assert set(machine.topologies) == from_table
    assert all(len(tpu.parse_topology(t)) == 3 for t in machine.topologies)
    assert machine.topologies[0] == "2x2x1"


def test_derived_values_agree_with_the_table() -> None:
    checked = 0
    for row in tpu.tpu_types().values():
        machine = tpu.get_machine_type(row.gce_machine_type)
        if machine is None:
            continue
        assert machine.instance_type(row.topology) == row.pathways_instance_type, row
        assert machine.vms_per_slice(row.topology) == row.vms_per_slice, row
        assert machine.chips_per_vm == row.chips_per_vm, row
        assert machine.gke_accelerator == row.gke_accelerator, row
        checked += 1
    assert checked > 300


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


@pytest.mark.parametrize("topology", ["", "4", "4x", "0x4", "2x2x2x2", "axb", "4X4"])
def test_parse_topology_rejects(topology: str) -> None:
    with pytest.raises(ValueError):
        tpu.parse_topology(topology)


def test_device_type_for() -> None:
    assert tpu.device_type_for("ct5p-hightpu-4t", "2x2x1") == "v5p-8"
    assert tpu.device_type_for("ct6e-standard-4t", "3x3") is None
