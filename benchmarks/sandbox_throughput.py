"""Throughput of pods.sandbox.run_python on trivial programs, per isolation mode and worker
count.

Each row runs ``--n`` copies of ``print(sum(range(100)))`` through run_python from a thread
pool of ``workers`` threads (as code-task rewards do) and reports programs per second over the
whole batch and the p50/p95 latency of one call (sandbox setup, interpreter start, teardown).
Every result is checked (status ok, output 4950).

    python benchmarks/sandbox_throughput.py                     # 200 programs per row
    python benchmarks/sandbox_throughput.py --n 50 --workers 1 2
    python benchmarks/sandbox_throughput.py --modes unshare --workers 2
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from pods.sandbox import Limits, available_modes, default_workers, run_python
from pods.sandbox.isolation import MODES, unusable_reason

PROGRAM = "print(sum(range(100)))"


def timed_run(mode: str) -> float:
    start = time.perf_counter()
    result = run_python(PROGRAM, limits=Limits(timeout_s=10.0), isolation=mode)
    if result.status != "ok" or result.stdout != "4950\n":
        raise RuntimeError(f"{mode}: unexpected result {result}")
    return time.perf_counter() - start


def row(mode: str, workers: int, n: int) -> str:
    timed_run(mode)  # warm: probe and page cache
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        latencies = sorted(pool.map(lambda _: timed_run(mode), range(n)))
    wall = time.perf_counter() - start
    p50 = statistics.median(latencies)
    p95 = latencies[min(round(0.95 * n), n) - 1]
    return f"| {mode} | {workers} | {n / wall:.1f} | {p50 * 1e3:.0f} | {p95 * 1e3:.0f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="programs per row")
    cpus = default_workers()
    parser.add_argument("--workers", type=int, nargs="+",
                        default=sorted({1, cpus, 2 * cpus, 4 * cpus}))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                        help="isolation modes to measure (those unusable here are skipped)")
    args = parser.parse_args()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(f"{cpus} CPUs usable, {memory:.0f} GiB, {platform.machine()}, "
          f"Python {platform.python_version()}, uid {os.geteuid()}")
    for mode in args.modes:
        if mode not in available_modes():
            print(f"skipped {mode}: {unusable_reason(mode)}")
    print("| mode | workers | programs/s | p50 latency (ms) | p95 latency (ms) |")
    print("|---|---:|---:|---:|---:|")
    for mode in (m for m in available_modes() if m in args.modes):
        for workers in args.workers:
            print(row(mode, workers, args.n), flush=True)


if __name__ == "__main__":
    main()
