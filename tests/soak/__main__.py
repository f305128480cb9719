"""``python -m tests.soak``: the randomized fault soak (``make soak``; docs/development.rst).

Environment: ``SOAK_SEED`` (default: drawn, printed), ``SOAK_RUNS`` (default 300), ``SOAK_MINUTES``
(no run starts after this, default 50), ``SOAK_CONCURRENCY`` (runs at once, default 8),
``SOAK_PLATFORMS`` (``gke``, ``slurm`` or ``gke,slurm``; default ``gke``). The last line is
``soak: N runs, F faults, I invariant checks, V violations, L jobs ended after their run (seed S)``;
the exit status is 1 when a run broke an invariant (its seed and fault schedule are printed, to
replay it).
"""

from __future__ import annotations

import os
import random
import sys


def main() -> int:
    from tests.soak.driver import main_loop
    from tests.soak.stage import soak_stage

    seed = int(os.environ.get("SOAK_SEED") or random.SystemRandom().randrange(1, 2**31))
    runs = int(os.environ.get("SOAK_RUNS") or 300)
    minutes = float(os.environ.get("SOAK_MINUTES") or 50)
    concurrency = int(os.environ.get("SOAK_CONCURRENCY") or 8)
    platforms = tuple(p.strip() for p in (os.environ.get("SOAK_PLATFORMS") or "gke").split(",") if p.strip())
    if not platforms or not set(platforms) <= {"gke", "slurm"}:
        print(f"SOAK_PLATFORMS: gke, slurm or gke,slurm, not {','.join(platforms)!r}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("the soak needs root (PostgreSQL as its own user, the Slurm sandbox)", file=sys.stderr)
        return 2
    print(
        f"soak seed {seed}: {runs} runs, {concurrency} at once, {minutes:g} minutes, "
        f"platforms {','.join(platforms)}",
        flush=True,
    )
    with soak_stage(slurm="slurm" in platforms) as stage:
        code = main_loop(
            stage, seed=seed, runs=runs, minutes=minutes, concurrency=concurrency, platforms=platforms
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
