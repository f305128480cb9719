"""TPU device types (from xpk's table in ``data/tpu-types.tsv``) and the machine types a PathwaysJob accepts.

A *device type* is the user-facing name such as ``v6e-16``; a *machine type* is the GCE machine type
(``ct6e-standard-4t``) that ``spec.workers[0].type`` of a PathwaysJob names, together with a topology.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

__all__ = [
    "PATHWAYS_MACHINE_TYPES",
    "MachineType",
    "TpuType",
    "device_type_for",
    "get_machine_type",
    "lookup_tpu_type",
    "machine_types",
    "parse_topology",
    "pathways_device_types",
    "topology_chips",
    "tpu_types",
]

#: The machine types the PathwaysJob CRD (v0.1.4) accepts in ``spec.workers[].type``.
PATHWAYS_MACHINE_TYPES: tuple[str, ...] = (
    "tpu7x-standard-4t",
    "ct6e-standard-4t",
    "ct6e-standard-8t",
    "ct5p-hightpu-4t",
    "ct5lp-hightpu-4t",
    "ct5lp-hightpu-8t",
    "ct4p-hightpu-4t",
)

_TOPOLOGY_RE = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$")

# 2-D slice shapes the controller accepts for the 4-chip-per-VM v6e / v5e machine types.
_PLANAR_4T = ("2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")

# machine type -> (chips per VM, GKE accelerator label, Pathways TPU version, fixed topologies or None).
# None means: the topologies are the ones tpu-types.tsv lists for that machine type.
_MACHINE_FACTS: dict[str, tuple[int, str, str, tuple[str, ...] | None]] = {
    "tpu7x-standard-4t": (4, "tpu7x", "tpu7x", None),
    "ct6e-standard-4t": (4, "tpu-v6e-slice", "tpuv6e", ("1x1", *_PLANAR_4T)),
    "ct6e-standard-8t": (8, "tpu-v6e-slice", "tpuv6e1t", ("2x4",)),
    "ct5p-hightpu-4t": (4, "tpu-v5p-slice", "tpuv5", None),
    "ct5lp-hightpu-4t": (4, "tpu-v5-lite-podslice", "tpuv5e", _PLANAR_4T),
    "ct5lp-hightpu-8t": (8, "tpu-v5-lite-podslice", "tpuv5e1t", ("2x4",)),
    "ct4p-hightpu-4t": (4, "tpu-v4-podslice", "tpuv4", None),
}

# Other spellings users type for device types, mapped to the table's prefix.
_DEVICE_PREFIX_ALIASES = {"v5e": "v5litepod", "v5lite": "v5litepod", "v7x": "tpu7x"}


@dataclass(frozen=True)
class TpuType:
    """One row of tpu-types.tsv: a TPU device type and what it maps to."""

    device_type: str
    topology: str
    vms_per_slice: int
    chips_per_vm: int
    gke_accelerator: str
    gce_machine_type: str
    pathways_tpu_version: str
    pathways_instance_type: str

    @property
    def chips(self) -> int:
        """Chips in one slice."""
        return topology_chips(self.topology)

    @property
    def pathways_supported(self) -> bool:
        """Whether a PathwaysJob accepts this device type's machine type."""
        return self.gce_machine_type in PATHWAYS_MACHINE_TYPES


