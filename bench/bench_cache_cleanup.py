"""Benchmark: delete stale compilation-cache objects from GCS emulators, this hook vs serial GCSHook.

One run, fresh buckets seeded with the same stale objects for every contender, a baseline
measured in the same run:

- baseline: what ``GCSDeleteObjectsOperator`` does with the google provider's real ``GCSHook``:
  ``GCSHook.list(bucket, prefix)``, then ``GCSHook.delete`` one object at a time;
- ``CompilationCacheHook.cleanup`` with its defaults: the listing asks no page size (like
  ``GCSHook.list``; GCS then answers 1000 a page, this emulator everything in one answer), reads
  the answer as it arrives and hands it on 1000 objects at a time, and would split a long listing
  by folder (listings at once); deletes go in JSON batch requests of 100, 8 at once, each
  conditional on the listed generation, starting while the listing goes on;
- the same with ``batch_size=1`` (one request per object, 32 at once), and with
  ``list_page_size=1000``: pages of 1000 as GCS answers them, which this emulator pays dearly
  for (it walks every object under the prefix for each page);
- ``plan()`` then ``delete(plan)``, the two phases timed apart;
- the emulator's ceiling: the same deletes with the names known (no listing), raw batch requests
  from 8 threads, no client library.

Wall time, the ratio to the baseline, the CPU time this process spent (client CPU: robust when
other work shares the machine, which the load average printed with the table shows), and the CPU
time the emulator spent (where the end-to-end time goes: the emulator is the bottleneck).

Part 1 runs on fake-gcs-server (filesystem backend kept on tmpfs when ``/dev/shm`` exists, so the
disk is not what is measured). Part 2 repeats baseline and hook on gcp-storage-emulator, the other
emulator with JSON batch support (slow per delete: it rewrites all its metadata on every change,
so fewer objects, and a fresh emulator for every run). Part 3: peak memory of a whole cleanup
(tracemalloc and RSS, a fresh interpreter each) for 10,000 and 100,000 listed objects. Part 4: the
batch requests alone, the provider's own (baseline) against google-cloud-storage's
``client.batch()``: the same conditional deletes (names and generations listed beforehand, 100 a
request, 8 threads) through the sandbox proxy, which answers batches part by part; and whether
fake-gcs-server itself takes each.

    python bench/bench_cache_cleanup.py [--objects 10000] [--repeat 3] [--gse-objects 300]
                                        [--memory-sizes 10000,100000] [--batch-objects 3000]
                                        [--json FILE]
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
import threading
import time
import tracemalloc
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from sandbox.gcs.launcher import (  # noqa: E402
    GCP_STORAGE_EMULATOR,
    GcsEmulator,
    SeedObject,
    start_gcs_emulator,
)

PREFIX = "pathways-scratch/shared"
STALE = datetime.now(timezone.utc) - timedelta(days=30)
CONNECTION = "gcs_bench"
SCRATCH_ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None


def object_name(i: int) -> str:
    return f"{PREFIX}/compilation_cache/default/{i:07d}.binarypb"


def seed(emulator: GcsEmulator, count: int) -> str:
    """A fresh bucket with ``count`` cache objects under the Slurm scratch location."""
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    emulator.create_bucket(bucket)
    if emulator.flavour == GCP_STORAGE_EMULATOR:  # no on-disk seeding: upload (objects are new)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: emulator.upload(bucket, object_name(i), b"x" * 1024), range(count)))
    else:
        emulator.seed_objects(bucket, (SeedObject(object_name(i), 1024, STALE) for i in range(count)))
    return bucket


def remaining(emulator: GcsEmulator, bucket: str) -> int:
    page = emulator.request("GET", f"/storage/v1/b/{bucket}/o", prefix=PREFIX, maxResults=1)
    return len(page.get("items", []))


def use_connection() -> None:
    """The Airflow connection both the baseline and this hook use: anonymous (emulator)."""
    os.environ[f"AIRFLOW_CONN_{CONNECTION.upper()}"] = json.dumps(
        {"conn_type": "google_cloud_platform", "extra": {"is_anonymous": True, "project": "bench"}}
    )


# ------------------------------------------------------------------------------------------------
# Contenders
# ------------------------------------------------------------------------------------------------


def run_baseline(bucket: str, older_than: str) -> dict[str, Any]:
    """GCSDeleteObjectsOperator's loop with the real GCSHook."""
    from airflow.providers.google.cloud.hooks.gcs import GCSHook

    started = time.perf_counter()
    hook = GCSHook(gcp_conn_id=CONNECTION)
    objects = hook.list(bucket_name=bucket, prefix=PREFIX)
    listed = time.perf_counter()
    for name in objects:
        hook.delete(bucket_name=bucket, object_name=name)
    done = time.perf_counter()
    return {
        "list_s": listed - started,
        "delete_s": done - listed,
        "total_s": done - started,
        "deleted": len(objects),
    }


