"""Apache Airflow provider for Google Pathways workloads on GKE and Slurm."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
