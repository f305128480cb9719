"""What every benchmark does before it imports Airflow: an empty ``AIRFLOW_HOME`` in a temp dir, no
example DAGs, provider logs at WARNING (triggers and sensors log every status at INFO; the reports
stay readable), and the repository on ``sys.path``."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def bootstrap_airflow() -> str:
    """Set the environment up (before ``airflow`` is imported); the fresh ``AIRFLOW_HOME``."""
    home = tempfile.mkdtemp(prefix="bench-airflow-home-")
    os.environ["AIRFLOW_HOME"] = home
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    return home
