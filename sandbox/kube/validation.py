"""Admission for created and updated objects: CRD schema validation, defaults, pruning, immutability.

PathwaysJobs are checked against the CRD's OpenAPI v3 schema (``crds/pathwaysjobs.crd.yaml``) with
jsonschema, as a real API server does: schema defaults are applied, unknown fields are pruned, and
``x-kubernetes-validations`` rules of the form ``self == oldSelf`` are enforced on update. JobSets get
the defaults and the few checks of the JobSet webhook that matter to clients.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sandbox.kube import webhooks
from sandbox.kube.errors import ApiError, invalid
from sandbox.kube.resources import ResourceType

CRD_DIR = Path(__file__).resolve().parent / "crds"
PATHWAYSJOB_CRD = CRD_DIR / "pathwaysjobs.crd.yaml"

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

Cause = dict[str, str]


def field_path(parts: list[Any] | tuple[Any, ...]) -> str:
    """``["spec", "workers", 0, "type"]`` -> ``spec.workers[0].type``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _shown(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(_type_name(value))
    return json.dumps(value)


@dataclass
class CrdSchema:
    """A CRD version's schema prepared for validation."""

    raw: dict[str, Any]
    validator: jsonschema.protocols.Validator
    immutable: list[tuple[tuple[str, ...], str]] = field(default_factory=list)

    # -- defaults ---------------------------------------------------------------------------------
    def apply_defaults(self, obj: dict[str, Any]) -> None:
        """Fill schema defaults in place, only under objects that are present (as the server does)."""
        _default(obj, self.raw)

    # -- pruning ----------------------------------------------------------------------------------
    def prune(self, obj: dict[str, Any]) -> list[str]:
        """Drop fields the schema does not declare; return their paths."""
        dropped: list[str] = []
        _prune(obj, self.raw, [], dropped, root=True)
        return dropped

    # -- validation -------------------------------------------------------------------------------
    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[Cause]:
        """Schema errors, then transition-rule (``self == oldSelf``) errors on update."""
        causes = [_cause(err) for err in sorted(self.validator.iter_errors(obj), key=_error_order)]
        if old is not None:
            for path, message in self.immutable:
                present_new, new_value = _lookup(obj, path)
                present_old, old_value = _lookup(old, path)
                if present_new and present_old and new_value != old_value:
                    causes.append(
                        {
                            "reason": "FieldValueInvalid",
                            "message": f"Invalid value: {json.dumps(_type_name(new_value))}: {message}",
                            "field": ".".join(path),
                        }
                    )
        return causes


def _error_order(err: jsonschema.ValidationError) -> tuple[str, str]:
    return (field_path(list(err.absolute_path)), err.validator)


def _lookup(obj: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    current = obj
    for part in path:
        if not isinstance(current, dict) or part not in current:
            return False, None
        current = current[part]
    return True, current


def _cause(err: jsonschema.ValidationError) -> Cause:
    parts = list(err.absolute_path)
    where = field_path(parts)
    value = err.instance
    kind = err.validator
    if kind == "required":
        missing = re.findall(r"'([^']+)' is a required property", err.message)
        name = missing[0] if missing else str(err.validator_value)
        return {
            "reason": "FieldValueRequired",
            "message": "Required value",
            "field": field_path([*parts, name]),
        }
    if kind == "enum":
        allowed = ", ".join(json.dumps(v) for v in err.validator_value)
        return {
            "reason": "FieldValueNotSupported",
            "message": f"Unsupported value: {_shown(value)}: supported values: {allowed}",
            "field": where,
        }
    if kind == "type":
        return {
            "reason": "FieldValueTypeInvalid",
            "message": f"Invalid value: {json.dumps(_type_name(value))}: "
            f"{where} in body must be of type {err.validator_value}: {json.dumps(_type_name(value))}",
            "field": where,
        }
    if kind == "maxItems":
        return {
            "reason": "FieldValueTooMany",
            "message": f"Too many: {len(value)}: must have at most {err.validator_value} items",
            "field": where,
        }
    if kind == "maxLength":
        return {
            "reason": "FieldValueTooLong",
            "message": f"Too long: may not be more than {err.validator_value} bytes",
            "field": where,
        }
    if kind in ("minimum", "maximum"):
        word = "greater" if kind == "minimum" else "less"
        return {
            "reason": "FieldValueInvalid",
            "message": f"Invalid value: {_shown(value)}: {where} in body should be {word} than or equal to "
            f"{err.validator_value}",
            "field": where,
        }
    if kind == "pattern":
        return {
            "reason": "FieldValueInvalid",
            "message": f"Invalid value: {_shown(value)}: {where} in body should match "
            f"'{err.validator_value}'",
            "field": where,
        }
    return {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: {_shown(value)}: {err.message}",
        "field": where,
    }


def _strip(node: Any) -> Any:
    """The schema without ``x-kubernetes-*`` keywords and ``format`` (jsonschema does not need them)."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key.startswith("x-kubernetes-") or key == "format" or key == "description":
                continue
            if key in ("properties", "patternProperties", "definitions"):
                out[key] = {k: _strip(v) for k, v in value.items()}
            else:
                out[key] = _strip(value)
        return out
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def _immutable_paths(
    node: dict[str, Any], path: tuple[str, ...], out: list[tuple[tuple[str, ...], str]]
) -> None:
    for rule in node.get("x-kubernetes-validations") or []:
        if rule.get("rule", "").replace(" ", "") == "self==oldSelf":
            out.append((path, rule.get("message") or "Value is immutable"))
    for key, child in (node.get("properties") or {}).items():
        _immutable_paths(child, (*path, key), out)


def _default(value: Any, schema: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, child in (schema.get("properties") or {}).items():
            if key not in value and "default" in child:
                value[key] = json.loads(json.dumps(child["default"]))
            if key in value:
                _default(value[key], child)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                if key not in (schema.get("properties") or {}):
                    _default(value[key], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(item, schema["items"])


def _prune(
    value: Any, schema: dict[str, Any], path: list[Any], dropped: list[str], root: bool = False
) -> None:
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-int-or-string"):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is not None:
            for key in list(value):
                if key in props:
                    if not (root and key == "metadata"):
                        _prune(value[key], props[key], [*path, key], dropped)
                elif isinstance(extra, dict):
                    _prune(value[key], extra, [*path, key], dropped)
                elif extra is not True:
                    dropped.append(field_path([*path, key]))
                    del value[key]
        elif isinstance(extra, dict):
            for key in value:
                _prune(value[key], extra, [*path, key], dropped)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _prune(item, schema["items"], [*path, index], dropped)


@cache
def pathwaysjob_schema() -> CrdSchema:
    """The PathwaysJob v1 schema from the bundled CRD."""
    crd = yaml.safe_load(PATHWAYSJOB_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    raw = version["schema"]["openAPIV3Schema"]
    cleaned = _strip(raw)
    validator_cls = jsonschema.validators.validator_for(cleaned, default=jsonschema.Draft7Validator)
    immutable: list[tuple[tuple[str, ...], str]] = []
    _immutable_paths(raw, (), immutable)
    return CrdSchema(raw=raw, validator=validator_cls(cleaned), immutable=immutable)


# -- JobSet ----------------------------------------------------------------------------------------


def jobset_defaults(obj: dict[str, Any]) -> None:
    """Defaults the JobSet webhook sets (network, success/startup policy, Indexed jobs, restart policy)."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    spec.setdefault("successPolicy", {"operator": "All"})
    spec["successPolicy"].setdefault("operator", "All")
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    if isinstance(spec.get("failurePolicy"), dict):
        spec["failurePolicy"].setdefault("restartStrategy", "Recreate")
    for rjob in spec.get("replicatedJobs") or []:
        if not isinstance(rjob, dict):
            continue
        rjob.setdefault("replicas", 1)
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
        if isinstance(pod_spec, dict):
            pod_spec.setdefault("restartPolicy", "OnFailure")


def validate_jobset(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[Cause]:
    """The JobSet checks a client can trip over: replicated jobs, names, counts, containers."""
    causes: list[Cause] = []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec"}]
    rjobs = spec.get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        return [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.replicatedJobs"}]
    seen: set[str] = set()
    for index, rjob in enumerate(rjobs):
        where = f"spec.replicatedJobs[{index}]"
        name = rjob.get("name") if isinstance(rjob, dict) else None
        if not name or not isinstance(name, str) or not _DNS_LABEL.match(name):
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": f"Invalid value: {json.dumps(name)}: must be a lowercase RFC 1123 label",
                    "field": f"{where}.name",
                }
            )
        elif name in seen:
            causes.append(
                {
                    "reason": "FieldValueDuplicate",
                    "message": f"Duplicate value: {json.dumps(name)}",
                    "field": f"{where}.name",
                }
            )
        else:
            seen.add(name)
        replicas = rjob.get("replicas", 1) if isinstance(rjob, dict) else None
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": f"Invalid value: {json.dumps(replicas)}: must be greater than or equal to 0",
                    "field": f"{where}.replicas",
                }
            )
        pod_spec = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        if not pod_spec.get("containers"):
            causes.append(
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value",
                    "field": f"{where}.template.spec.template.spec.containers",
                }
            )
    rules = (
        (spec.get("failurePolicy") or {}).get("rules")
        if isinstance(spec.get("failurePolicy"), dict)
        else None
    )
    for index, rule in enumerate(rules or []):
        action = rule.get("action") if isinstance(rule, dict) else None
        where = f"spec.failurePolicy.rules[{index}].action"
        if action is None:  # required, one of an enum (jobset_types.go FailurePolicyRule)
            causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": where})
        elif action not in webhooks.FAILURE_POLICY_ACTIONS:
            supported = ", ".join(json.dumps(a) for a in webhooks.FAILURE_POLICY_ACTIONS)
            causes.append(
                {
                    "reason": "FieldValueNotSupported",
                    "message": f"Unsupported value: {json.dumps(action)}: supported values: {supported}",
                    "field": where,
                }
            )
    if old is not None:
        old_names = [r.get("name") for r in (old.get("spec") or {}).get("replicatedJobs") or []]
        new_names = [r.get("name") for r in rjobs if isinstance(r, dict)]
        if old_names != new_names:
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": 'Invalid value: "array": field is immutable',
                    "field": "spec.replicatedJobs",
                }
            )
    return causes


