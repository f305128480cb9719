"""The README's first DAGs are what a newcomer copies: each Python block builds its DAG as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.airflow_versions import AIRFLOW_3_DAGS

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_a_first_dag_for_each_backend() -> None:
    text = "\n".join(BLOCKS)
    for operator in (
        "PathwaysJobOperator",
        "PathwaysSlurmServiceOperator",
        "CleanupCompilationCacheOperator",
    ):
        assert operator in text


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
@AIRFLOW_3_DAGS
def test_each_python_block_of_the_readme_runs(block: str) -> None:
    exec(compile(block, str(README), "exec"), {})
