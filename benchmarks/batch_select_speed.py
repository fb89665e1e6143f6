"""Cost of batch-level selection (``--selection batch``) against fixed-m max-variance.

For each (P, n, m) it times, on the same binary-ish rewards [P, n] (values 0, 0.1, 1: many
ties, groups with and without variance, as in RLVR):
  group   pods.core.downsample.downsample(rewards, m): m of each group, the paper's PODS
  batch   pods.core.batch_downsample.batch_max_variance(rewards, P*m): P*m across the groups
  mass    its first stage alone, variance_mass (every subset size of every group)
and reports the kept rows and variance mass of each, so the gain in mass is next to its
cost. Selection runs once per training step; compare its time with a step's (seconds on a
GPU, tens of milliseconds on the embedded CPU task).

    python benchmarks/batch_select_speed.py
    python benchmarks/batch_select_speed.py --quick
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from pods.core.batch_downsample import batch_max_variance, variance_mass
from pods.core.downsample import downsample


def rewards_for(P: int, n: int, seed: int) -> torch.Tensor:
    """Per group a success rate drawn uniformly, rewards 1 (correct), 0.1 (format only) or 0."""
    g = torch.Generator().manual_seed(seed)
    rate = torch.rand(P, 1, generator=g)  # [P, 1]
    correct = torch.rand(P, n, generator=g) < rate  # [P, n]
    formatted = torch.rand(P, n, generator=g) < 0.5
    return torch.where(correct, 1.0, torch.where(formatted, 0.1, 0.0))


def mass(rewards: torch.Tensor, keep: torch.Tensor) -> float:
    w = keep.double()
    count = w.sum(1).clamp(min=1)
    mean = (rewards.double() * w).sum(1) / count
    return float((((rewards.double() - mean[:, None]) ** 2) * w).sum())


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller grid")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    grid = [(8, 64, 16), (64, 16, 4), (64, 64, 16)]
    if not args.quick:
        grid += [(256, 64, 16), (512, 16, 4), (1024, 8, 4)]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{platform.processor() or platform.machine()}")
    print("| P | n | m | group (ms) | batch (ms) | mass stage (ms) | kept group | kept batch "
          "| mass group | mass batch |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for P, n, m in grid:
        rewards = rewards_for(P, n, seed=P * n + m)
        idx = downsample(rewards, m, "max_variance")
        fixed = torch.zeros(P, n, dtype=torch.bool).scatter(1, idx, True)
        keep = batch_max_variance(rewards, P * m)
        t_group = median_ms(lambda: downsample(rewards, m, "max_variance"), args.repeats)  # noqa: B023
        t_batch = median_ms(lambda: batch_max_variance(rewards, P * m), args.repeats)  # noqa: B023
        t_mass = median_ms(lambda: variance_mass(rewards, n), args.repeats)  # noqa: B023
        print(f"| {P} | {n} | {m} | {t_group:.2f} | {t_batch:.1f} | {t_mass:.1f} | "
              f"{int(fixed.sum())} | {int(keep.sum())} | {mass(rewards, fixed):.2f} | "
              f"{mass(rewards, keep):.2f} |")


if __name__ == "__main__":
    main()
