"""Kubernetes' own object validation and the admission webhooks a GKE cluster with JobSet and Kueue runs.

- ``metadata_causes``: what the API server checks on every object (apimachinery ``ValidateObjectMeta``):
  names, label keys and values, annotation keys and their total size (256 KiB).
- ``workload_causes``: Job names fit the ``job-name`` label (<= 63); pod hostnames and subdomains are
  DNS-1123 labels; labels of pod templates.
- ``jobset_create_causes``: the JobSet validating webhook's create-time rules (jobset
  ``jobset_webhook.go`` ``ValidateCreate``): generated Job and pod names are DNS-1035 labels, the
  coordinator label value ``<name>-<rjob>-<job>-<pod>.<subdomain>`` is a valid label value,
  replicas x parallelism <= MaxInt32, subdomain, coordinator, success and failure policies, and the
  feature-gated ones: ``restartStrategy: InPlaceRestart`` and the ``RestartJob`` actions.
- ``jobset_update_causes``: the webhook's ``ValidateUpdate``: ``replicatedJobs`` and ``managedBy``
  are immutable, except the pod template's scheduling fields of a suspended JobSet and, with the
  ``ElasticJobSet`` gate, ``parallelism``/``completions`` of an Indexed replicated job.
- ``feature_gates``: the JobSet controller's feature gates (jobset ``features.go``), per JobSet from
  the ``sandbox.pathways.dev/jobset-feature-gates`` knob.
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
# jobset_types.go FailurePolicyAction (the CRD's enum) and the two that need the RestartJob gate.
FAILURE_POLICY_ACTIONS = (
    "FailJobSet",
    "RestartJobSet",
    "RestartJobSetAndIgnoreMaxRestarts",
    "RestartJob",
    "RestartJobAndIgnoreMaxRestarts",
)
RESTART_JOB_ACTIONS = ("RestartJob", "RestartJobAndIgnoreMaxRestarts")
# jobset_webhook.go maxReplicasPerReplicatedJob: the MaxItems of ReplicatedJobStatus.jobRestarts.
MAX_REPLICAS_WITH_RESTART_JOB = 1024
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


# -- JobSet feature gates -----------------------------------------------------------------------------

FEATURE_GATES = "sandbox.pathways.dev/jobset-feature-gates"
IN_PLACE_RESTART = "InPlaceRestart"
RESTART_JOB = "RestartJob"
ELASTIC_JOBSET = "ElasticJobSet"
# jobset features.go (v0.12): all three are Alpha and off by default.
JOBSET_GATES = (IN_PLACE_RESTART, RESTART_JOB, ELASTIC_JOBSET)
_TRUE = ("1", "t", "true")


def feature_gates(obj: dict[str, Any] | None) -> frozenset[str]:
    """The JobSet feature gates on for ``obj``: its ``jobset-feature-gates`` knob, written as the
    controller's ``--feature-gates`` flag (``RestartJob=true,ElasticJobSet=true``); unknown gates
    and unreadable entries are ignored."""
    notes = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    enabled = set()
    for entry in str(notes.get(FEATURE_GATES) or "").split(","):
        gate, _, value = entry.partition("=")
        if gate.strip() in JOBSET_GATES and value.strip().lower() in _TRUE:
            enabled.add(gate.strip())
    return frozenset(enabled)


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

    gates = feature_gates(obj)
    in_place = ((spec.get("failurePolicy") or {}).get("restartStrategy")) == "InPlaceRestart"
    if in_place and IN_PLACE_RESTART not in gates:
        internal("InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled")
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
        if in_place and IN_PLACE_RESTART in gates:
            causes += _in_place_restart_causes(rjob_name, job_spec, f"{where}.template.spec")
    for target in (spec.get("successPolicy") or {}).get("targetReplicatedJobs") or []:
        if target not in names:
            internal(f"invalid replicatedJob name '{target}' does not appear in .spec.ReplicatedJobs")
    _failure_policy_causes(spec, names, internal, gates)
    coordinator = spec.get("coordinator")
    if isinstance(coordinator, dict):
        _coordinator_causes(obj, coordinator, rjobs, internal)
    return causes


def _in_place_restart_causes(rjob_name: str, job_spec: dict[str, Any], where: str) -> list[Cause]:
    """``ValidateCreate`` with the ``InPlaceRestart`` gate: backoffLimit MaxInt32, podReplacementPolicy
    Failed, completions equal to parallelism."""
    causes = []
    if job_spec.get("backoffLimit") != MAX_INT32:
        causes.append(
            _invalid(
                f"{where}.backoffLimit",
                job_spec.get("backoffLimit"),
                f"replicatedJob {rjob_name}: must be set to {MAX_INT32} (MaxInt32) when in-place restart is "
                "enabled",
            )
        )
    if job_spec.get("podReplacementPolicy") != "Failed":
        causes.append(
            _invalid(
                f"{where}.podReplacementPolicy",
                job_spec.get("podReplacementPolicy"),
                f"replicatedJob {rjob_name}: must be set to Failed when in-place restart is enabled",
            )
        )
    completions, parallelism = job_spec.get("completions"), job_spec.get("parallelism")
    if completions is None or parallelism is None or completions != parallelism:
        causes.append(
            _invalid(
                f"{where}.completions",
                completions,
                f"replicatedJob {rjob_name}: completions and parallelism must be set and equal to each other "
                "when in-place restart is enabled",
            )
        )
    return causes


def _failure_policy_causes(
    spec: dict[str, Any], names: set[str], internal: Any, gates: frozenset[str] = frozenset()
) -> None:
    policy = spec.get("failurePolicy")
    if not isinstance(policy, dict):
        return
    rules = [rule for rule in policy.get("rules") or [] if isinstance(rule, dict)]
    if any(rule.get("action") in RESTART_JOB_ACTIONS for rule in rules):
        if RESTART_JOB not in gates:
            internal(
                "RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not allowed when "
                "RestartJob feature gate is disabled"
            )
            return
        if any(
            _int(rjob.get("replicas"), 1) > MAX_REPLICAS_WITH_RESTART_JOB for rjob in _replicated_jobs(spec)
        ):
            internal(
                "JobSet cannot have a failure policy rule with RestartJob or RestartJobAndIgnoreMaxRestarts "
                f"action and a replicated job with replicas > {MAX_REPLICAS_WITH_RESTART_JOB}"
            )
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


def _forbidden(field: str, message: str) -> Cause:
    return {"reason": "FieldValueForbidden", "message": f"Forbidden: {message}", "field": field}


def _true_condition(obj: dict[str, Any], type_: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == type_ and c.get("status") == "True" for c in conditions if isinstance(c, dict)
    )


def _pruned(value: Any) -> Any:
    """``value`` without null, empty maps and empty lists (Semantic.DeepEqual of omitempty fields)."""
    if isinstance(value, dict):
        kept = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


# Pod template fields Kueue may change while a JobSet is suspended (jobset_webhook.go ValidateUpdate).
_SUSPENDED_MUTABLE = (
    ("metadata", "annotations"),
    ("metadata", "labels"),
    ("spec", "nodeSelector"),
    ("spec", "tolerations"),
    ("spec", "schedulingGates"),
)


def _job_spec(rjob: Any) -> dict[str, Any]:
    spec = (rjob.get("template") or {}).get("spec") if isinstance(rjob, dict) else None
    return spec if isinstance(spec, dict) else {}


def _copy_field(target: dict[str, Any], source: dict[str, Any], key: str) -> None:
    if key in source:
        target[key] = json.loads(json.dumps(source[key]))
    else:
        target.pop(key, None)


def _elastic_causes(
    new_job: dict[str, Any], old_job: dict[str, Any], where: str, terminal: bool
) -> list[Cause]:
    """The ``ElasticJobSet`` rules on a changed ``parallelism``/``completions`` of an Indexed job."""
    parallelism, completions = new_job.get("parallelism"), new_job.get("completions")
    parallelism_changed = parallelism != old_job.get("parallelism")
    completions_changed = completions != old_job.get("completions")
    if not (parallelism_changed or completions_changed):
        return []
    if terminal:
        message = "Cannot mutate parallelism or completions when JobSet is in a terminal state "
        return [_forbidden(where, message + "(Completed or Failed)")]
    causes = []
    if parallelism_changed and isinstance(parallelism, int) and parallelism < 1:
        causes.append(_invalid(f"{where}.parallelism", parallelism, "parallelism must be >= 1"))
    if completions_changed and isinstance(completions, int) and completions < 1:
        causes.append(_invalid(f"{where}.completions", completions, "completions must be >= 1"))
    if parallelism is not None and completions is not None and parallelism != completions:
        message = "completions must be equal to parallelism for Elastic Indexed Jobs"
        causes.append(_invalid(f"{where}.completions", completions, message))
    return causes


def jobset_update_causes(obj: dict[str, Any], old: dict[str, Any]) -> list[Cause]:
    """``ValidateUpdate`` of jobset_webhook.go: ``spec.replicatedJobs`` and ``spec.managedBy`` are
    immutable, except (a) with the ``ElasticJobSet`` gate, ``parallelism`` and ``completions`` of an
    existing Indexed replicated job: >= 1, equal to each other, and never once the JobSet completed or
    failed; (b) while the JobSet is or is being suspended, its pod templates' annotations, labels,
    nodeSelector, tolerations and schedulingGates. ``replicas`` is never mutable (v0.12)."""
    causes: list[Cause] = []
    spec: dict[str, Any] = obj["spec"] if isinstance(obj.get("spec"), dict) else {}
    old_spec: dict[str, Any] = old["spec"] if isinstance(old.get("spec"), dict) else {}
    new_rjobs, old_rjobs = spec.get("replicatedJobs") or [], old_spec.get("replicatedJobs") or []
    munged = json.loads(json.dumps(new_rjobs))
    old_by_name = {r.get("name"): r for r in old_rjobs if isinstance(r, dict)}
    pairs = [
        (index, old_by_name[rjob.get("name")])
        for index, rjob in enumerate(new_rjobs)
        if isinstance(rjob, dict) and rjob.get("name") in old_by_name
    ]
    if ELASTIC_JOBSET in feature_gates(old):
        terminal = _true_condition(old, "Completed") or _true_condition(old, "Failed")
        for index, old_rjob in pairs:
            new_job, old_job = _job_spec(new_rjobs[index]), _job_spec(old_rjob)
            if new_job.get("completionMode") == "Indexed":
                causes += _elastic_causes(
                    new_job, old_job, f"spec.replicatedJobs[{index}].template.spec", terminal
                )
                target = munged[index].setdefault("template", {}).setdefault("spec", {})
                for key in ("parallelism", "completions"):
                    _copy_field(target, old_job, key)
    if old_spec.get("suspend") is True or spec.get("suspend") is True:
        for index, old_rjob in pairs:
            old_pod = _job_spec(old_rjob).get("template") or {}
            job = munged[index].setdefault("template", {}).setdefault("spec", {})
            new_pod = job.setdefault("template", {})
            for part, key in _SUSPENDED_MUTABLE:
                _copy_field(new_pod.setdefault(part, {}), old_pod.get(part) or {}, key)
    if _pruned(munged) != _pruned(old_rjobs):
        # The webhook prints the whole Go value (%#v); it is elided here.
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: []v1alpha2.ReplicatedJob{...}: field is immutable",
                "field": "spec.replicatedJobs",
            }
        )
    if spec.get("managedBy") != old_spec.get("managedBy"):
        causes.append(_invalid("spec.managedBy", spec.get("managedBy"), "field is immutable"))
    return causes


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