@dataclass(frozen=True)
class MachineType:
    """A machine type a PathwaysJob accepts, with the topologies valid for it."""

    name: str
    chips_per_vm: int
    gke_accelerator: str
    pathways_tpu_version: str
    topologies: tuple[str, ...]

    def vms_per_slice(self, topology: str) -> int:
        """VMs (worker pods) in one slice: chips in the topology / chips per VM, at least 1."""
        return max(1, topology_chips(topology) // self.chips_per_vm)

    def instance_type(self, topology: str) -> str:
        """The resource manager's ``--instance_type`` value, e.g. ``tpuv6e:4x4``."""
        return f"{self.pathways_tpu_version}:{topology}"


def parse_topology(topology: str) -> tuple[int, ...]:
    """Split ``2x2x4`` into ``(2, 2, 4)``; raise ValueError unless it is 2 or 3 positive integers."""
    if not isinstance(topology, str) or not _TOPOLOGY_RE.match(topology):
        raise ValueError(f"topology {topology!r} is not of the form AxB or AxBxC")
    return tuple(int(part) for part in topology.split("x"))


def topology_chips(topology: str) -> int:
    """Number of chips in a topology (product of its dimensions)."""
    chips = 1
    for dim in parse_topology(topology):
        chips *= dim
    return chips


def _topology_sort_key(topology: str) -> tuple[int, tuple[int, ...]]:
    return topology_chips(topology), parse_topology(topology)


@functools.lru_cache(maxsize=1)
def tpu_types() -> dict[str, TpuType]:
    """All device types from the bundled tpu-types.tsv, keyed by device type, in file order."""
    text = resources.files("airflow_provider_pathways").joinpath("data/tpu-types.tsv").read_text("utf-8")
    rows: dict[str, TpuType] = {}
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if header is None:
            header = cells
            continue
        row = dict(zip(header, cells, strict=True))
        rows[row["device_type_key"]] = TpuType(
            device_type=row["device_type_key"],
            topology=row["topology"],
            vms_per_slice=int(row["vms_per_slice"]),
            chips_per_vm=int(row["chips_per_vm"]),
            gke_accelerator=row["gke_accelerator"],
            gce_machine_type=row["gce_machine_type"],
            pathways_tpu_version=row["pathways_tpu_version"],
            pathways_instance_type=row["pathways_instance_type"],
        )
    return rows


@functools.lru_cache(maxsize=1)
def machine_types() -> dict[str, MachineType]:
    """The machine types a PathwaysJob accepts, with their valid topologies (smallest first)."""
    by_machine: dict[str, set[str]] = {}
    for row in tpu_types().values():
        by_machine.setdefault(row.gce_machine_type, set()).add(row.topology)
    result: dict[str, MachineType] = {}
    for name in PATHWAYS_MACHINE_TYPES:
        chips_per_vm, accelerator, version, fixed = _MACHINE_FACTS[name]
        topologies = fixed if fixed is not None else by_machine.get(name, ())
        result[name] = MachineType(
            name=name,
            chips_per_vm=chips_per_vm,
            gke_accelerator=accelerator,
            pathways_tpu_version=version,
            topologies=tuple(sorted(topologies, key=_topology_sort_key)),
        )
    return result


def get_machine_type(name: object) -> MachineType | None:
    """The MachineType for a PathwaysJob machine type name, or None if the CRD does not accept it."""
    return machine_types().get(name) if isinstance(name, str) else None


def _normalise_device_type(device_type: str) -> str:
    key = device_type.strip().lower()
    prefix, sep, size = key.rpartition("-")
    if sep and prefix in _DEVICE_PREFIX_ALIASES:
        key = f"{_DEVICE_PREFIX_ALIASES[prefix]}-{size}"
    return key


def lookup_tpu_type(device_type: str) -> TpuType | None:
    """The row for a device type such as ``v6e-16`` (case-insensitive; ``v5e-N`` means ``v5litepod-N``)."""
    if not isinstance(device_type, str):
        return None
    return tpu_types().get(_normalise_device_type(device_type))


def pathways_device_types() -> list[str]:
    """Device types whose machine type a PathwaysJob accepts, in table order."""
    return [row.device_type for row in tpu_types().values() if row.pathways_supported]


def device_type_for(machine_type: str, topology: str) -> str | None:
    """The device type (e.g. ``v6e-16``) with this machine type and topology, if the table has one."""
    for row in tpu_types().values():
        if row.gce_machine_type == machine_type and row.topology == topology:
            return row.device_type
    return None
