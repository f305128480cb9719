"""Import cost at DAG-parse time: the Pathways operator + sensor vs the KubernetesPodOperator.

Each variant runs in a fresh interpreter (``-c``); the child times its own imports with
``time.perf_counter`` (interpreter start-up is excluded) and reports which heavy client
libraries ended up in ``sys.modules``. Variants run interleaved, after one discarded warm-up
round (so ``.pyc`` files and the page cache are warm for all of them alike).

Run from the repository root: ``.venv/bin/python bench/bench_gke_import.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 0.25
HEAVY = ("kubernetes", "kubernetes_asyncio", "google.cloud")

VARIANTS: dict[str, tuple[str, ...]] = {
    "a": (),
    "b": (
        "airflow_provider_pathways.operators.pathways_job",
        "airflow_provider_pathways.sensors.pathways_job",
    ),
    "c": ("airflow.providers.cncf.kubernetes.operators.pod",),
}
LABELS = {
    "a": "import airflow.sdk",
    "b": "airflow.sdk + pathways operator + sensor",
    "c": "airflow.sdk + KubernetesPodOperator module",
}

# The child: time `import airflow.sdk`, then the variant's modules, in the same interpreter.
CHILD = """
import importlib, json, sys, time
# Namespace-package stubs (``google``, ``google.cloud`` from a *-nspkg.pth file) are there before
# anything is imported; a heavy library counts only when importing loaded it.
at_start = set(sys.modules)
extra = {extra!r}
heavy = {heavy!r}
c0, t0 = time.process_time(), time.perf_counter()
import airflow.sdk
c1, t1 = time.process_time(), time.perf_counter()
before = set(sys.modules)
for name in extra:
    importlib.import_module(name)
c2, t2 = time.process_time(), time.perf_counter()
loaded = lambda p: any((m == p or m.startswith(p + ".")) and m not in at_start for m in sys.modules)
tops = lambda names: {{m.split(".")[0] for m in names}}
new_top = sorted(tops(sys.modules) - tops(before))
print(json.dumps({{
    "total": t2 - t0, "sdk": t1 - t0, "extra": t2 - t1, "cpu": c2 - c0, "cpu_extra": c2 - c1,
    "heavy": {{p: loaded(p) for p in heavy}}, "new_top": new_top,
    "modules": len(sys.modules),
}}))
"""


def run_child(variant: str, env: dict[str, str]) -> dict:
    """One fresh interpreter importing ``variant``; its JSON report."""
    code = CHILD.format(extra=VARIANTS[variant], heavy=HEAVY)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"variant {variant} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_env(airflow_home: str) -> dict[str, str]:
    """Environment of the children: an empty Airflow home, no example DAGs."""
    env = dict(os.environ)
    env.update(
        AIRFLOW_HOME=airflow_home,
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
    )
    env.pop("PYTHONPATH", None)
    return env


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def ratio_line(provider: float, kpo: float) -> str:
    """``ratio provider/KPO = r  target < 0.25  PASS|MISS`` (a non-positive overhead is noise)."""
    if kpo <= 0:
        return "ratio provider/KPO: undefined (KPO overhead <= 0: too noisy to compare)   MISS"
    ratio = provider / kpo
    note = "  (provider overhead <= 0: below the noise)" if provider <= 0 else ""
    ok = verdict(ratio < TARGET_RATIO)
    return f"ratio provider/KPO = {ratio:.3f}   target < {TARGET_RATIO}   {ok}{note}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per variant")
    args = parser.parse_args()
    runs = max(1, min(args.runs, 30))

    started, load = time.monotonic(), os.getloadavg()
    results: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bench-import-airflow-home-") as home:
        env = child_env(home)
        for variant in VARIANTS:  # warm-up round, discarded
            run_child(variant, env)
        for _ in range(runs):
            for variant in VARIANTS:
                results[variant].append(run_child(variant, env))

    med = {v: statistics.median(r["total"] for r in results[v]) for v in VARIANTS}
    cpu = {v: statistics.median(r["cpu"] for r in results[v]) for v in VARIANTS}
    paired = {v: statistics.median(r["extra"] for r in results[v]) for v in VARIANTS}
    provider, kpo = med["b"] - med["a"], med["c"] - med["a"]
    cpu_provider, cpu_kpo = cpu["b"] - cpu["a"], cpu["c"] - cpu["a"]

    print("bench_gke_import: import cost at DAG-parse time")
    print(f"python {sys.version.split()[0]}, {runs} fresh interpreters per variant (+1 warm-up round)")
    print("time = perf_counter around the imports inside the child (interpreter start-up excluded)")
    print(f"load average at start {load[0]:.2f}, at end {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print()
    for v in VARIANTS:
        totals = sorted(r["total"] for r in results[v])
        print(
            f"  ({v}) {LABELS[v]:<44} median {ms(med[v])}  "
            f"[min {ms(totals[0]).strip()}, max {ms(totals[-1]).strip()}]  "
            f"cpu median {ms(cpu[v]).strip()}  modules {results[v][-1]['modules']}"
        )
    print()
    print("Baseline: (a) `import airflow.sdk`; overhead = median(x) - median(a)  [wall time, as specified]")
    print(f"  provider overhead  median(b)-median(a) = {ms(provider)}")
    print(f"  KPO overhead       median(c)-median(a) = {ms(kpo)}")
    print(f"  {ratio_line(provider, kpo)}")
    print()
    print("Cross-checks (informational, less sensitive to other load on the machine):")
    print(
        f"  CPU time (process_time) overheads: provider {ms(cpu_provider).strip()}, KPO {ms(cpu_kpo).strip()}"
    )
    print(f"    {ratio_line(cpu_provider, cpu_kpo)}")
    print(
        f"  paired (extra imports timed after airflow.sdk in the same child): "
        f"provider {ms(paired['b']).strip()}, KPO {ms(paired['c']).strip()}"
    )
    print(f"    {ratio_line(paired['b'], paired['c'])}")
    print()
    heavy_b = {p: any(r["heavy"][p] for r in results["b"]) for p in HEAVY}
    heavy_c = {p: any(r["heavy"][p] for r in results["c"]) for p in HEAVY}
    imported = [p for p, hit in heavy_b.items() if hit]
    print("Heavy client libraries in sys.modules (target for (b): none):")
    for p in HEAVY:
        in_b = "imported" if heavy_b[p] else "not imported"
        in_c = "imported" if heavy_c[p] else "not imported"
        print(f"  {p:<20} (b) {in_b:<13} (c) {in_c}")
    print(f"  heavy modules in (b): {', '.join(imported) or 'none'}   {verdict(not imported)}")
    print(f"  new top-level packages in (b) after airflow.sdk: {', '.join(results['b'][-1]['new_top'])}")
    print(f"\n(wall time of the benchmark: {time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
