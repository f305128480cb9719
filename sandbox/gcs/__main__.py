"""``python -m sandbox.gcs start|stop|status|demo --state-dir DIR``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sandbox.gcs.demo import run_demo
from sandbox.gcs.launcher import (
    EMULATOR_ENV,
    FAKE_GCS,
    FLAVOURS,
    connect_gcs_emulator,
    start_gcs_emulator,
)


def main(argv: list[str] | None = None) -> int:
    """CLI: ``start`` (detached, prints the URL), ``stop`` and ``status``."""
    parser = argparse.ArgumentParser(
        prog="python -m sandbox.gcs", description="The GCS emulator of the sandbox."
    )
    parser.add_argument("command", choices=("start", "stop", "status", "demo"))
    parser.add_argument("--state-dir", default=".sandbox/gcs")
    parser.add_argument("--flavour", choices=FLAVOURS, default=FAKE_GCS)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    state_dir = Path(args.state_dir)
    if args.command == "demo":
        return run_demo(state_dir / "demo")
    if args.command == "start":
        emulator = start_gcs_emulator(state_dir, flavour=args.flavour, port=args.port, detach=True)
        print(f"{emulator.flavour} running at {emulator.url} (pid {emulator.pid})")
        print(f"export {EMULATOR_ENV}={emulator.url}")
        return 0
    running = connect_gcs_emulator(state_dir)
    if args.command == "status":
        print(f"{running.flavour} running at {running.url} (pid {running.pid})" if running else "not running")
        return 0 if running else 1
    if running is not None:
        running.stop()
        print(f"stopped {running.flavour} (pid {running.pid})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
