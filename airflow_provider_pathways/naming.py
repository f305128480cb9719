"""Deterministic job names and Kubernetes-safe labels derived from the Airflow task."""

from __future__ import annotations

import hashlib
import re

LABEL_PREFIX = "airflow.apache.org"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# Leaves room for "-pathways-head-0-0" and "-worker-<i>-<j>" plus a pod suffix within 63 characters.
DEFAULT_NAME_MAX_LENGTH = 30


def _digest(*parts: object, length: int = 8) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:length]


def default_job_name(
    dag_id: str, task_id: str, run_id: str, map_index: int, max_length: int = DEFAULT_NAME_MAX_LENGTH
) -> str:
    """
    Name that is the same for every try of one task instance and different across instances.

    ``<task-slug>-<hash of dag/task/run/map index>``, DNS-1123, starting with a letter.
    """
    digest = _digest(dag_id, task_id, run_id, map_index)
    slug = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")
    slug = slug[: max_length - len(digest) - 1].rstrip("-")
    if not slug or not slug[0].isalpha():
        slug = ("pw-" + slug)[: max_length - len(digest) - 1].rstrip("-")
    return f"{slug}-{digest}"


def safe_label_value(value: object) -> str:
    """A valid label value for ``value``: unchanged if already valid, else sanitized with a hash."""
    text = str(value)
    if len(text) <= 63 and _LABEL_VALUE.match(text):
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
