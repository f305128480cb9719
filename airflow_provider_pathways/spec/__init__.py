"""The PathwaysJob spec under its public import path (it lives in :mod:`.gke.spec`)."""

from airflow_provider_pathways.gke.spec import *  # noqa: F403
from airflow_provider_pathways.gke.spec import __all__ as __all__
