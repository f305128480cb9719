"""The cost of a Slurm try's TPU-hours (``slice_time``) against reading the worker array it needs.

A Slurm try that ends reads its service's worker array once (``scontrol -o show job <array>`` over
SSH; slurmrestd's job list is read the same way) and sums its slices' time within the workload's
run. This script builds the ``scontrol -o show job`` text of an array of N tasks (default 1,000,
the most a cluster's default ``MaxArraySize`` of 1001 allows; some running, some requeued before
the window, some ended), then times, in alternating rounds:

(a) ``jobs_from_scontrol`` on that text: the parse every read of the array does (the baseline);
(b) ``slice_time`` over the parsed tasks within a workload's window, with the running-slice series.

Target: (b) / (a) <= 0.2, so that TPU-hours add little to the one read of the array a try's end
already does (the read's round trip to the cluster, not measured here, only lowers the ratio). Pure
CPU, no cluster. Run from the repository root: ``.venv/bin/python bench/bench_slice_time.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from airflow_provider_pathways.slurm.job import jobs_from_scontrol
from airflow_provider_pathways.slurm.slice_time import slice_time

TARGET_RATIO = 0.2
T0 = 1_790_000_000  # epoch seconds, late 2026


def scontrol_text(tasks: int) -> str:
    """One ``scontrol -o show job`` line per array task, as slurmctld prints them."""
    lines = []
    for index in range(tasks):
        start = T0 + index % 600
        if index % 10 == 0:  # requeued an hour before the window, running again
            state, restarts, submit, end = "RUNNING", 1, T0 - 3600, start + 86400
        elif index % 7 == 0:
            state, restarts, submit, end = "COMPLETED", 0, T0 - 7200, start + 1800
        else:
            state, restarts, submit, end = "RUNNING", 0, T0 - 7200, start + 86400
        lines.append(
            f"JobId={5000 + index} ArrayJobId=5000 ArrayTaskId={index} JobName=run_worker_slice.sh "
            f"UserId=pathways(1000) JobState={state} Reason=None Restarts={restarts} ExitCode=0:0 "
            f"SubmitTime={submit} StartTime={start} EndTime={end} Partition=tpu NodeList=tpu-{index} "
            f"WorkDir=/home/pathways StdOut=/home/pathways/slurm-5000_{index}.out Comment=(null)"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    text = scontrol_text(args.tasks)
    tasks = jobs_from_scontrol(text)
    assert len(tasks) == args.tasks, len(tasks)
    since, until = float(T0 + 300), float(T0 + 3900)
    result = slice_time(tasks, since=since, until=until)
    assert result.slice_hours is not None, result.unknown
    parse_times, sum_times = [], []
    for _ in range(args.rounds):
        begin = time.perf_counter()
        jobs_from_scontrol(text)
        parse_times.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        slice_time(tasks, since=since, until=until)
        sum_times.append(time.perf_counter() - begin)
    parse, summed = statistics.median(parse_times), statistics.median(sum_times)
    ratio = summed / parse
    print(f"worker array of {args.tasks} tasks, {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    print(f"  (a) parse the array's records (baseline): {parse * 1000:.2f} ms")
    print(
        f"  (b) slice_time over it:                   {summed * 1000:.2f} ms "
        f"({result.slice_hours:.1f} slice-hours, {len(result.running)} changes of the running count)"
    )
    verdict = "PASS" if ratio <= TARGET_RATIO else "MISS"
    print(f"  ratio (b)/(a) {ratio:.3f}  target <= {TARGET_RATIO}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
