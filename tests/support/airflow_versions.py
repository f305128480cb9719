"""What ``dag.test()`` and the README's DAGs need of the Airflow running the tests: skip markers
that name the version's own limit (the provider's behaviour per version is in
``airflow_provider_pathways.airflow_features``)."""

from __future__ import annotations

import pytest
from airflow.providers.common.compat.version_compat import (
    AIRFLOW_V_3_0_PLUS,
    AIRFLOW_V_3_1_PLUS,
    AIRFLOW_V_3_3_PLUS,
)

#: The README's and the examples' DAGs import ``airflow.sdk``, as Airflow 3 DAGs do.
AIRFLOW_3_DAGS = pytest.mark.skipif(
    not AIRFLOW_V_3_0_PLUS, reason="written for Airflow 3 (airflow.sdk), as the README and examples are"
)
#: Airflow 3.0's ``dag.test()`` keeps the ``next_method`` of a deferred try on the task instance it
#: runs in line, so the retry resumes with the previous try's trigger event instead of executing;
#: its in-line trigger run also drops the deferral's ``kwargs``, so the operators cannot tell (a
#: real 3.0 deployment keeps them: tests/deployment/compat checks the retry there).
RETRY_AFTER_DEFERRAL = pytest.mark.skipif(
    AIRFLOW_V_3_0_PLUS and not AIRFLOW_V_3_1_PLUS,
    reason="Airflow 3.0's dag.test() resumes a retry with the previous try's trigger event",
)
#: Airflow 3.1 and 3.2's ``dag.test()`` keep the task's own log lines in the task log: the output a
#: test reads has only what the run prints (an exception's message among it).
TASK_LOG_IN_OUTPUT = not (AIRFLOW_V_3_1_PLUS and not AIRFLOW_V_3_3_PLUS)
#: Airflow 2's ``dag.test()`` lets ``execution_timeout``'s ``AirflowTaskTimeout`` (a
#: ``BaseException`` there) escape the run instead of failing the task.
EXECUTION_TIMEOUT = pytest.mark.skipif(
    not AIRFLOW_V_3_0_PLUS, reason="Airflow 2's dag.test() lets AirflowTaskTimeout escape the run"
)

#: Airflow 2's ``dag.test()`` sets no start date on the task instance it runs, so a deferred try has
#: no ``execution_timeout`` deadline there (tests/operators/test_deferred_execution_timeout.py runs
#: the task instance as a worker does instead).
DEFERRED_EXECUTION_TIMEOUT = pytest.mark.skipif(
    not AIRFLOW_V_3_0_PLUS, reason="Airflow 2's dag.test() sets no start date: a deferral has no deadline"
)


def quiet_dag_test_debug_lines() -> None:
    """Airflow 3.0's ``dag.test()`` never configures structlog, whose default prints debug lines
    (rendered fields with the program's log among them) next to the task log the tests read."""
    if AIRFLOW_V_3_0_PLUS and not AIRFLOW_V_3_1_PLUS:
        import logging

        import structlog

        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
