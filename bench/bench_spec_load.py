"""Loading the largest spec the provider accepts, and refusing hostile YAML, against plain PyYAML.

The spec loader reads YAML with bounds (bytes, nesting, aliases) and then validates and renders the
job. Its cost on the largest document it accepts (just under ``MAX_YAML_BYTES``: a container with
2,500 environment variables) is compared with ``yaml.safe_load`` of the same text, measured in the
same run; and the refusal of hostile documents (a recursive alias, deep nesting, too many bytes)
with the plain load of a small valid document.

Run from the repository root: ``.venv/bin/python bench/bench_spec_load.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import yaml

from airflow_provider_pathways.gke.spec import PathwaysJobSpec, PathwaysSpecError
from airflow_provider_pathways.gke.spec.yaml_io import MAX_YAML_BYTES

#: Load + validate + render both kinds may cost this many plain safe_loads of the same text.
TARGET_RATIO = 4.0
#: A hostile document is refused within this many plain loads of a small valid spec.
HOSTILE_TARGET_RATIO = 50.0
HOSTILE = {
    "recursive alias": "&a [*a]",
    "deep nesting": "[" * 200 + "]" * 200,
    "too many bytes": "a: " + "x" * (MAX_YAML_BYTES + 1),
}


def largest_document() -> str:
    env = "".join(f"          - {{name: V{i}, value: '{'x' * 40}'}}\n" for i in range(2500))
    spec = PathwaysJobSpec.from_tpu_type(
        "v6e-16",
        name="train",
        pathways_dir="gs://my-bucket/x",
        template={"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}},
    )
    text = spec.to_yaml().replace("        - name: main\n", f"        - name: main\n          env:\n{env}", 1)
    assert len(text.encode()) < MAX_YAML_BYTES
    return text


def best_of(runs: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def load_validate_render(text: str) -> None:
    spec = PathwaysJobSpec.from_yaml(text)
    assert spec.problems() == []
    spec.to_pathwaysjob()
    spec.to_jobset()


def refused(text: str) -> None:
    try:
        PathwaysJobSpec.from_yaml(text)
    except PathwaysSpecError:
        return
    raise AssertionError("a hostile document was accepted")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    text = largest_document()
    load_validate_render(text)  # warm-up
    ours = best_of(runs, lambda: load_validate_render(text))
    plain = best_of(runs, lambda: yaml.safe_load(text))
    ratio = ours / plain
    print(f"largest accepted spec ({len(text.encode()) / 1024:.0f} KiB), median of {runs}:")
    print(f"  yaml.safe_load (baseline)          {plain * 1000:8.1f} ms")
    print(f"  load + validate + render both kinds {ours * 1000:7.1f} ms")
    print(f"  ratio {ratio:.2f} (target <= {TARGET_RATIO:g}): {'PASS' if ratio <= TARGET_RATIO else 'MISS'}")
    small = PathwaysJobSpec.from_tpu_type("v6e-16", name="train", pathways_dir="gs://my-bucket/x").to_yaml()
    baseline = best_of(runs, lambda: yaml.safe_load(small))
    print(f"hostile documents vs yaml.safe_load of a small spec ({baseline * 1000:.2f} ms):")
    for name, hostile in HOSTILE.items():
        spent = best_of(runs, lambda hostile=hostile: refused(hostile))
        verdict = "PASS" if spent / baseline <= HOSTILE_TARGET_RATIO else "MISS"
        print(
            f"  {name:16} refused in {spent * 1000:7.2f} ms, ratio {spent / baseline:6.1f} "
            f"(target <= {HOSTILE_TARGET_RATIO:g}): {verdict}"
        )


if __name__ == "__main__":
    main()
