"""How fast the Kubernetes stand-in answers while many watches are open.

Starts the stand-in (``sandbox.kube.launcher.start_kube_standin`` in a temp dir), then times
``GET /version`` and a namespaced PathwaysJob listing, 20 times each, first with no watch open (the
baseline, same run), then with N (default 500) watches open on that namespace. Reports median, p90
and max; **target: max < 2 s with the watches open** (what a client's request timeout tolerates).
Also times how long all N watches take to receive the ADDED event of one new object. Never fails on
a miss; exits 0 unless something is broken.

Run from the repository root: ``.venv/bin/python bench/bench_kube_watches.py [--watches N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from sandbox.kube.launcher import KubeStandin, start_kube_standin  # noqa: E402

PATH = "/apis/pathways-job.pathways.domain/v1/namespaces/{ns}/pathwaysjobs"
NAMESPACE = "bench-watches"
SAMPLES = 20
TARGET_SECONDS = 2.0


def _job(name: str) -> dict[str, object]:
    """A PathwaysJob whose controller only writes terminalState (invalid topology): no pods."""
    return {
        "apiVersion": "pathways-job.pathways.domain/v1",
        "kind": "PathwaysJob",
        "metadata": {"name": name},
        "spec": {
            "maxRestarts": 0,
            "pathwaysDir": "gs://bucket/tmp",
            "workers": [{"type": "ct5lp-hightpu-4t", "topology": "3x3", "numSlices": 1}],
            "controller": {"deploymentMode": "default"},
        },
    }


async def _timed(session: aiohttp.ClientSession, url: str) -> float:
    started = time.monotonic()
    async with session.get(url) as resp:
        await resp.read()
        assert resp.status == 200, resp.status
    return time.monotonic() - started


async def _samples(session: aiohttp.ClientSession, kube: KubeStandin) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"GET /version": [], "list pathwaysjobs": []}
    for _ in range(SAMPLES):
        out["GET /version"].append(await _timed(session, f"{kube.url}/version"))
        out["list pathwaysjobs"].append(await _timed(session, kube.url + PATH.format(ns=NAMESPACE)))
    return out


def _row(label: str, values: list[float]) -> str:
    ordered = sorted(values)
    median, p90, worst = (
        1000 * x for x in (statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))], ordered[-1])
    )
    return f"  {label:<20} median {median:7.1f} ms  p90 {p90:7.1f} ms  max {worst:7.1f} ms"


async def run(kube: KubeStandin, watches: int) -> None:
    headers = {"Authorization": f"Bearer {kube.token}"}
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(limit=0)) as session:
        baseline = await _samples(session, kube)
        url = kube.url + PATH.format(ns=NAMESPACE)
        opened = time.monotonic()
        responses = await asyncio.gather(
            *(session.get(url, params={"watch": "true", "timeoutSeconds": "600"}) for _ in range(watches))
        )
        print(f"{watches} watches open in {time.monotonic() - opened:.2f} s")
        try:
            loaded = await _samples(session, kube)
            created = time.monotonic()
            async with session.post(
                url, data=json.dumps(_job("fanout")), headers={"Content-Type": "application/json"}
            ) as resp:
                assert resp.status == 201, await resp.text()
            await asyncio.gather(*(r.content.readline() for r in responses))
            fanout = time.monotonic() - created
        finally:
            for resp in responses:
                resp.close()
    print(f"Load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("No watch open (baseline):")
    for label, values in baseline.items():
        print(_row(label, values))
    print(f"{watches} watches open:")
    for label, values in loaded.items():
        print(_row(label, values))
        verdict = "PASS" if max(values) < TARGET_SECONDS else "MISS"
        print(f"    target max < {TARGET_SECONDS:.0f} s: {verdict}")
    print(f"ADDED event of one new object delivered to all {watches} watches in {fanout:.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watches", type=int, default=500)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="bench-kube-watches-") as state,
        start_kube_standin(Path(state)) as kube,
    ):
        asyncio.run(run(kube, args.watches))
    return 0


if __name__ == "__main__":
    sys.exit(main())
