"""Reading a whole PathwaysJob manifest: identity, metadata and the spec's keys."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from airflow_provider_pathways.gke.resources import JobKind
from airflow_provider_pathways.gke.spec.constants import (
    API_VERSION,
    KIND,
)
from airflow_provider_pathways.gke.spec.fields import as_list, as_mapping, build_section, unknown_keys
from airflow_provider_pathways.gke.spec.problems import PathwaysSpecError, SpecProblem
from airflow_provider_pathways.gke.spec.sections import (
    COMPONENT_FIELDS,
    COMPONENT_REQUIRED,
    CONTROLLER_FIELDS,
    WORKER_FIELDS,
    WORKER_REQUIRED,
    ControllerSpec,
    CustomComponent,
    WorkerSpec,
)

METADATA_FIELDS = (
    ("name", "name"),
    ("namespace", "namespace"),
    ("labels", "labels"),
    ("annotations", "annotations"),
)
SPEC_KEYS = ("maxRestarts", "pathwaysVersion", "pathwaysDir", "customComponents", "workers", "controller")
MANIFEST_KEYS = ("apiVersion", "kind", "metadata", "spec", "status")


def check_identity(data: Mapping[str, Any]) -> None:
    """Raise at once for another apiVersion or kind: nothing else about such a document is useful."""
    problems: list[SpecProblem] = []
    kind = data.get("kind")
    if kind is not None and kind != KIND:
        fix = f"load a {KIND} manifest (apiVersion {API_VERSION})"
        if kind == JobKind.JOBSET.value:
            fix += "; JobSets are rendered from a PathwaysJobSpec with to_jobset(), not loaded"
        problems.append(SpecProblem("kind", f"is {kind!r}, not {KIND!r}", fix))
    api_version = data.get("apiVersion")
    if api_version is not None and api_version != API_VERSION:
        problems.append(
            SpecProblem(
                "apiVersion", f"is {api_version!r}, not {API_VERSION!r}", f"set apiVersion: {API_VERSION}"
            )
        )
    if problems:
        raise PathwaysSpecError(problems)


def parse_spec(spec: Mapping[str, Any], problems: list[SpecProblem]) -> dict[str, Any]:
    """Constructor keywords for the spec part of a PathwaysJobSpec; structural problems go to ``problems``."""
    unknown_keys(spec, SPEC_KEYS, "spec", problems, "a PathwaysJob spec")
    kwargs: dict[str, Any] = {}
    for key, attr in (
        ("maxRestarts", "max_restarts"),
        ("pathwaysVersion", "pathways_version"),
        ("pathwaysDir", "pathways_dir"),
    ):
        if spec.get(key) is not None:
            kwargs[attr] = copy.deepcopy(spec[key])

    workers = spec.get("workers")
    if workers is None:
        problems.append(
            SpecProblem("spec.workers", "is missing", "add exactly one worker entry (type, topology)")
        )
    elif (entries := as_list(workers, "spec.workers", problems)) is not None:
        if len(entries) != 1:
            problems.append(
                SpecProblem(
                    "spec.workers",
                    f"has {len(entries)} entries; a PathwaysJob takes exactly one",
                    "keep a single worker entry (one machine type and topology per job)",
                )
            )
        elif (entry := as_mapping(entries[0], "spec.workers[0]", problems)) is not None:
            worker = build_section(
                WorkerSpec, entry, WORKER_FIELDS, "spec.workers[0]", problems, "a worker", WORKER_REQUIRED
            )
            if worker is not None:
                kwargs["workers"] = worker

    controller = spec.get("controller")
    if controller is None:
        problems.append(
            SpecProblem(
                "spec.controller",
                "is missing; the CRD requires it (without a template the job is headless and never finishes)",
                "add controller: {deploymentMode: default, template: <pod template of the program>}, "
                "or controller: {deploymentMode: default} for a headless job",
            )
        )
    elif (mapping := as_mapping(controller, "spec.controller", problems)) is not None:
        built = build_section(
            ControllerSpec, mapping, CONTROLLER_FIELDS, "spec.controller", problems, "the controller"
        )
        if built is not None:
            kwargs["controller"] = built

    components = spec.get("customComponents")
    if (
        components is not None
        and (items := as_list(components, "spec.customComponents", problems)) is not None
    ):
        parsed: list[CustomComponent] = []
        for index, item in enumerate(items):
            path = f"spec.customComponents[{index}]"
            if (mapping := as_mapping(item, path, problems)) is not None:
                component = build_section(
                    CustomComponent,
                    mapping,
                    COMPONENT_FIELDS,
                    path,
                    problems,
                    "a custom component",
                    COMPONENT_REQUIRED,
                )
                if component is not None:
                    parsed.append(component)
        kwargs["custom_components"] = parsed
    return kwargs
