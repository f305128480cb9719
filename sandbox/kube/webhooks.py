"""Kubernetes' own object validation and the admission webhooks a GKE cluster with JobSet and Kueue runs.

- ``metadata_causes``: what the API server checks on every object (apimachinery ``ValidateObjectMeta``):
  names, label keys and values, annotation keys and their total size (256 KiB).
- ``workload_causes``: Job names fit the ``job-name`` label (<= 63); pod hostnames and subdomains are
  DNS-1123 labels; labels of pod templates.
- ``jobset_create_causes``: the JobSet validating webhook's create-time rules (jobset
  ``jobset_webhook.go`` ``ValidateCreate``): generated Job and pod names are DNS-1035 labels, the
  coordinator label value ``<name>-<rjob>-<job>-<pod>.<subdomain>`` is a valid label value,
  replicas x parallelism <= MaxInt32, subdomain, coordinator, success and failure policies.
- ``kueue_defaults``: Kueue's mutating webhook suspends a job that carries
  ``kueue.x-k8s.io/queue-name`` until it is admitted (kueue ``defaults.go`` ``ApplyDefaultForSuspend``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from sandbox.kube.resources import ResourceType

Cause = dict[str, str]

MAX_INT32 = 2**31 - 1
MAX_LABEL = 63
MAX_ANNOTATIONS = 256 * 1024
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
COORDINATOR_LABEL = "jobset.sigs.k8s.io/coordinator"
WEBHOOK_PREFIX = 'admission webhook "vjobset.kb.io" denied the request: '

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_JOB_FAILURE_REASONS = (
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
)

POD_NAME_TOO_LONG = "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"
DNS1035_MESSAGE = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex "
    "used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex "
    "used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
QUALIFIED_NAME_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def _invalid(field: str, value: Any, message: str) -> Cause:
    return {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: {json.dumps(value)}: {message}",
        "field": field,
    }


def dns1035_label_errors(value: str) -> list[str]:
    """``validation.IsDNS1035Label``."""
    errors = []
    if len(value) > MAX_LABEL:
        errors.append(f"must be no more than {MAX_LABEL} characters")
    if not _DNS1035_LABEL.match(value):
        errors.append(DNS1035_MESSAGE)
    return errors


def dns1123_label_errors(value: str) -> list[str]:
    """``validation.IsDNS1123Label``."""
    errors = []
    if len(value) > MAX_LABEL:
        errors.append(f"must be no more than {MAX_LABEL} characters")
    if not _DNS1123_LABEL.match(value):
        errors.append(DNS1123_LABEL_MESSAGE)
    return errors


def dns1123_subdomain_errors(value: str) -> list[str]:
    """``validation.IsDNS1123Subdomain``."""
    errors = []
    if len(value) > 253:
        errors.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        errors.append(DNS1123_SUBDOMAIN_MESSAGE)
    return errors


def label_value_errors(value: object) -> list[str]:
    """``validation.IsValidLabelValue``."""
    if not isinstance(value, str):
        return ["must be a string"]
    errors = []
    if len(value) > MAX_LABEL:
        errors.append(f"must be no more than {MAX_LABEL} characters")
    if not _LABEL_VALUE.match(value):
        errors.append(LABEL_VALUE_MESSAGE)
    return errors


def qualified_name_errors(key: object) -> list[str]:
    """``validation.IsQualifiedName`` (label and annotation keys)."""
    if not isinstance(key, str) or not key:
        return ["name part must be non-empty"]
    prefix, slash, name = key.rpartition("/")
    errors = []
    if slash:
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {e}" for e in dns1123_subdomain_errors(prefix)]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > MAX_LABEL:
        errors.append(f"name part must be no more than {MAX_LABEL} characters")
    elif not _QUALIFIED_NAME.match(name):
        errors.append(QUALIFIED_NAME_MESSAGE)
    return errors


def _map_causes(
    value: Any, field: str, *, values_are_labels: bool, causes: list[Cause], lowercase_keys: bool = False
) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        causes.append(_invalid(field, value, "must be a map of string keys to string values"))
        return
    for key, item in value.items():
        for error in qualified_name_errors(key.lower() if lowercase_keys and isinstance(key, str) else key):
            causes.append(_invalid(field, key, error))
        if values_are_labels:
            for error in label_value_errors(item):
                causes.append(_invalid(field, item, error))
        elif not isinstance(item, str):
            causes.append(_invalid(field, item, "must be a string"))
    if not values_are_labels:
        total = sum(len(str(k)) + len(str(v)) for k, v in value.items())
        if total > MAX_ANNOTATIONS:
            causes.append(
                {
                    "reason": "FieldValueTooLong",
                    "message": f"Too long: may not be more than {MAX_ANNOTATIONS} bytes",
                    "field": field,
                }
            )


def object_meta_causes(meta: Any, field: str) -> list[Cause]:
    """Labels and annotations of an object (or of a template's metadata)."""
    causes: list[Cause] = []
    if not isinstance(meta, dict):
        return causes
    _map_causes(meta.get("labels"), f"{field}.labels", values_are_labels=True, causes=causes)
    _map_causes(
        meta.get("annotations"),
        f"{field}.annotations",
        values_are_labels=False,
        causes=causes,
        lowercase_keys=True,
    )
    return causes


def metadata_causes(rt: ResourceType, obj: dict[str, Any]) -> list[Cause]:
    """``ValidateObjectMeta``: name (a DNS-1123 subdomain), labels and annotations."""
    md = obj.get("metadata") or {}
    name = md.get("name")
    if not name:
        return [
            {
                "reason": "FieldValueRequired",
                "message": "Required value: name or generateName is required",
                "field": "metadata.name",
            }
        ]
    causes = [_invalid("metadata.name", name, e) for e in dns1123_subdomain_errors(str(name))]
    causes += object_meta_causes(md, "metadata")
    return causes


def workload_causes(rt: ResourceType, obj: dict[str, Any]) -> list[Cause]:
    """Checks of batch Jobs and pods that depend on derived names."""
    causes: list[Cause] = []
    md = obj.get("metadata") or {}
    spec: dict[str, Any] = obj["spec"] if isinstance(obj.get("spec"), dict) else {}
    if rt.plural == "jobs":
        # The API server labels the pod template with job-name: <name>, a label value.
        for error in label_value_errors(md.get("name", "")):
            causes.append(_invalid("spec.template.metadata.labels", md.get("name", ""), error))
        template: dict[str, Any] = spec["template"] if isinstance(spec.get("template"), dict) else {}
        causes += object_meta_causes(template.get("metadata"), "spec.template.metadata")
        causes += _pod_spec_causes(template.get("spec"), "spec.template.spec")
    elif rt.plural == "pods":
        causes += _pod_spec_causes(spec, "spec")
    return causes


def _pod_spec_causes(pod: Any, field: str) -> list[Cause]:
    causes: list[Cause] = []
    if not isinstance(pod, dict):
        return causes
    for key in ("hostname", "subdomain"):
        value = pod.get(key)
        if value:
            causes += [_invalid(f"{field}.{key}", value, e) for e in dns1123_label_errors(str(value))]
    return causes


# -- JobSet webhook -----------------------------------------------------------------------------------


def _replicated_jobs(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in spec.get("replicatedJobs") or [] if isinstance(r, dict)]


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _subdomain(obj: dict[str, Any]) -> str:
    network = (obj.get("spec") or {}).get("network") or {}
    return network.get("subdomain") or (obj.get("metadata") or {}).get("name", "")


def jobset_webhook_defaults(obj: dict[str, Any]) -> None:
    """The JobSet mutating webhook's failure-policy rule names (``failurePolicyRule<i>``)."""
    policy = (obj.get("spec") or {}).get("failurePolicy")
    if isinstance(policy, dict):
        for index, rule in enumerate(policy.get("rules") or []):
            if isinstance(rule, dict) and not rule.get("name"):
                rule["name"] = f"failurePolicyRule{index}"


def jobset_create_causes(obj: dict[str, Any]) -> list[Cause]:
    """``ValidateCreate`` of jobset_webhook.go; plain errors become ``<nil>: Internal error`` causes."""
    causes: list[Cause] = []
    name = (obj.get("metadata") or {}).get("name", "")
    spec: dict[str, Any] = obj["spec"] if isinstance(obj.get("spec"), dict) else {}
    rjobs = _replicated_jobs(spec)

    def internal(message: str) -> None:
        causes.append({"reason": "InternalError", "message": f"Internal error: {message}", "field": "<nil>"})

    if rjobs and rjobs[0].get("dependsOn"):
        internal("DependsOn can't be set for the first ReplicatedJob")
    subdomain = ((spec.get("network") or {}).get("subdomain")) or ""
    if subdomain:
        for error in dns1123_subdomain_errors(subdomain):
            causes.append(_invalid("spec.network.subdomain", subdomain, error))
        for error in dns1035_label_errors(subdomain):
            if "no more than" in error:
                error = ".spec.network.subdomain is too long, must be less than 63 characters"
            causes.append(_invalid("spec.network.subdomain", subdomain, error))
    managed_by = spec.get("managedBy")
    if isinstance(managed_by, str) and len(managed_by) > MAX_LABEL:
        causes.append(
            {
                "reason": "FieldValueTooLong",
                "message": f"Too long: may not be more than {MAX_LABEL} bytes",
                "field": "spec.managedBy",
            }
        )
    names: set[str] = set()
    for index, rjob in enumerate(rjobs):
        where = f"spec.replicatedJobs[{index}]"
        rjob_name = str(rjob.get("name", ""))
        names.add(rjob_name)
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        replicas = _int(rjob.get("replicas"), 1)
        parallelism = _int(job_spec.get("parallelism"), 1)
        if parallelism * replicas > MAX_INT32:
            internal(
                f"the product of replicas and parallelism must not exceed {MAX_INT32} for replicatedJob "
                f"'{rjob_name}'"
            )
        group = rjob.get("groupName", "default")
        for error in dns1035_label_errors(str(group)):
            if "no more than" in error:
                error = ".spec.replicatedJob[].groupName is too long, must be less than 63 characters"
            causes.append(_invalid(f"{where}.groupName", group, error))
        longest_job = f"{name}-{rjob_name}-{replicas - 1}"
        for error in dns1035_label_errors(longest_job):
            if "no more than" in error:
                error = (
                    "JobSet name is too long, job names generated for this JobSet will exceed 63 characters"
                )
            causes.append(_invalid(f"{where}.name", longest_job, error))
        completions = job_spec.get("completions")
        if job_spec.get("completionMode") == "Indexed" and isinstance(completions, int):
            longest_pod = f"{name}-{rjob_name}-{replicas - 1}-{completions - 1}-abcde"
            for error in dns1035_label_errors(longest_pod):
                if "no more than" in error:
                    error = POD_NAME_TOO_LONG
                causes.append(_invalid(f"{where}.name", longest_job, error))
        for dep in rjob.get("dependsOn") or []:
            if isinstance(dep, dict) and dep.get("name") not in names - {rjob_name}:
                internal(f"replicatedJob: {rjob_name} cannot depend on replicatedJob: {dep.get('name')}")
    for target in (spec.get("successPolicy") or {}).get("targetReplicatedJobs") or []:
        if target not in names:
            internal(f"invalid replicatedJob name '{target}' does not appear in .spec.ReplicatedJobs")
    _failure_policy_causes(spec, names, internal)
    coordinator = spec.get("coordinator")
    if isinstance(coordinator, dict):
        _coordinator_causes(obj, coordinator, rjobs, internal)
    return causes


def _failure_policy_causes(spec: dict[str, Any], names: set[str], internal: Any) -> None:
    policy = spec.get("failurePolicy")
    if not isinstance(policy, dict):
        return
    seen: dict[str, list[int]] = {}
    for index, rule in enumerate(policy.get("rules") or []):
        if not isinstance(rule, dict):
            continue
        rule_name = str(rule.get("name", ""))
        if not 1 <= len(rule_name) <= 128:
            internal(
                f"invalid failure policy rule name of length {len(rule_name)}, "
                "the rule name must be at least 1 "
                "characters long and at most 128 characters long"
            )
        seen.setdefault(rule_name, []).append(index)
        if not _RULE_NAME.match(rule_name):
            internal(
                f"invalid failure policy rule name '{rule_name}', "
                "a failure policy rule name must start with an alphabetic character, "
                "optionally followed by a string of alphanumeric characters or '_,:', and "
                "must end with an alphanumeric character or '_'"
            )
        for target in rule.get("targetReplicatedJobs") or []:
            if target not in names:
                internal(
                    f"invalid replicatedJob name '{target}' in failure policy "
                    "does not appear in .spec.ReplicatedJobs"
                )
        for reason in rule.get("onJobFailureReasons") or []:
            if reason not in _JOB_FAILURE_REASONS:
                internal(
                    f"invalid job failure reason '{reason}' in failure policy "
                    "is not a recognized job failure reason"
                )
    for rule_name, indices in seen.items():
        if len(indices) > 1:
            internal(
                f"rule names are not unique, rules with indices {indices} "
                f"all have the same name '{rule_name}'"
            )


def _coordinator_causes(
    obj: dict[str, Any], coordinator: dict[str, Any], rjobs: list[dict[str, Any]], internal: Any
) -> None:
    target = coordinator.get("replicatedJob")
    rjob = next((r for r in rjobs if r.get("name") == target), None)
    job_index, pod_index = _int(coordinator.get("jobIndex"), 0), _int(coordinator.get("podIndex"), 0)
    if rjob is None:
        internal(f"coordinator replicatedJob {target} does not exist")
    else:
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        completions = job_spec.get("completions")
        if not 0 <= job_index < _int(rjob.get("replicas"), 1):
            internal(f"coordinator job index {job_index} is invalid for replicatedJob {target}")
        elif job_spec.get("completionMode") != "Indexed" or not isinstance(completions, int):
            internal(
                "job for coordinator pod must be indexed completion mode, and completions number must be set"
            )
        elif not 0 <= pod_index < completions:
            internal(
                f"coordinator pod index {pod_index} is invalid for replicatedJob {target} "
                f"job index {job_index}"
            )
    name = (obj.get("metadata") or {}).get("name", "")
    value = f"{name}-{target}-{job_index}-{pod_index}.{_subdomain(obj)}"
    errors = label_value_errors(value)
    if errors:
        internal(
            f"spec will lead to invalid label value {json.dumps(value)} for coordinator label "
            f'"{COORDINATOR_LABEL}" (long JobSet / ReplicatedJob / SubDomain name?): {", ".join(errors)}'
        )


# -- Kueue webhook ------------------------------------------------------------------------------------


REJECT_JOBSET = "sandbox.pathways.dev/reject-jobset"


def policy_webhook_refusal(obj: dict[str, Any]) -> str | None:
    """A third-party policy webhook refusing JobSets that carry the ``reject-jobset`` knob (its message)."""
    message = ((obj.get("metadata") or {}).get("annotations") or {}).get(REJECT_JOBSET)
    if not message:
        return None
    return f'admission webhook "validation.policy.example.com" denied the request: {message}'


def kueue_defaults(obj: dict[str, Any]) -> None:
    """A JobSet with ``kueue.x-k8s.io/queue-name`` is created suspended; Kueue unsuspends it on admission."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    spec = obj.get("spec")
    if labels.get(QUEUE_NAME_LABEL) and isinstance(spec, dict) and not spec.get("suspend"):
        spec["suspend"] = True
