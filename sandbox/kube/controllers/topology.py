"""TPU topologies the PathwaysJob controller accepts, and VMs per slice.

Exactly ``ValidTpuTopologiesMap`` of pathways-job v0.1.4 ``pathwaysjob_controller.go`` (in the
controller's order); any other pair gets ``terminalState: Failed`` and no JobSet.
"""

from __future__ import annotations

_CONTROLLER_TOPOLOGIES: dict[str, str] = {
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

VALID_TOPOLOGIES: dict[str, frozenset[str]] = {
    machine: frozenset(shapes.split()) for machine, shapes in _CONTROLLER_TOPOLOGIES.items()
}


def chips_per_vm(machine_type: str) -> int:
    """Chips on one VM: 8 for the ``*-8t`` machine types, else 4."""
    return 8 if machine_type.endswith("-8t") else 4


def topology_is_valid(machine_type: str, topology: str) -> bool:
    """True when the controller accepts ``topology`` for ``machine_type``."""
    return topology in VALID_TOPOLOGIES.get(machine_type, frozenset())


def chips_in(topology: str) -> int:
    """Number of chips in a topology such as ``2x2x4``."""
    chips = 1
    for part in topology.split("x"):
        chips *= int(part)
    return chips


def vms_per_slice(machine_type: str, topology: str) -> int:
    """VMs (pods) per slice: chips / chips per VM, at least 1 (as the controller computes it)."""
    chips, per_vm = chips_in(topology), chips_per_vm(machine_type)
    return chips // per_vm if chips >= per_vm else 1
