"""Benchmark: delete stale compilation-cache objects from a GCS emulator, hook vs the serial baseline.

One run, one emulator (fake-gcs-server over HTTP, filesystem backend), fresh buckets seeded with
the same stale objects for every contender:

- baseline: the google provider's serial approach, as ``GCSDeleteObjectsOperator`` does it:
  ``GCSHook.list(bucket, prefix)`` then ``GCSHook.delete`` one object at a time. Run in this
  interpreter if ``apache-airflow-providers-google`` is installed, else with ``--baseline-python``
  (default ``.sandbox/venv-google/bin/python`` if present, a venv with the provider), else
  reproduced with google-cloud-storage (``list_blobs`` then ``Blob.delete`` one by one, one log
  line per object) and labelled so;
- ``CompilationCacheHook.cleanup`` (listing streamed, deletes concurrent and conditional), with
  its defaults, and with ``list_page_size=5000`` (real GCS answers at most 1000 per page anyway);
- ``plan()`` then ``delete(plan)`` (two phases, timed apart).

Then peak memory of a whole cleanup (tracemalloc peak and RSS growth, fresh interpreter each) for
10,000 and 100,000 listed objects.

    python bench/bench_cache_cleanup.py [--objects 10000] [--repeat 3] [--memory-sizes 10000,100000]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from sandbox.gcs.launcher import GcsEmulator, SeedObject, start_gcs_emulator  # noqa: E402

PREFIX = "pathways-scratch/shared"
STALE = datetime.now(timezone.utc) - timedelta(days=30)
DEFAULT_BASELINE_PYTHON = REPO_ROOT / ".sandbox" / "venv-google" / "bin" / "python"


def seed(emulator: GcsEmulator, count: int) -> str:
    """A fresh bucket with ``count`` stale cache objects under the Slurm scratch location."""
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    emulator.create_bucket(bucket)
    emulator.seed_objects(
        bucket,
        (
            SeedObject(f"{PREFIX}/compilation_cache/default/{i:07d}.binarypb", 1024, STALE)
            for i in range(count)
        ),
    )
    return bucket


def remaining(emulator: GcsEmulator, bucket: str) -> int:
    page = emulator.request("GET", f"/storage/v1/b/{bucket}/o", prefix=PREFIX, maxResults=1)
    return len(page.get("items", []))


# ------------------------------------------------------------------------------------------------
# Baseline
# ------------------------------------------------------------------------------------------------


def baseline_google_provider(bucket: str) -> dict[str, Any]:
    """GCSDeleteObjectsOperator's loop with the real GCSHook (needs the google provider)."""
    os.environ["AIRFLOW_CONN_GCS_BENCH"] = json.dumps(
        {"conn_type": "google_cloud_platform", "extra": {"is_anonymous": True, "project": "bench"}}
    )
    from importlib.metadata import version as dist_version

    from airflow.providers.google.cloud.hooks.gcs import GCSHook

    version = dist_version("apache-airflow-providers-google")
    started = time.perf_counter()
    hook = GCSHook(gcp_conn_id="gcs_bench")
    objects = hook.list(bucket_name=bucket, prefix=PREFIX)
    listed = time.perf_counter()
    for name in objects:
        hook.delete(bucket_name=bucket, object_name=name)
    done = time.perf_counter()
    return {
        "how": f"GCSHook.list + GCSHook.delete per object (apache-airflow-providers-google {version})",
        "list_s": listed - started,
        "delete_s": done - listed,
        "total_s": done - started,
        "deleted": len(objects),
    }


