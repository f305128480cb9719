"""TPU device types, machine types and slice shapes, per kind of job.

A *device type* is the user-facing name such as ``v6e-16``; a *machine type* is the GCE machine type
(``ct6e-standard-4t``) that a worker runs on, together with a *topology* (``4x4``).

Two tables decide which (machine type, topology) pairs a job may use:

- a **PathwaysJob** is rendered by its controller, which accepts exactly the topologies of its
  ``ValidTpuTopologiesMap`` (``data/pathwaysjob-topologies.tsv``, from pathways-job v0.1.4
  ``pathwaysjob_controller.go``); anything else ends in ``terminalState: Failed`` with no JobSet;
- a plain **JobSet** has no such check: GKE's node pools decide (``data/tpu-types.tsv``, xpk's table,
  plus the single-host ``-1t``/``-4t``/``-8t`` v5e and v6e machine types in
  ``data/gke-single-host-tpus.tsv``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources

from airflow_provider_pathways.gke.objects import JobKind

__all__ = [
    "JOBSET_KIND",
    "PATHWAYSJOB_KIND",
    "PATHWAYS_MACHINE_TYPES",
    "MachineType",
    "SliceShape",
    "TpuType",
    "controller_accepts",
    "device_type_for",
    "get_machine_type",
    "gke_machine_types",
    "gke_slices",
    "lookup_tpu_type",
    "machine_types",
    "parse_topology",
    "pathways_device_types",
    "slice_shape",
    "topologies_for",
    "topology_chips",
    "tpu_types",
]

PATHWAYSJOB_KIND = JobKind.PATHWAYS_JOB.value
JOBSET_KIND = JobKind.JOBSET.value

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

_TOPOLOGY_RE = re.compile(r"^[1-9][0-9]{0,5}(x[1-9][0-9]{0,5}){1,2}$")

# Other spellings users type for device types, mapped to the table's prefix.
_DEVICE_PREFIX_ALIASES = {"v5e": "v5litepod", "v5lite": "v5litepod", "v7x": "tpu7x"}


@dataclass(frozen=True)
class TpuType:
    """One row of the GKE table: a TPU device type and what it maps to."""

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
        """Whether the PathwaysJob controller accepts this machine type and topology."""
        return controller_accepts(self.gce_machine_type, self.topology)


@dataclass(frozen=True)
class MachineType:
    """A machine type the PathwaysJob controller accepts, with its topologies (the controller's order)."""

    name: str
    chips_per_vm: int
    gke_accelerator: str
    pathways_tpu_version: str
    topologies: tuple[str, ...]

    def vms_per_slice(self, topology: str) -> int:
        """VMs (worker pods) per slice as the controller computes it: chips / chips per VM, at least 1."""
        chips = topology_chips(topology)
        return chips // self.chips_per_vm if chips >= self.chips_per_vm else 1

    def instance_type(self, topology: str) -> str:
        """The resource manager's ``--instance_type`` value, e.g. ``tpuv6e:4x4``."""
        return f"{self.pathways_tpu_version}:{topology}"


@dataclass(frozen=True)
class SliceShape:
    """What a worker slice of one machine type and topology is made of."""

    machine_type: str
    topology: str
    vms_per_slice: int
    chips_per_vm: int
    gke_accelerator: str
    pathways_tpu_version: str

    @property
    def instance_type(self) -> str:
        """The resource manager's ``--instance_type`` value, e.g. ``tpuv6e:4x4``."""
        return f"{self.pathways_tpu_version}:{self.topology}"


def parse_topology(topology: object) -> tuple[int, ...]:
    """Split ``2x2x4`` into ``(2, 2, 4)``; raise ValueError unless it is 2 or 3 positive integers."""
    if not isinstance(topology, str) or not _TOPOLOGY_RE.fullmatch(topology):
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


def _data_lines(name: str) -> Iterator[dict[str, str]]:
    """Rows of a bundled TSV file (``#`` lines are comments, the first other line is the header)."""
    text = resources.files("airflow_provider_pathways").joinpath(f"data/{name}").read_text("utf-8")
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if header is None:
            header = cells
            continue
        yield dict(zip(header, cells, strict=True))


def _row(row: dict[str, str]) -> TpuType:
    return TpuType(
        device_type=row["device_type_key"],
        topology=row["topology"],
        vms_per_slice=int(row["vms_per_slice"]),
        chips_per_vm=int(row["chips_per_vm"]),
        gke_accelerator=row["gke_accelerator"],
        gce_machine_type=row["gce_machine_type"],
        pathways_tpu_version=row["pathways_tpu_version"],
        pathways_instance_type=row["pathways_instance_type"],
    )


@functools.lru_cache(maxsize=1)
def _gke_rows() -> tuple[TpuType, ...]:
    return tuple(_row(r) for name in ("tpu-types.tsv", "gke-single-host-tpus.tsv") for r in _data_lines(name))


@functools.lru_cache(maxsize=1)
def tpu_types() -> dict[str, TpuType]:
    """Every named device type of the GKE table, keyed by device type, in file order."""
    return {row.device_type: row for row in _gke_rows() if row.device_type}


@functools.lru_cache(maxsize=1)
def gke_slices() -> dict[tuple[str, str], SliceShape]:
    """Every (machine type, topology) GKE offers as a TPU node pool, with its shape."""
    return {
        (row.gce_machine_type, row.topology): SliceShape(
            machine_type=row.gce_machine_type,
            topology=row.topology,
            vms_per_slice=row.vms_per_slice,
            chips_per_vm=row.chips_per_vm,
            gke_accelerator=row.gke_accelerator,
            pathways_tpu_version=row.pathways_tpu_version,
        )
        for row in _gke_rows()
    }


@functools.lru_cache(maxsize=1)
def gke_machine_types() -> dict[str, tuple[str, ...]]:
    """GKE TPU machine types and their topologies (smallest first)."""
    by_machine: dict[str, set[str]] = {}
    for machine, topology in gke_slices():
        by_machine.setdefault(machine, set()).add(topology)
    return {m: tuple(sorted(t, key=_topology_sort_key)) for m, t in by_machine.items()}


@functools.lru_cache(maxsize=1)
def machine_types() -> dict[str, MachineType]:
    """The machine types of the PathwaysJob controller's table, with the topologies it accepts."""
    result: dict[str, MachineType] = {}
    for row in _data_lines("pathwaysjob-topologies.tsv"):
        result[row["machine_type"]] = MachineType(
            name=row["machine_type"],
            chips_per_vm=int(row["chips_per_vm"]),
            gke_accelerator=row["gke_accelerator"],
            pathways_tpu_version=row["tpu_version"],
            topologies=tuple(row["topologies"].split()),
        )
    return result


def get_machine_type(name: object) -> MachineType | None:
    """The controller's MachineType for a machine type name, or None if the CRD does not accept it."""
    return machine_types().get(name) if isinstance(name, str) else None


def controller_accepts(machine_type: object, topology: object) -> bool:
    """True when the PathwaysJob controller (v0.1.4) accepts ``topology`` for ``machine_type``."""
    machine = get_machine_type(machine_type)
    return machine is not None and topology in machine.topologies


def topologies_for(machine_type: object, kind: str) -> tuple[str, ...]:
    """Topologies valid for ``machine_type`` in a job of ``kind`` (smallest first); () if none."""
    if not isinstance(machine_type, str):
        return ()
    if kind == PATHWAYSJOB_KIND:
        machine = get_machine_type(machine_type)
        return tuple(sorted(machine.topologies, key=_topology_sort_key)) if machine else ()
    return gke_machine_types().get(machine_type, ())


def slice_shape(machine_type: object, topology: object, kind: str | None = None) -> SliceShape | None:
    """The shape of a slice, or None when ``kind`` does not accept the pair (any kind when None).

    GKE's table and the controller agree where both know a pair; a pair only the controller knows
    (``ct6e-standard-4t`` with ``1x1``) gets the controller's shape: 1 VM requesting 4 chips.
    """
    if not isinstance(machine_type, str) or not isinstance(topology, str):
        return None
    if kind in (None, JOBSET_KIND):
        shape = gke_slices().get((machine_type, topology))
        if shape is not None or kind == JOBSET_KIND:
            return shape
    machine = get_machine_type(machine_type)
    if machine is None or topology not in machine.topologies:
        return None
    return SliceShape(
        machine_type=machine_type,
        topology=topology,
        vms_per_slice=machine.vms_per_slice(topology),
        chips_per_vm=machine.chips_per_vm,
        gke_accelerator=machine.gke_accelerator,
        pathways_tpu_version=machine.pathways_tpu_version,
    )


def _normalise_device_type(device_type: str) -> str:
    key = device_type.strip().lower()
    prefix, sep, size = key.rpartition("-")
    if sep and prefix in _DEVICE_PREFIX_ALIASES:
        key = f"{_DEVICE_PREFIX_ALIASES[prefix]}-{size}"
    return key


def lookup_tpu_type(device_type: object) -> TpuType | None:
    """The row for a device type such as ``v6e-16`` (case-insensitive; ``v5e-N`` means ``v5litepod-N``)."""
    if not isinstance(device_type, str):
        return None
    return tpu_types().get(_normalise_device_type(device_type))


def pathways_device_types() -> list[str]:
    """Device types whose machine type and topology the PathwaysJob controller accepts, in table order."""
    return [row.device_type for row in tpu_types().values() if row.pathways_supported]


def device_type_for(machine_type: str, topology: str) -> str | None:
    """The device type (e.g. ``v6e-16``) with this machine type and topology, if the table has one."""
    for row in tpu_types().values():
        if row.gce_machine_type == machine_type and row.topology == topology:
            return row.device_type
    return None
