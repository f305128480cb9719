"""The controller section: deployment mode, pod template, containers, environment, custom components."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_pathways.cache.location import bucket_name_error
from airflow_provider_pathways.gke.spec import k8s
from airflow_provider_pathways.gke.spec.constants import (
    COMPONENT_TYPES,
    DEPLOYMENT_MODES,
    MAX_CUSTOM_COMPONENTS,
    PROXY_CONTAINER,
    RM_CONTAINER,
)
from airflow_provider_pathways.gke.spec.problems import SpecProblem

if TYPE_CHECKING:
    from airflow_provider_pathways.gke.spec.sections import ControllerSpec, WorkerSpec
from airflow_provider_pathways.gke.spec.value_checks import (
    add_problem,
    int_problem,
    is_int,
    string_map_problems,
)

_CONTROLLER = "spec.controller"
_TEMPLATE = "spec.controller.template"
_JOB_RESTART_POLICIES = ("Never", "OnFailure")


def pathways_dir_problem(value: object) -> SpecProblem | None:
    path = "spec.pathwaysDir"
    fix = "set pathways_dir to a folder in an existing bucket, such as 'gs://my-bucket/pathways'"
    if value is None:
        return SpecProblem(path, "is missing; every Pathways component needs a gs:// scratch location", fix)
    if not isinstance(value, str) or not value.startswith("gs://"):
        return SpecProblem(path, f"{value!r} is not a gs:// URL", fix)
    bucket = value[len("gs://") :].split("/", 1)[0]
    if reason := bucket_name_error(bucket):
        return SpecProblem(path, f"bucket name {bucket!r} in {value!r} {reason}", fix)
    return None


# ---------------------------------------------------------------------- controller


def controller_problems(controller: ControllerSpec, workers: WorkerSpec, out: list[SpecProblem]) -> None:
    if controller.deployment_mode not in DEPLOYMENT_MODES:
        out.append(
            SpecProblem(
                f"{_CONTROLLER}.deploymentMode",
                f"{controller.deployment_mode!r} is not a deployment mode",
                f"use one of: {', '.join(DEPLOYMENT_MODES)}",
            )
        )
    main = controller.main_container_name
    main_ok = isinstance(main, str) and k8s.dns1123_label_error(main) is None
    if not main_ok:
        out.append(
            SpecProblem(
                f"{_CONTROLLER}.mainContainerName",
                f"{main!r} is not a valid container name",
                "use the name of the template container that runs the JAX program (lowercase, e.g. 'main')",
            )
        )
    if controller.elastic_slices is not None:
        problem = int_problem(
            controller.elastic_slices,
            f"{_CONTROLLER}.elasticSlices",
            minimum=0,
            fix="set elastic_slices to how many slices may be missing at once (0 or more)",
        )
        slices = workers.num_slices
        if problem is None and is_int(slices) and slices >= 1 and controller.elastic_slices >= slices:
            problem = SpecProblem(
                f"{_CONTROLLER}.elasticSlices",
                f"is {controller.elastic_slices} but numSlices is {slices}: at least one slice must stay up",
                f"set elastic_slices to at most {slices - 1}, or raise num_slices",
            )
        add_problem(out, problem)
    if controller.enable_metrics_collection is not None and not isinstance(
        controller.enable_metrics_collection, bool
    ):
        out.append(
            SpecProblem(
                f"{_CONTROLLER}.enableMetricsCollection",
                f"must be true or false, not {controller.enable_metrics_collection!r}",
                "set enable_metrics_collection to a bool or leave it unset",
            )
        )
    if controller.template is not None:
        names = _template_problems(controller.template, out)
        if main_ok and names is not None and main not in names:
            out.append(
                SpecProblem(
                    f"{_CONTROLLER}.mainContainerName",
                    f"{main!r} names no container of the template (containers: {', '.join(names) or 'none'})",
                    "set main_container_name to the container that runs the JAX program"
                    + (f": one of {', '.join(names)}" if names else ""),
                )
            )


def _template_problems(template: object, out: list[SpecProblem]) -> list[str] | None:
    """Problems of the user's pod template; returns its container names (None if it has no container list)."""
    if not isinstance(template, Mapping):
        out.append(
            SpecProblem(
                _TEMPLATE, f"must be a pod template mapping, not {type(template).__name__}", "pass a dict"
            )
        )
        return None
    for key in template:
        if key not in ("metadata", "spec"):
            out.append(
                SpecProblem(
                    f"{_TEMPLATE}.{key}",
                    "is not a field of a pod template (which has only metadata and spec)",
                    "put pod fields such as containers under 'spec:'",
                )
            )
    metadata = template.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            out.append(SpecProblem(f"{_TEMPLATE}.metadata", "must be a mapping", "write key: value pairs"))
        else:
            if metadata.get("labels") is not None:
                string_map_problems(
                    metadata["labels"], f"{_TEMPLATE}.metadata.labels", out, label_values=True
                )
            if metadata.get("annotations") is not None:
                string_map_problems(
                    metadata["annotations"], f"{_TEMPLATE}.metadata.annotations", out, label_values=False
                )
    pod = template.get("spec")
    if pod is None and "containers" in template:
        return None  # reported above as a pod spec not wrapped in 'spec:'
    if not isinstance(pod, Mapping):
        out.append(
            SpecProblem(
                f"{_TEMPLATE}.spec",
                "is missing" if pod is None else "must be a mapping",
                "add a pod spec with the user program's containers, or drop the template for a headless job",
            )
        )
        return None
    restart_policy = pod.get("restartPolicy")
    if restart_policy is not None and restart_policy not in _JOB_RESTART_POLICIES:
        out.append(
            SpecProblem(
                f"{_TEMPLATE}.spec.restartPolicy",
                f"{restart_policy!r} is not allowed in a Job's pod",
                "use Never or OnFailure, or leave it unset",
            )
        )
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        out.append(
            SpecProblem(
                f"{_TEMPLATE}.spec.containers",
                "is missing or empty",
                "list at least one container with a name and an image",
            )
        )
        return None
    names: list[str] = []
    for index, container in enumerate(containers):
        _container_problems(container, f"{_TEMPLATE}.spec.containers[{index}]", names, out)
    return names