def baseline_reproduced(bucket: str) -> dict[str, Any]:
    """The same serial loop with google-cloud-storage, for when the google provider is missing."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    log = logging.getLogger("bench.baseline")
    started = time.perf_counter()
    client = storage.Client(project="bench", credentials=AnonymousCredentials())
    objects = [blob.name for blob in client.list_blobs(bucket, prefix=PREFIX)]
    listed = time.perf_counter()
    for name in objects:
        client.bucket(bucket).blob(name).delete()
        log.info("Blob %s deleted.", name)
    done = time.perf_counter()
    return {
        "how": "REPRODUCED serial loop (google provider not installed): list_blobs + Blob.delete per object",
        "list_s": listed - started,
        "delete_s": done - listed,
        "total_s": done - started,
        "deleted": len(objects),
    }


def run_baseline(emulator: GcsEmulator, bucket: str, baseline_python: str | None) -> dict[str, Any]:
    try:
        import airflow.providers.google  # noqa: F401

        return baseline_google_provider(bucket)
    except ImportError:
        pass
    if baseline_python and Path(baseline_python).exists():
        env = dict(os.environ, STORAGE_EMULATOR_HOST=emulator.url, PYTHONPATH=str(REPO_ROOT))
        with tempfile.TemporaryDirectory() as home:
            env.setdefault("AIRFLOW_HOME", home)
            result = subprocess.run(
                [baseline_python, __file__, "--baseline-worker", bucket],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
        return json.loads(result.stdout.strip().splitlines()[-1])
    return baseline_reproduced(bucket)


# ------------------------------------------------------------------------------------------------
# This provider's hook
# ------------------------------------------------------------------------------------------------


def run_hook(bucket: str, **hook_kwargs: Any) -> dict[str, Any]:
    from airflow_provider_pathways.hooks.gcs import CompilationCacheHook

    started = time.perf_counter()
    report = CompilationCacheHook(**hook_kwargs).cleanup(f"gs://{bucket}/{PREFIX}", older_than="7d")
    done = time.perf_counter()
    assert report.errors == 0, report.error_samples
    return {"total_s": done - started, "deleted": report.deleted_objects}


def run_two_phase(bucket: str) -> dict[str, Any]:
    from airflow_provider_pathways.hooks.gcs import CompilationCacheHook

    hook = CompilationCacheHook()
    started = time.perf_counter()
    with hook.plan(f"gs://{bucket}/{PREFIX}", older_than="7d") as plan:
        planned = time.perf_counter()
        report = hook.delete(plan)
    done = time.perf_counter()
    return {
        "list_s": planned - started,
        "delete_s": done - planned,
        "total_s": done - started,
        "deleted": report.deleted_objects,
    }


def emulator_ceiling(emulator: GcsEmulator, bucket: str, count: int) -> dict[str, Any]:
    """How fast the emulator itself deletes: names known (no listing), raw pipelined HTTP/1.1
    DELETEs on 16 connections, no client library. No client doing one request per object beats it."""
    import socket
    import threading
    import urllib.parse

    from airflow_provider_pathways.hooks.gcs import read_http_response

    parsed = urllib.parse.urlsplit(emulator.url)
    names = [f"{PREFIX}/compilation_cache/default/{i:07d}.binarypb" for i in range(count)]
    chunks = iter([names[i : i + 16] for i in range(0, count, 16)])
    lock = threading.Lock()

    def worker() -> None:
        sock = socket.create_connection((parsed.hostname, parsed.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sock.makefile("rb")
        while True:
            with lock:
                chunk = next(chunks, None)
            if chunk is None:
                break
            sock.sendall(
                b"".join(
                    f"DELETE /storage/v1/b/{bucket}/o/{urllib.parse.quote(n, safe='')} HTTP/1.1\r\n"
                    f"Host: {parsed.netloc}\r\nContent-Length: 0\r\n\r\n".encode()
                    for n in chunk
                )
            )
            for _ in chunk:
                status, _, _ = read_http_response(reader, "DELETE")
                assert status in (200, 204), status
        sock.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done = time.perf_counter()
    return {"total_s": done - started, "delete_s": done - started, "deleted": count}


def memory_worker(count: int) -> dict[str, Any]:
    """Seed ``count`` stale objects and measure one whole cleanup's peak memory (fresh interpreter)."""
    from airflow_provider_pathways.hooks.gcs import CompilationCacheHook

    emulator = start_gcs_emulator(os.environ["BENCH_GCS_STATE"])
    os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
    bucket = seed(emulator, count)
    hook = CompilationCacheHook()
    hook.get_conn()
    gc.collect()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    started = time.perf_counter()
    report = hook.cleanup(f"gs://{bucket}/{PREFIX}", older_than="7d")
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    emulator.stop()
    return {
        "listed": report.plan.listed_objects,
        "deleted": report.deleted_objects,
        "tracemalloc_peak_mib": peak / 2**20,
        "rss_growth_mib": (rss_after - rss_before) / 1024,
        "rss_peak_mib": rss_after / 1024,
        "seconds_with_tracemalloc": elapsed,
    }


