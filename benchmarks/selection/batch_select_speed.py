"""Cost of batch-level selection (``--selection batch``) against fixed-m max-variance.

For each (P, n, m) it times, on the same binary-ish rewards [P, n] (values 0, 0.1, 1: many
ties, groups with and without variance, as in RLVR):
  group   pods.core.downsample.downsample(rewards, m): m of each group, the paper's PODS
  batch   pods.core.batch_downsample.batch_max_variance(rewards, P*m): P*m across the groups
  mass    its first stage alone, variance_mass (every subset size of every group)
and reports the kept rows and variance mass of each, so the gain in mass is next to its
cost. Selection runs once per training step; compare its time with a step's (seconds on a
GPU, tens of milliseconds on the embedded CPU task).

    python benchmarks/selection/batch_select_speed.py
    python benchmarks/selection/batch_select_speed.py --quick
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402
from pods.core.batch_downsample import batch_max_variance, variance_mass  # noqa: E402
from pods.core.downsample import downsample  # noqa: E402


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


def row(P: int, n: int, m: int, repeats: int) -> list:
    rewards = rewards_for(P, n, seed=P * n + m)
    idx = downsample(rewards, m, "max_variance")
    fixed = torch.zeros(P, n, dtype=torch.bool).scatter(1, idx, True)
    keep = batch_max_variance(rewards, P * m)
    ms = [1000 * suite.timed(fn, repeats, warmup=0) for fn in (
        lambda: downsample(rewards, m, "max_variance"), lambda: batch_max_variance(rewards, P * m),
        lambda: variance_mass(rewards, n))]
    return [P, n, m, f"{ms[0]:.2f}", f"{ms[1]:.1f}", f"{ms[2]:.1f}", int(fixed.sum()),
            int(keep.sum()), f"{mass(rewards, fixed):.2f}", f"{mass(rewards, keep):.2f}"]


def main() -> None:
    parser = suite.parser(__doc__, "the first three sizes")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    grid = [(8, 64, 16), (64, 16, 4), (64, 64, 16)]
    if not args.quick:
        grid += [(256, 64, 16), (512, 16, 4), (1024, 8, 4)]
    print(suite.machine())
    head = ["P", "n", "m", "group (ms)", "batch (ms)", "mass stage (ms)", "kept group",
            "kept batch", "mass group", "mass batch"]
    rows = [row(P, n, m, args.repeats) for P, n, m in grid]
    print(suite.markdown(head, rows, "r" * len(head)))
    suite.write_json(args.json, [dict(zip(head, r, strict=True)) for r in rows])


if __name__ == "__main__":
    main()
