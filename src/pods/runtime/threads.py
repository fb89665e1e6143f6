"""torch's CPU threads on a busy machine.

torch runs one thread per core it may use, and each of its parallel regions waits for all
of them: where another process keeps those cores busy, every region waits for the slowest
thread, and a step can take many times longer (the embedded default on 2 cores with another
torch job on both: 4.4 s a step with 2 threads against 0.17 s with 1). So, at start on a
CPU, pods reads how busy the cores it may use are now (``busy_cores``: /proc/stat over a
quarter of a second, the cores of its affinity) and, where other work holds them, runs on
the cores left (at least one) and says so in one line, with what to do. ``OMP_NUM_THREADS`` (or
``PODS_THREADS``) set by the user is kept as it is.
"""

from __future__ import annotations

import os

BUSY = 0.5  # the share of a core's time above which other work counts as taking it


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def busy_cores(interval: float = 0.25) -> float | None:
    """How many of this process's cores other work keeps busy now: the busy share of each
    (/proc/stat, sampled twice ``interval`` s apart) summed; None where it cannot be read.
    (Now, not the load average's last minute, which still counts a job just ended.)"""
    import time

    def sample() -> dict[str, tuple[int, int]]:
        out = {}
        for line in open("/proc/stat").read().splitlines():
            name, *fields = line.split()
            if name.startswith("cpu") and name != "cpu":
                values = [int(f) for f in fields]
                idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
                out[name] = (sum(values), idle)
        return out

    try:
        mine = {f"cpu{i}" for i in os.sched_getaffinity(0)}
        before = sample()
        time.sleep(interval)
        after = sample()
    except (AttributeError, OSError, ValueError):
        return None
    busy = 0.0
    for name in mine & before.keys() & after.keys():
        total = after[name][0] - before[name][0]
        idle = after[name][1] - before[name][1]
        busy += (total - idle) / total if total > 0 else 0.0
    return busy


def threads_for(cores: int, load: float) -> int:
    """Threads for ``cores`` usable cores where other work keeps ``load`` of them busy
    (``busy_cores``): one a core it leaves free, at least one."""
    taken = int(load + (1 - BUSY))  # a core counts as taken when over BUSY of it is
    return max(1, min(cores, cores - taken))


def choose_threads(log=print) -> int | None:
    """Set torch's CPU threads for a busy machine (``threads_for``) and say so; None
    where nothing changed (the cores are free, or the user chose with OMP_NUM_THREADS or
    PODS_THREADS, or the load cannot be read)."""
    import torch

    chosen = os.environ.get("PODS_THREADS")
    if chosen:
        torch.set_num_threads(int(chosen))
        return int(chosen)
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    load = busy_cores()
    if load is None:
        return None
    cores = usable_cores()
    threads = threads_for(cores, load)
    if threads >= min(cores, torch.get_num_threads()):
        return None
    torch.set_num_threads(threads)
    log(f"cpu: other work keeps {load:.1f} of the {cores} cores pods may use busy, so "
        f"torch runs {threads} thread{'s' if threads > 1 else ''} instead "
        f"of {cores} (threads waiting on a busy core can make a step many times slower); "
        f"stop the other job, or give each job its own cores (taskset), or choose with "
        f"OMP_NUM_THREADS=N.")
    return threads