# ------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--memory-sizes", default="10000,100000")
    parser.add_argument("--baseline-python", default=str(DEFAULT_BASELINE_PYTHON))
    parser.add_argument("--baseline-worker", metavar="BUCKET")
    parser.add_argument("--memory-worker", type=int, metavar="COUNT")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    # Progress lines of our hook would interleave with the table; the baseline keeps its own logging.
    logging.getLogger("airflow.task.hooks.airflow_provider_pathways").setLevel(logging.WARNING)
    if args.baseline_worker:
        try:
            print(json.dumps(baseline_google_provider(args.baseline_worker)))
        except ImportError:
            print(json.dumps(baseline_reproduced(args.baseline_worker)))
        return 0
    if args.memory_worker:
        print(json.dumps(memory_worker(args.memory_worker)))
        return 0

    with tempfile.TemporaryDirectory(prefix="bench-gcs-") as state:
        emulator = start_gcs_emulator(state)
        os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
        results: dict[str, Any] = {
            "objects": args.objects,
            "emulator": "fake-gcs-server (filesystem backend)",
        }
        runs: dict[str, list[dict[str, Any]]] = {
            "baseline": [],
            "hook": [],
            "hook_page5000": [],
            "two_phase": [],
            "ceiling": [],
        }
        try:
            with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
                for round_no in range(args.repeat):
                    for name in runs:
                        bucket = seed(emulator, args.objects)
                        if name == "baseline":
                            outcome = run_baseline(emulator, bucket, args.baseline_python)
                        elif name == "hook":
                            outcome = run_hook(bucket)
                        elif name == "hook_page5000":
                            outcome = run_hook(bucket, list_page_size=5000)
                        elif name == "ceiling":
                            outcome = emulator_ceiling(emulator, bucket, args.objects)
                        else:
                            outcome = run_two_phase(bucket)
                        assert outcome["deleted"] == args.objects and remaining(emulator, bucket) == 0, (
                            outcome
                        )
                        runs[name].append(outcome)
                        print(
                            f"round {round_no + 1} {name:<14} {outcome['total_s']:6.2f}s", file=sys.__stdout__
                        )
            base = statistics.median(r["total_s"] for r in runs["baseline"])
            results["baseline_how"] = runs["baseline"][0]["how"]
            print(f"\nDelete {args.objects} stale objects, median of {args.repeat} (same emulator, same run)")
            print(f"{'approach':<44} {'total s':>8} {'list s':>7} {'delete s':>9} {'speed-up':>9}")
            rows = [
                ("baseline: serial GCSHook list + delete", "baseline"),
                ("CompilationCacheHook.cleanup (defaults)", "hook"),
                ("CompilationCacheHook.cleanup page=5000", "hook_page5000"),
                ("CompilationCacheHook.plan + delete", "two_phase"),
                ("emulator ceiling: raw pipelined DELETEs", "ceiling"),
            ]
            for label, key in rows:
                total = statistics.median(r["total_s"] for r in runs[key])
                listed = (
                    statistics.median(r["list_s"] for r in runs[key]) if "list_s" in runs[key][0] else None
                )
                deleted = (
                    statistics.median(r["delete_s"] for r in runs[key])
                    if "delete_s" in runs[key][0]
                    else None
                )
                results[key] = {
                    "total_s": total,
                    "list_s": listed,
                    "delete_s": deleted,
                    "speedup": base / total,
                }
                fmt = lambda v: f"{v:.2f}" if v is not None else "-"  # noqa: E731
                print(f"{label:<44} {total:8.2f} {fmt(listed):>7} {fmt(deleted):>9} {base / total:8.1f}x")
            base_delete = statistics.median(r["delete_s"] for r in runs["baseline"])
            two_delete = results["two_phase"]["delete_s"]
            print(f"delete phase alone: {base_delete / two_delete:.1f}x faster")
            print(f"baseline: {results['baseline_how']}")
        finally:
            emulator.stop()

        sizes = [int(s) for s in args.memory_sizes.split(",") if s.strip()]
        results["memory"] = {}
        if sizes:
            print("\nPeak memory of one whole cleanup (fresh interpreter each, all objects stale)")
            header = ("listed objects", "tracemalloc peak", "RSS growth", "RSS peak", "seconds")
            print("{:>15} {:>17} {:>11} {:>10} {:>8}".format(*header))
        for count in sizes:
            with tempfile.TemporaryDirectory(prefix="bench-gcs-mem-") as mem_state:
                env = dict(os.environ, BENCH_GCS_STATE=mem_state, PYTHONPATH=str(REPO_ROOT))
                env.pop("STORAGE_EMULATOR_HOST", None)
                out = subprocess.run(
                    [sys.executable, __file__, "--memory-worker", str(count)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
            data = json.loads(out.stdout.strip().splitlines()[-1])
            env_ok = data["listed"] == count and data["deleted"] == count
            results["memory"][count] = data
            print(
                f"{count:>15} {data['tracemalloc_peak_mib']:>13.1f} MiB {data['rss_growth_mib']:>7.1f} MiB "
                f"{data['rss_peak_mib']:>6.0f} MiB {data['seconds_with_tracemalloc']:>8.1f}"
                + ("" if env_ok else "  (MISMATCH)")
            )
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