def _container_problems(container: object, path: str, names: list[str], out: list[SpecProblem]) -> None:
    if not isinstance(container, Mapping):
        out.append(
            SpecProblem(path, "must be a container mapping", "write name:, image:, ... for the container")
        )
        return
    name = container.get("name")
    if not isinstance(name, str) or not name:
        out.append(
            SpecProblem(f"{path}.name", "is missing", "give the container a lowercase name such as 'main'")
        )
    else:
        if reason := k8s.dns1123_label_error(name):
            out.append(SpecProblem(f"{path}.name", f"{name!r} {reason}", f"use {k8s.suggest_name(name)!r}"))
        if name in (PROXY_CONTAINER, RM_CONTAINER):
            out.append(
                SpecProblem(
                    f"{path}.name",
                    f"{name!r} is the name of a container the controller adds to the head pod",
                    "rename the container",
                )
            )
        if name in names:
            out.append(
                SpecProblem(f"{path}.name", f"{name!r} is used by another container", "use unique names")
            )
        names.append(name)
    image = container.get("image")
    if not isinstance(image, str) or not image:
        out.append(SpecProblem(f"{path}.image", "is missing", "set the container image, e.g. 'python:3.12'"))
    elif reason := k8s.image_reference_error(image):
        out.append(SpecProblem(f"{path}.image", f"{image!r} {reason}", "use a pullable image reference"))
    _env_problems(container.get("env"), f"{path}.env", out)


def _env_problems(env: Any, path: str, out: list[SpecProblem]) -> None:
    if env is None:
        return
    if not isinstance(env, list):
        out.append(SpecProblem(path, "must be a list of {name, value} entries", "write env as a YAML list"))
        return
    for index, entry in enumerate(env):
        entry_path = f"{path}[{index}]"
        if not isinstance(entry, Mapping):
            out.append(SpecProblem(entry_path, "must be a mapping with name and value", "write - name: X"))
            continue
        if not isinstance(entry.get("name"), str) or not entry.get("name"):
            out.append(
                SpecProblem(f"{entry_path}.name", "is missing", "give every environment variable a name")
            )
        value = entry.get("value")
        if value is not None and not isinstance(value, str):
            out.append(
                SpecProblem(
                    f"{entry_path}.value",
                    f"must be a string, not {type(value).__name__} {value!r}",
                    f'quote the value (value: "{value}")',
                )
            )


# ---------------------------------------------------------------------- custom components


def component_problems(components: object, out: list[SpecProblem]) -> None:
    if components is None:
        return
    path = "spec.customComponents"
    if not isinstance(components, list):
        out.append(SpecProblem(path, "must be a list of CustomComponent", "pass a list"))
        return
    if len(components) > MAX_CUSTOM_COMPONENTS:
        out.append(
            SpecProblem(
                path,
                f"has {len(components)} entries; a PathwaysJob takes at most {MAX_CUSTOM_COMPONENTS}",
                "keep one entry per component type",
            )
        )
    seen: dict[str, int] = {}
    for index, component in enumerate(components):
        cpath = f"{path}[{index}]"
        ctype = getattr(component, "component_type", None)
        if ctype not in COMPONENT_TYPES:
            out.append(
                SpecProblem(
                    f"{cpath}.componentType",
                    f"{ctype!r} is not a component type",
                    f"use one of: {', '.join(COMPONENT_TYPES)}",
                )
            )
        elif ctype in seen:
            out.append(
                SpecProblem(
                    f"{cpath}.componentType",
                    f"{ctype!r} already appears at {path}[{seen[ctype]}]",
                    "merge the two entries into one",
                )
            )
        else:
            seen[ctype] = index
        # An empty or absent image means the controller's default (MakeComponentImage); for the
        # colocated Python sidecar, no sidecar (MakeColocateHeadWithWorkersPythonInitContainers).
        image = getattr(component, "image", None)
        if image not in (None, ""):
            reason = k8s.image_reference_error(image) if isinstance(image, str) else "must be a string"
            if reason:
                out.append(
                    SpecProblem(f"{cpath}.image", f"{image!r} {reason}", "use a pullable image reference")
                )
        # The controller appends customFlags to the component's arguments verbatim
        # (AppendCustomComponentFlags): any strings, `--name=value` and absl's `-name=value` alike.
        flags = getattr(component, "custom_flags", None)
        if flags is not None:
            if not isinstance(flags, list):
                out.append(SpecProblem(f"{cpath}.customFlags", "must be a list of strings", "pass a list"))
            else:
                for flag_index, flag in enumerate(flags):
                    if not isinstance(flag, str):
                        out.append(
                            SpecProblem(
                                f"{cpath}.customFlags[{flag_index}]",
                                f"{flag!r} is not a string",
                                "write flags as text, e.g. '--name=value'",
                            )
                        )
        _env_problems(getattr(component, "custom_env", None), f"{cpath}.customEnv", out)
