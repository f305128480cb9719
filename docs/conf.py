"""Sphinx configuration of the provider's documentation (``make docs``; warnings are errors)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))

# Autodoc imports the package, which imports Airflow: give Airflow a home of its own here.
os.environ.setdefault("AIRFLOW_HOME", str(DOCS / "_build" / "airflow-home"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
logging.getLogger("airflow").setLevel(logging.WARNING)

from airflow_provider_pathways import __version__  # noqa: E402
from airflow_provider_pathways.provider_info import DOCUMENTATION_URL  # noqa: E402

project = "airflow-provider-pathways"
author = "airflow-provider-pathways authors"
copyright = "airflow-provider-pathways authors"
release = __version__
version = __version__

extensions = [
    "sphinx.ext.autodoc",
    "pathways_docs",
]

exclude_patterns = ["_build", ".gitignore"]
templates_path: list[str] = []

# Where the documentation is published: the canonical URL of every page, the same one the package
# metadata (``[project.urls] Documentation``) gives Airflow's Providers page.
html_baseurl = DOCUMENTATION_URL
html_theme = "furo"
html_title = f"airflow-provider-pathways {release}"
html_static_path: list[str] = ["_static"]
html_show_sourcelink = False

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