def run_hook(bucket: str, older_than: str, **hook_kwargs: Any) -> dict[str, Any]:
    from airflow_provider_pathways.cache import CleanupCriteria
    from airflow_provider_pathways.hooks.gcs import CompilationCacheHook

    started = time.perf_counter()
    hook = CompilationCacheHook(gcp_conn_id=CONNECTION, **hook_kwargs)
    report = hook.cleanup(f"gs://{bucket}/{PREFIX}", CleanupCriteria(older_than=older_than))
    done = time.perf_counter()
    assert report.errors == 0, report.error_samples
    return {"total_s": done - started, "deleted": report.deleted_objects}


def run_two_phase(bucket: str, older_than: str) -> dict[str, Any]:
    from airflow_provider_pathways.cache import CleanupCriteria
    from airflow_provider_pathways.hooks.gcs import CompilationCacheHook

    started = time.perf_counter()
    hook = CompilationCacheHook(gcp_conn_id=CONNECTION)
    with hook.plan(f"gs://{bucket}/{PREFIX}", CleanupCriteria(older_than=older_than)) as plan:
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
    """The emulator's own delete capacity: names known (no listing), raw batch requests of 100 from 8
    threads, no client library. No client that must list first beats it."""
    chunks = iter([list(range(i, min(i + 100, count))) for i in range(0, count, 100)])
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                chunk = next(chunks, None)
            if chunk is None:
                return
            body = b"".join(
                f"--b\r\nContent-Type: application/http\r\nContent-ID: <{i}>\r\n\r\n"
                f"DELETE /storage/v1/b/{bucket}/o/{urllib.parse.quote(object_name(i), safe='')} HTTP/1.1\r\n"
                "\r\n\r\n".encode()
                for i in chunk
            )
            request = urllib.request.Request(
                f"{emulator.url}/batch/storage/v1",
                data=body + b"--b--\r\n",
                method="POST",
                headers={"Content-Type": "multipart/mixed; boundary=b"},
            )
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done = time.perf_counter()
    return {"total_s": done - started, "delete_s": done - started, "deleted": count}


def cpu_seconds() -> float:
    """CPU time of this process so far (all threads, user and system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu_seconds(pid: int) -> float:
    """CPU time of another process so far (user and system, from ``/proc``); 0 if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_mib(field: str) -> float | None:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def rss_mib() -> float:
    """Resident memory now; the peak is reset to it when Linux allows (``/proc/self/clear_refs``), so
    :func:`peak_rss_mib` afterwards is the peak of what ran since, not of the imports before."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")
    now = _status_mib("VmRSS")
    return now if now is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss_mib() -> float:
    """Peak resident memory (since the last :func:`rss_mib` where the peak could be reset)."""
    peak = _status_mib("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory_worker(count: int) -> dict[str, Any]:
    """Seed ``count`` stale objects and measure one whole cleanup's peak memory (fresh interpreter)."""
    from airflow_provider_pathways.cache import CleanupCriteria
    from airflow_provider_pathways.hooks.gcs import CompilationCacheHook

    emulator = start_gcs_emulator(os.environ["BENCH_GCS_STATE"])
    os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
    bucket = seed(emulator, count)
    hook = CompilationCacheHook()
    hook.get_credentials_and_project()
    gc.collect()
    rss_before = rss_mib()
    tracemalloc.start()
    started = time.perf_counter()
    report = hook.cleanup(f"gs://{bucket}/{PREFIX}", CleanupCriteria(older_than="7d"))
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rss_after = peak_rss_mib()
    emulator.stop()
    return {
        "listed": report.plan.listed_objects,
        "deleted": report.deleted_objects,
        "tracemalloc_peak_mib": peak / 2**20,
        "rss_growth_mib": rss_after - rss_before,
        "rss_peak_mib": rss_after,
        "seconds_with_tracemalloc": elapsed,
    }


# ------------------------------------------------------------------------------------------------
# Part 4: batch requests alone
# ------------------------------------------------------------------------------------------------

BatchDelete = Callable[[str, list[tuple[str, int]]], list[int]]


