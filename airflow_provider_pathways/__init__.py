"""Apache Airflow provider for Google Pathways workloads on GKE and Slurm."""

from __future__ import annotations

from airflow_provider_pathways import moved_modules

__version__ = "0.1.0"
__all__ = ["__version__"]

moved_modules.install()
