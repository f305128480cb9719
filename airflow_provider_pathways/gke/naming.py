"""Deterministic job names and Kubernetes-safe labels derived from the Airflow task.

The name rule comes from JobSet: its controller writes ``<name>-pathways-head-0-0.<subdomain>`` into
the label ``jobset.sigs.k8s.io/coordinator`` of every Job and pod (``CoordinatorEndpoint`` in
``jobset_controller.go``; the subdomain defaults to the JobSet's name), and a label value is at most
63 characters. JobSet >= v0.11 checks this at admission (``validateCoordinatorLabelValue`` in
``jobset_webhook.go``), so a Pathways job name has at most (63 - 19) / 2 = 22 characters.
"""

from __future__ import annotations

import hashlib
import re

LABEL_PREFIX = "airflow.apache.org"
#: A Kubernetes label value (apimachinery validation.IsValidLabelValue), up to MAX_LABEL_VALUE long.
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
#: Longest label value (and DNS label) Kubernetes accepts.
MAX_LABEL_VALUE = 63
#: The replicated jobs of the JobSet a PathwaysJob becomes (pathwaysjob_controller.go).
HEAD_REPLICATED_JOB = "pathways-head"
WORKER_REPLICATED_JOB = "worker"
COORDINATOR_LABEL = "jobset.sigs.k8s.io/coordinator"
_DIGEST_LENGTH = 8
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def coordinator_label_value(name: str, head_replicated_job: str = HEAD_REPLICATED_JOB) -> str:
    """What JobSet writes into ``jobset.sigs.k8s.io/coordinator``: ``<name>-<head>-0-0.<name>``,
    the head pod's in-cluster DNS name."""
    return f"{name}-{head_replicated_job}-0-0.{name}"


def max_job_name_length(head_replicated_job: str = HEAD_REPLICATED_JOB) -> int:
    """Longest name whose coordinator label value fits in 63 characters (22 for ``pathways-head``)."""
    return (MAX_LABEL_VALUE - len(f"-{head_replicated_job}-0-0.")) // 2


#: Longest Pathways job name a current JobSet accepts.
MAX_JOB_NAME_LENGTH = max_job_name_length()
DEFAULT_NAME_MAX_LENGTH = MAX_JOB_NAME_LENGTH


def _digest(*parts: object, length: int = 8) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:length]


def _base36_digest(*parts: object, length: int = _DIGEST_LENGTH) -> str:
    """``length`` base-36 characters of a SHA-256 (8 characters carry 41 bits)."""
    number = int.from_bytes(hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest(), "big")
    chars = []
    for _ in range(length):
        number, rest = divmod(number, 36)
        chars.append(_BASE36[rest])
    return "".join(chars)


def default_job_name(
    dag_id: str, task_id: str, run_id: str, map_index: int, max_length: int = DEFAULT_NAME_MAX_LENGTH
) -> str:
    """
    Name that is the same for every try of one task instance and different across instances.

    ``<task-slug>-<8 base-36 characters of a hash of dag, task, run and map index>``: a DNS-1035
    label of at most ``max_length`` (22) characters, so JobSet accepts it.
    """
    if max_length < _DIGEST_LENGTH + 2:
        raise ValueError(f"max_length: {max_length} leaves no room for the {_DIGEST_LENGTH}-character hash")
    digest = _base36_digest(dag_id, task_id, run_id, map_index)
    room = max_length - len(digest) - 1
    slug = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")
    slug = slug[:room].rstrip("-")
    if not slug or not slug[0].isalpha():
        slug = ("pw-" + slug)[:room].rstrip("-")
    return f"{slug}-{digest}"


def safe_label_value(value: object) -> str:
    """A valid label value for ``value``: unchanged if already valid, else sanitized with a hash."""
    text = str(value)
    if len(text) <= MAX_LABEL_VALUE and LABEL_VALUE.fullmatch(text):
        return text
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("-_.")[:54].strip("-_.")
    return f"{cleaned}-{_digest(text)}" if cleaned else _digest(text)


def airflow_labels(dag_id: str, task_id: str, run_id: str, map_index: int) -> dict[str, str]:
    """Labels that tie a job to its task instance (safe values)."""
    return {
        f"{LABEL_PREFIX}/dag_id": safe_label_value(dag_id),
        f"{LABEL_PREFIX}/task_id": safe_label_value(task_id),
        f"{LABEL_PREFIX}/run_id": safe_label_value(run_id),
        f"{LABEL_PREFIX}/map_index": safe_label_value(map_index),
    }