def provider_batches(url: str) -> BatchDelete:
    """The provider's batch requests (``StorageApi.delete_batch``): statuses in request order."""
    from google.auth.credentials import AnonymousCredentials

    from airflow_provider_pathways.cache.selection import CacheObject
    from airflow_provider_pathways.cache.storage import RetryPolicy, StorageApi

    api = StorageApi(
        AnonymousCredentials(),
        endpoint=url,
        pool_size=8,
        timeout=60,
        user_project=None,
        user_agent="bench",
        policy=RetryPolicy(),
    )

    def delete(bucket: str, chunk: list[tuple[str, int]]) -> list[int]:
        objects = [CacheObject(name, generation, 0, STALE) for name, generation in chunk]
        return [result.status or 0 for result in api.delete_batch(bucket, objects)]

    return delete


def library_batches(url: str) -> BatchDelete:
    """google-cloud-storage's batch: ``blob.delete(if_generation_match=...)`` inside ``client.batch()``.
    The statuses of its calls are kept only in the batch's private ``_responses``."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project="bench", credentials=AnonymousCredentials(), client_options={"api_endpoint": url}
    )

    def delete(bucket: str, chunk: list[tuple[str, int]]) -> list[int]:
        target = client.bucket(bucket)
        batch = client.batch(raise_exception=False)
        with batch:
            for name, generation in chunk:
                target.blob(name).delete(if_generation_match=generation)
        return [response.status_code for response in batch._responses]

    return delete


def delete_in_batches(delete: BatchDelete, bucket: str, listed: list[tuple[str, int]]) -> list[int]:
    """``listed`` deleted 100 to a request from 8 threads; the statuses of all calls."""
    chunks = [listed[i : i + 100] for i in range(0, len(listed), 100)]
    with ThreadPoolExecutor(8) as pool:
        return [
            status
            for statuses in pool.map(lambda chunk: delete(bucket, chunk), chunks)
            for status in statuses
        ]


def seed_listed(emulator: GcsEmulator, count: int) -> tuple[str, list[tuple[str, int]]]:
    bucket = seed(emulator, count)
    listed = emulator.list_objects(bucket, PREFIX)
    return bucket, sorted((name, int(item["generation"])) for name, item in listed.items())


def compare_batches(count: int, repeat: int) -> dict[str, Any]:
    """Part 4: the provider's batch requests (baseline) vs google-cloud-storage's, same deletes."""
    from sandbox.gcs.proxy import GcsProxy

    results: dict[str, Any] = {"objects": count}
    with tempfile.TemporaryDirectory(prefix="bench-gcs-batch-", dir=SCRATCH_ROOT) as state:
        emulator = start_gcs_emulator(state)
        try:
            direct: dict[str, str] = {}
            for key, make in (("provider", provider_batches), ("library", library_batches)):
                bucket, listed = seed_listed(emulator, 100)
                try:
                    statuses = delete_in_batches(make(emulator.url), bucket, listed)
                    direct[key] = f"{statuses.count(204) + statuses.count(200)} of 100 deleted"
                except Exception as err:  # the point is to see whether it works at all
                    direct[key] = f"fails: {type(err).__name__}: {err}"[:100]
            results["fake_gcs_server_direct"] = direct
            with GcsProxy(emulator.url) as proxy:
                contenders = {"provider": provider_batches(proxy.url), "library": library_batches(proxy.url)}
                runs: dict[str, list[tuple[float, float]]] = {key: [] for key in contenders}
                for delete in contenders.values():  # warm-up
                    delete_in_batches(delete, *seed_listed(emulator, 100))
                for _ in range(repeat):
                    for key, delete in contenders.items():
                        bucket, listed = seed_listed(emulator, count)
                        cpu_before, started = cpu_seconds(), time.perf_counter()
                        statuses = delete_in_batches(delete, bucket, listed)
                        runs[key].append((time.perf_counter() - started, cpu_seconds() - cpu_before))
                        assert (
                            all(200 <= status < 300 for status in statuses)
                            and remaining(emulator, bucket) == 0
                        ), key
        finally:
            emulator.stop()
    print(
        f"\nBatch requests alone: {count} conditional deletes, 100 a request, 8 threads, median of {repeat}"
    )
    print(
        "through the sandbox proxy (it answers batches part by part; runs in this process, so its CPU counts)"
    )
    print(f"{'batch requests':<56} {'total s':>8} {'vs provider':>12} {'CPU s':>7}")
    base = statistics.median(total for total, _ in runs["provider"])
    labels = {
        "provider": "provider's own (cache/batch.py) - baseline",
        "library": "google-cloud-storage client.batch() + blob.delete",
    }
    for key, label in labels.items():
        total = statistics.median(t for t, _ in runs[key])
        cpu = statistics.median(c for _, c in runs[key])
        results[key] = {"total_s": total, "cpu_s": cpu, "all_total_s": [t for t, _ in runs[key]]}
        print(f"{label:<56} {total:8.2f} {total / base:11.2f}x {cpu:7.2f}")
    for key, outcome in results["fake_gcs_server_direct"].items():
        print(f"on fake-gcs-server itself, {labels[key].split(' (')[0].split(' +')[0]}: {outcome}")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return results


# ------------------------------------------------------------------------------------------------


Contender = Callable[[GcsEmulator, str, int], dict[str, Any]]


@contextlib.contextmanager
def emulator_for(
    shared: GcsEmulator | None, fresh: Callable[[], GcsEmulator] | None
) -> Iterator[GcsEmulator]:
    """The shared emulator, or a fresh one (stopped afterwards)."""
    if shared is not None:
        yield shared
        return
    assert fresh is not None
    emulator = fresh()
    os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
    try:
        yield emulator
    finally:
        emulator.stop()


def compare(
    count: int,
    repeat: int,
    contenders: dict[str, tuple[str, Contender]],
    title: str,
    *,
    shared: GcsEmulator | None = None,
    fresh: Callable[[], GcsEmulator] | None = None,
    target: float | None = None,
) -> dict[str, Any]:
    """Run every contender ``repeat`` times on fresh buckets (on the ``shared`` emulator, or on a
    ``fresh`` one each time); print and return medians and ratios."""
    runs: dict[str, list[dict[str, Any]]] = {key: [] for key in contenders}
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
        for key, (_, run) in contenders.items():  # warm-up: imports, credentials, connections
            if key != "ceiling":
                with emulator_for(shared, fresh) as emulator:
                    run(emulator, seed(emulator, min(count, 50)), min(count, 50))
        for round_no in range(repeat):
            for key, (_, run) in contenders.items():
                with emulator_for(shared, fresh) as emulator:
                    bucket = seed(emulator, count)
                    cpu_before = cpu_seconds()
                    emulator_before = process_cpu_seconds(emulator.pid)
                    outcome = run(emulator, bucket, count)
                    outcome["cpu_s"] = cpu_seconds() - cpu_before
                    outcome["emulator_cpu_s"] = process_cpu_seconds(emulator.pid) - emulator_before
                    assert outcome["deleted"] == count and remaining(emulator, bucket) == 0, (key, outcome)
                runs[key].append(outcome)
                print(f"round {round_no + 1} {key:<14} {outcome['total_s']:7.2f}s", file=sys.__stdout__)
    base = statistics.median(r["total_s"] for r in runs["baseline"])
    where = "same emulator, same run" if shared is not None else "same run"
    print(f"\n{title}: delete {count} stale objects, median of {repeat} ({where})")
    columns = ("total s", "list s", "delete s", "vs baseline", "client CPU s", "emulator CPU s")
    print(
        f"{'approach':<56} {columns[0]:>8} {columns[1]:>7} {columns[2]:>9} {columns[3]:>12} {columns[4]:>13}"
        f" {columns[5]:>15}"
    )
    results: dict[str, Any] = {"objects": count}
    for key, (label, _) in contenders.items():
        total = statistics.median(r["total_s"] for r in runs[key])
        listed = statistics.median(r["list_s"] for r in runs[key]) if "list_s" in runs[key][0] else None
        deleted = statistics.median(r["delete_s"] for r in runs[key]) if "delete_s" in runs[key][0] else None
        cpu = statistics.median(r["cpu_s"] for r in runs[key])
        emulator_cpu = statistics.median(r["emulator_cpu_s"] for r in runs[key])
        results[key] = {
            "total_s": total,
            "list_s": listed,
            "delete_s": deleted,
            "speedup": base / total,
            "client_cpu_s": cpu,
            "emulator_cpu_s": emulator_cpu,
            "all_total_s": [r["total_s"] for r in runs[key]],
        }

        def fmt(value: float | None) -> str:
            return f"{value:.2f}" if value is not None else "-"

        print(
            f"{label:<56} {total:8.2f} {fmt(listed):>7} {fmt(deleted):>9} {base / total:11.1f}x {cpu:13.2f}"
            f" {emulator_cpu:15.2f}"
        )
    if "two_phase" in results:
        ratio = results["baseline"]["delete_s"] / results["two_phase"]["delete_s"]
        print(f"delete phase alone (plan + delete vs the baseline's delete loop): {ratio:.1f}x")
    rounds = [b["total_s"] / h["total_s"] for b, h in zip(runs["baseline"], runs["hook"], strict=True)]
    results["hook_round_speedups"] = rounds
    verdict = f"; target >= {target:g}x: {'PASS' if min(rounds) >= target else 'MISS'}" if target else ""
    print(
        "cleanup() defaults vs baseline, round by round: "
        + ", ".join(f"{ratio:.1f}x" for ratio in rounds)
        + f" (lowest {min(rounds):.1f}x{verdict})"
    )
    load = os.getloadavg()[0]
    results["load_average"] = load
    print(f"load average during the run: {load:.1f} on {os.cpu_count()} CPUs (the emulator shares them)")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gse-objects", type=int, default=300, help="objects on gcp-storage-emulator")
    parser.add_argument("--memory-sizes", default="10000,100000")
    parser.add_argument("--batch-objects", type=int, default=3000, help="part 4 (0: skip)")
    parser.add_argument("--memory-worker", type=int, metavar="COUNT")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    # Progress lines of the hooks would interleave with the table.
    logging.getLogger("airflow.task.hooks").setLevel(logging.WARNING)
    if args.memory_worker:
        print(json.dumps(memory_worker(args.memory_worker)))
        return 0
    try:
        import airflow.providers.google  # noqa: F401
    except ImportError:
        print("the baseline needs apache-airflow-providers-google: pip install -e '.[test]'", file=sys.stderr)
        return 1
    use_connection()
    results: dict[str, Any] = {}

    fake_gcs: dict[str, tuple[str, Contender]] = {
        "baseline": (
            "baseline: GCSHook.list + GCSHook.delete per object",
            lambda e, b, n: run_baseline(b, "7d"),
        ),
        "hook": (
            "CompilationCacheHook.cleanup (defaults: batches of 100)",
            lambda e, b, n: run_hook(b, "7d"),
        ),
        "hook_single": (
            "CompilationCacheHook.cleanup batch_size=1 (32 at once)",
            lambda e, b, n: run_hook(b, "7d", batch_size=1),
        ),
        "hook_page1000": (
            "CompilationCacheHook.cleanup list_page_size=1000",
            lambda e, b, n: run_hook(b, "7d", list_page_size=1000),
        ),
        "two_phase": ("CompilationCacheHook.plan + delete", lambda e, b, n: run_two_phase(b, "7d")),
        "ceiling": ("emulator ceiling: raw batch deletes, names known", emulator_ceiling),
    }
    with tempfile.TemporaryDirectory(prefix="bench-gcs-", dir=SCRATCH_ROOT) as state:
        emulator = start_gcs_emulator(state)
        os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
        try:
            results["fake_gcs_server"] = compare(
                args.objects,
                args.repeat,
                fake_gcs,
                "fake-gcs-server (filesystem backend on tmpfs)",
                shared=emulator,
                target=5,
            )
        finally:
            emulator.stop()

    if args.gse_objects:
        gse: dict[str, tuple[str, Contender]] = {
            "baseline": fake_gcs["baseline"],
            "hook": (
                "CompilationCacheHook.cleanup (defaults: batches of 100)",
                lambda e, b, n: run_hook(b, "0s"),
            ),
            "hook_single": (
                "CompilationCacheHook.cleanup batch_size=1 (32 at once)",
                lambda e, b, n: run_hook(b, "0s", batch_size=1),
            ),
        }
        with tempfile.TemporaryDirectory(prefix="bench-gse-") as state:
            # Its cost per change grows with everything it ever stored: a fresh one for every run.
            results["gcp_storage_emulator"] = compare(
                args.gse_objects,
                args.repeat,
                gse,
                "gcp-storage-emulator (in memory, a fresh one per run)",
                fresh=lambda: start_gcs_emulator(
                    Path(state) / uuid.uuid4().hex, flavour=GCP_STORAGE_EMULATOR, reuse=False
                ),
            )

    sizes = [int(s) for s in args.memory_sizes.split(",") if s.strip()]
    results["memory"] = {}
    if sizes:
        print("\nPeak memory of one whole cleanup (fresh interpreter each, all objects stale)")
        header = ("listed objects", "tracemalloc peak", "RSS growth", "RSS peak", "seconds")
        print("{:>15} {:>17} {:>11} {:>10} {:>8}".format(*header))
    for count in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-gcs-mem-", dir=SCRATCH_ROOT) as mem_state:
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
        ok = data["listed"] == count and data["deleted"] == count
        results["memory"][count] = data
        print(
            f"{count:>15} {data['tracemalloc_peak_mib']:>13.1f} MiB {data['rss_growth_mib']:>7.1f} MiB "
            f"{data['rss_peak_mib']:>6.0f} MiB {data['seconds_with_tracemalloc']:>8.1f}"
            + ("" if ok else "  (MISMATCH)")
        )
    if args.batch_objects:
        results["batches"] = compare_batches(args.batch_objects, args.repeat)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
