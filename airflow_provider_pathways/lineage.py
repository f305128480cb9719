"""OpenLineage for the operators (with ``apache-airflow-providers-openlineage`` installed): the
``pathways`` run facet (backend, TPU type, topology, slices, queue, preemptions) and the GCS
locations a job writes (scratch, checkpoints) as output datasets.

The OpenLineage client is imported only when the OpenLineage provider asks an operator for its
lineage (``get_openlineage_facets_on_complete`` / ``_on_failure``), never at DAG parse time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

#: The run facet's key in an OpenLineage event's ``run.facets``.
FACET_NAME = "pathways"
#: The JSON schema of :class:`PathwaysRun`'s facet (docs/_static/PathwaysRunFacet.json).
FACET_SCHEMA_URL = "https://airflow-provider-pathways.readthedocs.io/en/stable/_static/PathwaysRunFacet.json"


@dataclass(frozen=True)
class PathwaysRun:
    """What the ``pathways`` run facet says of a try; None where it is not known."""

    backend: str
    tpu_type: str | None = None
    topology: str | None = None
    slices: int | None = None
    queue: str | None = None
    preemptions: int | None = None


def gcs_location(url: str) -> tuple[str, str] | None:
    """OpenLineage's naming of a GCS location: (``gs://<bucket>``, the object path or ``/``); None
    for anything that is not a ``gs://`` URL."""
    if not url.startswith("gs://"):
        return None
    bucket, _, path = url[len("gs://") :].partition("/")
    if not bucket:
        return None
    return f"gs://{bucket}", path.strip("/") or "/"


def operator_lineage(run: PathwaysRun, outputs: Iterable[str | None]) -> Any:
    """The ``OperatorLineage`` of a try: the ``pathways`` run facet and the ``gs://`` locations in
    ``outputs`` (others, and repeats, left out) as output datasets."""
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    datasets = []
    for url in dict.fromkeys(u for u in outputs if u):
        named = gcs_location(url)
        if named is not None:
            datasets.append(Dataset(namespace=named[0], name=named[1]))
    return OperatorLineage(outputs=datasets, run_facets={FACET_NAME: _facet(run)})


def _facet(run: PathwaysRun) -> Any:
    return _facet_class()(
        backend=run.backend,
        tpuType=run.tpu_type,
        topology=run.topology,
        slices=run.slices,
        queue=run.queue,
        preemptions=run.preemptions,
    )


@cache
def _facet_class() -> Any:
    from attr import define, field
    from openlineage.client.generated.base import RunFacet

    @define
    class PathwaysRunFacet(RunFacet):  # type: ignore[misc]
        """The Pathways job of an Airflow task's try."""

        backend: str
        tpuType: str | None = field(default=None)
        topology: str | None = field(default=None)
        slices: int | None = field(default=None)
        queue: str | None = field(default=None)
        preemptions: int | None = field(default=None)

        @staticmethod
        def _get_schema() -> str:
            return FACET_SCHEMA_URL

    return PathwaysRunFacet
