"""Checks of Kubernetes names, labels, image references and GCS URLs; each returns a reason or None."""

from __future__ import annotations

import re

from airflow_provider_pathways.gke.naming import LABEL_VALUE

__all__ = [
    "MAX_ANNOTATIONS_BYTES",
    "MAX_NAME",
    "dns1035_label_error",
    "dns1123_label_error",
    "dns1123_subdomain_error",
    "image_reference_error",
    "image_tag_error",
    "label_key_error",
    "label_value_error",
    "suggest_name",
]

#: Kubernetes limit for a DNS label (hostnames, label values, service names).
MAX_NAME = 63
#: Kubernetes limit for all annotation keys and values of one object together (TotalAnnotationSizeLimitB).
MAX_ANNOTATIONS_BYTES = 256 * 1024

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_IMAGE_REFERENCE = re.compile(
    rf"^(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?/)?"
    rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


def dns1123_label_error(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 label (lowercase alnum and '-', alnum at both ends, <= 63)."""
    if len(value) > MAX_NAME:
        return f"is {len(value)} characters, more than {MAX_NAME}"
    if not _DNS1123_LABEL.fullmatch(value):
        return "must consist of lowercase letters, digits and '-', and start and end with a letter or digit"
    return None


def dns1035_label_error(value: str, *, check_length: bool = True) -> str | None:
    """Why ``value`` is not a DNS-1035 label (like DNS-1123 but starting with a letter)."""
    if check_length and len(value) > MAX_NAME:
        return f"is {len(value)} characters, more than {MAX_NAME}"
    if not _DNS1035_LABEL.fullmatch(value):
        return (
            "must consist of lowercase letters, digits and '-', start with a letter and end with "
            "a letter or digit"
        )
    return None


def dns1123_subdomain_error(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 subdomain (dot-separated DNS-1123 labels, <= 253)."""
    if not value or len(value) > 253:
        return "must be 1 to 253 characters"
    if any(_DNS1123_LABEL.fullmatch(part) is None for part in value.split(".")):
        return "must be lowercase letters, digits, '-' and '.', each dot-separated part alnum at both ends"
    return None


def label_key_error(key: object) -> str | None:
    """Why ``key`` is not a valid label or annotation key (``[prefix/]name``)."""
    if not isinstance(key, str) or not key:
        return "must be a non-empty string"
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return "has an empty prefix before '/'"
    if prefix and (reason := dns1123_subdomain_error(prefix)):
        return f"has an invalid prefix {prefix!r}: it {reason}"
    if len(name) > MAX_NAME:
        return f"has a name part of {len(name)} characters, more than {MAX_NAME}"
    if not _QUALIFIED_NAME.fullmatch(name):
        return "must have a name part of letters, digits, '-', '_' and '.', starting and ending alnum"
    return None


def label_value_error(value: object) -> str | None:
    """Why ``value`` is not a valid label value (string, <= 63, alnum at both ends)."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__} {value!r}"
    if len(value) > MAX_NAME:
        return f"is {len(value)} characters, more than {MAX_NAME}"
    if not LABEL_VALUE.fullmatch(value):
        return "must be empty or letters, digits, '-', '_' and '.', starting and ending alnum"
    return None


def image_tag_error(tag: str) -> str | None:
    """Why ``tag`` is not a valid container image tag."""
    if not _IMAGE_TAG.fullmatch(tag):
        return "must be 1 to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'"
    return None


def image_reference_error(image: str) -> str | None:
    """Why ``image`` is not a valid container image reference (``[registry/]repo[:tag][@digest]``)."""
    if not image:
        return "is empty"
    if not _IMAGE_REFERENCE.fullmatch(image):
        return "is not a valid image reference such as 'us-docker.pkg.dev/project/repo/image:tag'"
    return None


def suggest_name(value: str) -> str:
    """A DNS-1035 label close to ``value`` (lowercased, invalid characters replaced by '-')."""
    name = re.sub(r"[^a-z0-9-]+", "-", value.lower())
    name = re.sub(r"-{2,}", "-", name).lstrip("-0123456789").rstrip("-")
    return name or "pathways-job"
