"""TPU topologies the PathwaysJob controller accepts, and VMs per slice.

2-D shapes follow the controller's table; 3-D shapes (v4, v5p, tpu7x) come from xpk's system
characteristics table (``tpu-types.tsv`` in the project's reference notes).
"""

from __future__ import annotations


def _shapes(text: str) -> frozenset[str]:
    return frozenset(text.split())


_V6E_4T = "1x1 2x2 2x4 4x4 4x8 8x8 8x16 16x16"
_V5E_4T = "2x2 2x4 4x4 4x8 8x8 8x16 16x16"

VALID_TOPOLOGIES: dict[str, frozenset[str]] = {
    "ct6e-standard-4t": _shapes(_V6E_4T),
    "ct6e-standard-8t": _shapes("2x4"),
    "ct5lp-hightpu-4t": _shapes(_V5E_4T),
    "ct5lp-hightpu-8t": _shapes("2x4"),
    "ct4p-hightpu-4t": _shapes(
        "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x4x12 4x8x8 4x4x20 4x4x24 4x4x28 8x8x8 4x4x36 4x4x40 4x4x44 "
        "8x8x12 4x4x52 4x4x56 4x4x60 8x8x16 4x4x68 4x4x72 4x4x76 4x4x80 4x4x84 4x4x88 4x4x92 4x4x96 "
        "4x4x100 4x4x104 4x4x108 4x4x112 4x4x116 4x4x120 4x4x124 8x16x16 4x4x132 4x4x136 4x4x140 4x4x144 "
        "4x4x148 4x4x152 4x4x156 4x4x160 4x4x164 4x4x168 4x4x172 4x4x176 4x4x180 4x4x184 4x4x188 4x4x192 "
        "4x4x196 4x4x200 4x4x204 4x4x208 4x4x212 4x4x216 4x4x220 4x4x224 4x4x228 4x4x232 4x4x236 4x4x240 "
        "4x4x244 4x4x248 4x4x252 4x4x256 "
    ),
    "ct5p-hightpu-4t": _shapes(
        "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x4x12 4x8x8 4x4x20 4x8x12 4x4x28 8x8x8 4x12x12 4x8x20 "
        "4x4x44 8x8x12 4x4x52 4x8x28 4x12x20 8x8x16 4x4x68 8x12x12 4x4x76 8x8x20 4x12x28 4x8x44 4x4x92 "
        "8x12x16 4x20x20 4x8x52 12x12x12 8x8x28 4x4x116 8x12x20 4x4x124 8x16x16 4x12x44 4x8x68 4x20x28 "
        "12x12x16 4x4x148 4x8x76 4x12x52 8x16x20 4x4x164 8x12x28 4x4x172 8x8x44 12x12x20 4x8x92 4x4x188 "
        "12x16x16 4x28x28 8x20x20 4x12x68 8x8x52 4x4x212 12x12x24 4x20x44 8x16x28 4x12x76 4x8x116 4x4x236 "
        "12x16x20 4x4x244 4x8x124 12x12x28 16x16x16 8x12x44 8x8x68 8x20x28 12x16x24 4x8x148 8x8x76 "
        "8x12x52 16x16x20 4x8x164 12x16x28 4x8x172 8x16x44 12x20x24 8x8x92 4x8x188 16x16x24 4x8x196 "
        "4x8x200 4x8x204 4x8x208 4x8x212 12x24x24 4x8x220 4x8x224 4x8x228 4x8x232 4x8x236 4x8x240 4x8x244 "
        "4x8x248 4x8x252 4x8x256 4x12x92 12x20x20 12x12x36 4x12x116 4x12x124 4x12x132 4x12x140 4x12x148 "
        "4x12x156 4x12x164 4x12x172 4x12x176 4x12x180 4x12x184 4x16x136 16x20x28 4x20x52 4x20x68 4x20x76 "
        "4x20x92 4x20x100 4x20x104 4x28x44 4x28x52 4x28x68 4x28x76 4x44x44 "
    ),
    "tpu7x-standard-4t": _shapes(
        "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x4x12 4x8x8 4x4x20 4x8x12 4x4x28 8x8x8 4x12x12 4x8x20 "
        "4x4x44 8x8x12 4x4x52 4x8x28 4x12x20 8x8x16 4x4x68 8x12x12 4x4x76 8x8x20 4x12x28 4x8x44 4x4x92 "
        "8x12x16 4x20x20 4x8x52 12x12x12 8x8x28 4x4x116 8x12x20 4x4x124 8x16x16 4x12x44 4x8x68 4x20x28 "
        "12x12x16 4x4x148 4x8x76 4x12x52 8x16x20 4x4x164 8x12x28 4x4x172 8x8x44 12x12x20 4x8x92 4x4x188 "
        "12x16x16 4x28x28 8x20x20 4x12x68 8x8x52 4x4x212 12x12x24 4x20x44 8x16x28 4x12x76 4x8x116 4x4x236 "
        "12x16x20 4x4x244 4x8x124 12x12x28 16x16x16 8x12x44 8x8x68 8x20x28 12x16x24 4x8x148 8x8x76 "
        "8x12x52 16x16x20 4x8x164 12x16x28 4x8x172 8x16x44 12x20x24 8x8x92 4x8x188 16x16x24 4x8x196 "
        "4x8x200 4x8x204 4x8x208 4x8x212 12x24x24 4x8x220 4x8x224 4x8x228 4x8x232 4x8x236 4x8x240 4x8x244 "
        "4x8x248 4x8x252 16x16x32 4x12x92 12x20x20 12x12x36 4x12x116 4x12x124 4x12x132 4x12x140 4x12x148 "
        "4x12x156 4x12x164 4x12x172 4x12x176 4x12x180 4x12x184 4x12x188 16x24x24 4x16x136 16x20x28 "
        "4x20x52 4x20x68 4x20x76 4x20x92 4x20x100 4x20x104 4x28x44 4x28x52 4x28x68 4x28x76 4x44x44 "
        "4x44x52 "
    ),
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
