"""Throughput of pods.sandbox.run_python on trivial programs, per isolation mode and worker
count.

Each row runs ``--n`` copies of ``print(sum(range(100)))`` through run_python from a thread
pool of ``workers`` threads (as code-task rewards do) and reports programs per second over the
whole batch and the p50/p95 latency of one call (sandbox setup, interpreter start, teardown).
Every result is checked (status ok, output 4950).

    python benchmarks/sandbox/sandbox_throughput.py                     # 200 programs per row
    python benchmarks/sandbox/sandbox_throughput.py --n 50 --workers 1 2
    python benchmarks/sandbox/sandbox_throughput.py --modes unshare --workers 2
    python benchmarks/sandbox/sandbox_throughput.py --quick   # 6 programs, 1 and 2 workers
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402
from pods.sandbox import Limits, available_modes, default_workers, run_python  # noqa: E402
from pods.sandbox.isolation import MODES, unusable_reason  # noqa: E402

PROGRAM = "print(sum(range(100)))"


def timed_run(mode: str) -> float:
    start = time.perf_counter()
    result = run_python(PROGRAM, limits=Limits(timeout_s=10.0), isolation=mode)
    if result.status != "ok" or result.stdout != "4950\n":
        raise RuntimeError(f"{mode}: unexpected result {result}")
    return time.perf_counter() - start


def row(mode: str, workers: int, n: int) -> list:
    timed_run(mode)  # warm: probe and page cache
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        latencies = sorted(pool.map(lambda _: timed_run(mode), range(n)))
    wall = time.perf_counter() - start
    p50 = statistics.median(latencies)
    p95 = latencies[min(round(0.95 * n), n) - 1]
    return [mode, workers, f"{n / wall:.1f}", f"{p50 * 1e3:.0f}", f"{p95 * 1e3:.0f}"]


def main() -> None:
    parser = suite.parser(__doc__, "6 programs per row, 1 and 2 workers")
    parser.add_argument("--n", type=int, default=200, help="programs per row")
    cpus = default_workers()
    parser.add_argument("--workers", type=int, nargs="+",
                        default=sorted({1, cpus, 2 * cpus, 4 * cpus}))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                        help="isolation modes to measure (those unusable here are skipped)")
    args = parser.parse_args()
    if args.quick:
        args.n, args.workers = 6, [1, 2]
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(f"{cpus} CPUs usable, {memory:.0f} GiB, {platform.machine()}, "
          f"Python {platform.python_version()}, uid {os.geteuid()}")
    for mode in args.modes:
        if mode not in available_modes():
            print(f"skipped {mode}: {unusable_reason(mode)}")
    head = ["mode", "workers", "programs/s", "p50 latency (ms)", "p95 latency (ms)"]
    table = [row(mode, workers, args.n) for mode in available_modes() if mode in args.modes
             for workers in args.workers]
    print(suite.markdown(head, table))
    suite.write_json(args.json, [dict(zip(head, r, strict=True)) for r in table])


if __name__ == "__main__":
    main()
