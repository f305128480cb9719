"""Demo of the compilation-cache cleanup on the GCS emulator: ``python -m sandbox.gcs demo``.

Seeds ``gs://pathways-team-bucket`` with two Pathways scratch locations (stale and fresh cache
entries, JAX cache pairs, checkpoints, one of them named like a JAX cache file, and logs), runs
``example_dags/example_cache_cleanup.py`` with ``dag.test()`` and checks that exactly the stale
cache entries went.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sandbox.gcs.launcher import GcsEmulator, SeedObject, start_gcs_emulator

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_BUCKET = "pathways-team-bucket"
EXAMPLE = "example_cache_cleanup.py"


def _jax(label: str) -> str:
    return f"jit_{label}-{hashlib.sha256(label.encode()).hexdigest()}"


def seed_demo_bucket(emulator: GcsEmulator, bucket: str = DEMO_BUCKET) -> tuple[set[str], set[str]]:
    """Seed the demo bucket; returns (names the example DAG should delete, names it must keep)."""
    emulator.create_bucket(bucket)
    now = datetime.now(timezone.utc)
    stale, fresh = now - timedelta(days=30), now - timedelta(days=2)
    doomed: dict[str, int] = {}
    kept: dict[str, int] = {}
    for location in ("pathways-scratch/shared", "pathways-scratch/run-42"):
        cache = f"{location}/compilation_cache/default"
        doomed.update({f"{cache}/{i:04d}.binarypb": 2_000_000 for i in range(40)})
        doomed[f"{cache}/temp/{location[-6:]}.binarypb"] = 1000
        kept.update({f"{location}/checkpoints/step_1000/state.{i}": 50_000_000 for i in range(3)})
        # Named like a JAX cache file, but a checkpoint shard: never touched.
        kept[f"{location}/checkpoints/step_1000/{_jax('shard')}-cache"] = 50_000_000
        kept[f"{location}/logs/train.log"] = 10_000
    jax = "pathways-scratch/shared/jax_cache"
    doomed.update({f"{jax}/{_jax('old')}-atime": 8, f"{jax}/{_jax('old')}-cache": 3_000_000})
    emulator.seed_objects(bucket, (SeedObject(n, size, stale) for n, size in {**doomed, **kept}.items()))
    recent = {
        f"pathways-scratch/shared/compilation_cache/default/recent{i}.binarypb": 2_000_000 for i in range(5)
    }
    recent[f"{jax}/{_jax('used')}-atime"] = 8
    recent[f"{jax}/{_jax('used')}-cache"] = 3_000_000
    emulator.seed_objects(bucket, (SeedObject(n, size, fresh) for n, size in recent.items()))
    return set(doomed), set(kept) | set(recent)


_RUN = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("example_cache_cleanup", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
run = module.dag.test()
print("DAG run state:", run.state)
"""


def run_demo(state_dir: Path) -> int:
    """Start the emulator, seed, run the example DAG, check the outcome; 0 if all is as expected."""
    state_dir = Path(state_dir).resolve()
    emulator = start_gcs_emulator(state_dir / "emulator", reuse=False)
    try:
        doomed, kept = seed_demo_bucket(emulator)
        before = emulator.list_objects(DEMO_BUCKET)
        print(f"Seeded gs://{DEMO_BUCKET}: {len(before)} objects, {len(doomed)} of them stale cache entries")
        home = state_dir / "airflow"
        dags = home / "dags"
        dags.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / "example_dags" / EXAMPLE, dags / EXAMPLE)
        env = dict(os.environ)
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
                "STORAGE_EMULATOR_HOST": emulator.url,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
            }
        )
        if not (home / "airflow.db").exists():
            subprocess.run(
                [sys.executable, "-m", "airflow", "db", "migrate"],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        result = subprocess.run(
            [sys.executable, "-c", _RUN, str(dags / EXAMPLE)], env=env, capture_output=True, text=True
        )
        for line in (result.stdout + result.stderr).splitlines():
            if "airflow_provider_pathways" in line or line.startswith(
                ("|", "+", "Compilation", "criteria", "DAG run")
            ):
                print("   ", line)
        after = set(emulator.list_objects(DEMO_BUCKET))
        gone = set(before) - after
        ok = result.returncode == 0 and gone == doomed and kept <= after
        print(
            f"Deleted {len(gone)} stale cache objects; kept {len(after)} (checkpoints, logs, recent cache)."
        )
        print("Demo OK" if ok else f"Demo FAILED: unexpected deletions {sorted(gone ^ doomed)[:5]}")
        return 0 if ok else 1
    finally:
        emulator.stop()
