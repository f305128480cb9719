"""Kubernetes stand-in for the GKE side of the provider: an API server over HTTP plus simulated
PathwaysJob, JobSet, Job, kubelet and Kueue controllers. See ``README.md`` in this directory.

Start one with ``python -m sandbox.kube`` or ``sandbox.kube.launcher.start_kube_standin``.
"""

from __future__ import annotations

from sandbox.kube.launcher import (
    KubeStandin,
    KubeStandinError,
    connect_kube_standin,
    ensure_kube_standin,
    start_kube_standin,
)

__all__ = [
    "KubeStandin",
    "KubeStandinError",
    "connect_kube_standin",
    "ensure_kube_standin",
    "start_kube_standin",
]