def admit(
    rt: ResourceType,
    obj: dict[str, Any],
    old: dict[str, Any] | None,
    *,
    strict: bool = False,
    warnings: list[str] | None = None,
) -> None:
    """Default, prune and validate ``obj`` in place before it is stored; raise 422/400 ``ApiError``.

    As a GKE cluster with JobSet and Kueue: mutating webhooks (JobSet defaults, Kueue's suspend at
    creation), then the API server's validation (object metadata, CRD schemas, Job and pod names),
    then the JobSet validating webhook on create and update.
    """
    name = (obj.get("metadata") or {}).get("name") or ""
    if rt.plural == "jobsets":
        jobset_defaults(obj)
        if old is None:
            webhooks.jobset_webhook_defaults(obj)
            webhooks.kueue_defaults(obj)
    causes = webhooks.metadata_causes(rt, obj) if old is None else _changed_metadata_causes(rt, obj, old)
    causes += webhooks.workload_causes(rt, obj) if old is None else []
    if rt.plural == "pathwaysjobs":
        schema = pathwaysjob_schema()
        schema.apply_defaults(obj)
        dropped = schema.prune(obj)
        if dropped:
            unknown = ", ".join(f'unknown field "{path}"' for path in dropped)
            if strict:
                raise ApiError(400, f"strict decoding error: {unknown}", "BadRequest")
            if warnings is not None:
                warnings.extend(f'unknown field "{path}"' for path in dropped)
        causes += schema.validate(obj, old)
    elif rt.plural == "jobsets":
        causes += validate_jobset(obj, old)
    if causes:
        raise invalid(rt, name, causes)
    if rt.plural == "jobsets" and old is not None:
        webhook_causes = webhooks.jobset_update_causes(obj, old)
        if webhook_causes:
            raise invalid(rt, name, webhook_causes, prefix=webhooks.WEBHOOK_PREFIX)
    if rt.plural == "jobsets" and old is None:
        webhook_causes = webhooks.jobset_create_causes(obj)
        if webhook_causes:
            raise invalid(rt, name, webhook_causes, prefix=webhooks.WEBHOOK_PREFIX)
        refusal = webhooks.policy_webhook_refusal(obj)
        if refusal:
            raise ApiError(403, refusal, "Forbidden")


def _changed_metadata_causes(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any]) -> list[Cause]:
    """Labels and annotations are checked again on update when they changed."""
    new_md, old_md = obj.get("metadata") or {}, old.get("metadata") or {}
    if (new_md.get("labels"), new_md.get("annotations")) == (old_md.get("labels"), old_md.get("annotations")):
        return []
    return webhooks.object_meta_causes(new_md, "metadata")
