"""The documentation's tables say what the code does: a table that drifts from the code fails here.

The connection forms' fields are generated from ``provider_info`` (docs/_ext); the tables of how a
Slurm job's end state ends the task are written by hand and checked against ``job_outcome``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_provider_pathways.failures import PathwaysJobFailed
from airflow_provider_pathways.reattach_rules import FailureClass
from airflow_provider_pathways.slurm.end_states import JobOutcome, job_outcome
from airflow_provider_pathways.slurm.job import TERMINAL_STATES, SlurmJob

DOCS = Path(__file__).resolve().parent.parent / "docs"
_STATE = re.compile(r"``([A-Z][A-Z_]+)``")
_EXCEPTION = re.compile(r"``(Pathways[A-Za-z]+)``")
_EXIT = re.compile(r"ExitCode=(\d+:\d+)")


def end_state_rows(page: str) -> list[tuple[str, str, str]]:
    """(state, exit code, what the task does) for every Slurm end state named in the first cell of
    a row of the page's *End states* table (with the ``ExitCode=`` that cell names, if any)."""
    section = (DOCS / page).read_text().split("End states", 1)[1]
    lines = section.split(".. list-table::", 1)[1].splitlines()[1:]
    table = "\n".join(line for line in lines[: next(i for i, x in enumerate(lines) if x and x[0] != " ")])
    rows: list[tuple[str, str, str]] = []
    for row in table.split("   * - ")[1:]:
        first, _, rest = row.partition("\n     - ")
        exit_code = _EXIT.search(first)
        for state in _STATE.findall(first):
            if state in TERMINAL_STATES:
                rows.append((state, exit_code[1] if exit_code else "1:0", " ".join(rest.split())))
    return rows


def ended(state: str, exit_code: str) -> SlurmJob:
    reason = "NonZeroExitCode" if state == "FAILED" else None
    code, signal = (int(n) for n in exit_code.split(":"))
    return SlurmJob(job_id=7, name="train", state=state, reason=reason, exit_code=code, exit_signal=signal)


ROWS = end_state_rows("operators/slurm_job.rst")


def test_the_table_names_the_end_states() -> None:
    assert {"COMPLETED", "FAILED", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "TIMEOUT"} <= {r[0] for r in ROWS}


@pytest.mark.parametrize(("state", "exit_code", "says"), ROWS, ids=[f"{r[0]}-{r[1]}" for r in ROWS])
def test_each_end_state_does_what_the_table_says(state: str, exit_code: str, says: str) -> None:
    outcome, failure, _message = job_outcome(ended(state, exit_code))
    if says.startswith("succeeds"):
        assert outcome is JobOutcome.SUCCEEDED
        return
    assert outcome is JobOutcome.FAILED
    named = _EXCEPTION.findall(says)
    raised = type(PathwaysJobFailed.for_class(failure or FailureClass.UNKNOWN, "x")).__name__
    if named:
        assert raised == named[0], f"{state}: the docs say {named[0]}, the code raises {raised}"
    else:  # "fails with its reason": no class of its own
        assert failure is FailureClass.UNKNOWN


def test_the_compatibility_page_names_what_the_tests_run_and_the_controllers_api_versions() -> None:
    """Every Airflow version of ``make test-compat`` has its constraints and a row in the page;
    the JobSet and Kueue API versions are the ones the provider talks to."""
    from airflow_provider_pathways.gke.objects import JOBSET, KUEUE_WORKLOAD

    page = (DOCS / "compatibility.rst").read_text()
    makefile = (DOCS.parent / "Makefile").read_text()
    versions = re.search(r"^COMPAT_AIRFLOW \?= (.+)$", makefile, re.MULTILINE)
    assert versions is not None
    for version in versions[1].split():
        assert (DOCS.parent / "sandbox" / "compat" / f"constraints-{version}.txt").is_file(), version
        assert version in page, version
    for resource in (JOBSET, KUEUE_WORKLOAD):
        assert f"``{resource.group}/{resource.version}``" in page


def test_the_metrics_table_is_the_metrics_the_code_sends() -> None:
    """docs/metrics.rst's table: each metric of ``metrics.METRICS`` with its type, unit, tags and
    description, in order."""
    from airflow_provider_pathways.metrics import METRICS

    section = (DOCS / "metrics.rst").read_text().split(".. list-table::", 1)[1]
    rows = []
    for row in section.split("\n\n", 2)[1].split("   * - ")[2:]:  # the header row first
        cells = [" ".join(cell.split()) for cell in row.split("\n     - ")]
        tags = tuple(re.findall(r"``(\w+)``", cells[3]))
        rows.append((cells[0].strip("`"), cells[1], cells[2], tags, cells[4].strip()))
    assert rows == [(m.name, m.type.value, m.unit, m.tags, " ".join(m.description.split())) for m in METRICS]


def test_the_run_facet_schema_lists_the_facet_fields() -> None:
    """docs/_static/PathwaysRunFacet.json (the facet's ``_schemaURL``) names every field the
    ``pathways`` run facet sends, in OpenLineage's camelCase."""
    import dataclasses
    import json

    from airflow_provider_pathways.lineage import FACET_SCHEMA_URL, PathwaysRun

    schema_file = DOCS / "_static" / "PathwaysRunFacet.json"
    schema = json.loads(schema_file.read_text())
    assert schema["$id"] == FACET_SCHEMA_URL
    properties = schema["$defs"]["PathwaysRunFacet"]["allOf"][1]["properties"]
    camel = {
        "".join(w.title() if i else w for i, w in enumerate(f.name.split("_")))
        for f in dataclasses.fields(PathwaysRun)
    }
    assert set(properties) == camel
