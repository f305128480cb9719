"""Former home of the compilation-cache domain; it now lives in :mod:`airflow_provider_pathways.cache`.

Every name importable from here before still is.
"""

from airflow_provider_pathways.cache import *  # noqa: F403
from airflow_provider_pathways.cache import __all__ as __all__
