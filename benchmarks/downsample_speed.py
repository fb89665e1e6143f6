"""Speed of batched max-variance down-sampling against the obvious per-group loop.

For each (P, n, m) it times, on the same float32 reward tensor [P, n]:
  downsample   pods.core.downsample.downsample(rewards, m), the public call (input checks included)
  rule         pods.core.downsample.max_variance, the batched rule alone
  loop         a per-group reference written the obvious way: sort each group, try every
               k = 0..m, recompute the candidate's variance with torch each time
  sort         a bare torch.sort(rewards, dim=1) of the same tensor
and checks that loop and batched kept subsets have the same variance before timing.

    python benchmarks/downsample_speed.py            # the full grid, a markdown table
    python benchmarks/downsample_speed.py --quick    # a smaller grid
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from pods.core.downsample import downsample, max_variance


def reference_loop(rewards: torch.Tensor, m: int) -> torch.Tensor:
    """Per group: sort, try each k, recompute the variance of every candidate."""
    P, n = rewards.shape
    out = []
    for row in rewards:
        values, order = torch.sort(row, stable=True)
        best_k, best_var = 0, -1.0
        for k in range(m + 1):
            candidate = torch.cat([values[: m - k], values[n - k :]])
            var = candidate.var(correction=0).item()
            if var > best_var:
                best_k, best_var = k, var
        kept = torch.cat([order[: m - best_k], order[n - best_k :]])
        out.append(kept.sort().values)
    return torch.stack(out)


def seconds(fn, pool: list[torch.Tensor], min_total: float = 0.3, max_reps: int = 200) -> float:
    """Median wall time of fn(rewards) over repeats lasting about ``min_total`` seconds.

    Each repeat takes the next tensor of ``pool``: sorting the same small tensor again and
    again lets the CPU's branch predictor learn it, which makes torch.sort look up to 4x
    faster than it is on new rewards.
    """
    fn(pool[-1])  # warm-up
    times: list[float] = []
    while len(times) < max_reps and (len(times) < 3 or sum(times) < min_total):
        rewards = pool[len(times) % len(pool)]
        start = time.perf_counter()
        fn(rewards)
        times.append(time.perf_counter() - start)
        if times[-1] > 2.0:  # the slow reference loop: one timing is enough
            break
    return statistics.median(times)


def check_same_variance(rewards: torch.Tensor, m: int) -> None:
    var = lambda idx: rewards.double().gather(1, idx).var(dim=1, correction=0)  # noqa: E731
    fast, slow = var(downsample(rewards, m)), var(reference_loop(rewards, m))
    torch.testing.assert_close(fast, slow, rtol=1e-6, atol=1e-9)


def table_row(P: int, n: int, m: int, g: torch.Generator) -> str:
    pool = [torch.randn(P, n, generator=g) for _ in range(16)]  # [P, n] each
    check_same_variance(pool[0], m)
    t_api = seconds(lambda r: downsample(r, m), pool)
    t_rule = seconds(lambda r: max_variance(r, m), pool)
    t_loop = seconds(lambda r: reference_loop(r, m), pool)
    t_sort = seconds(lambda r: torch.sort(r, dim=1), pool)
    return (f"| {P} | {n} | {m} | {t_api * 1e3:.3f} | {t_rule * 1e3:.3f} | {t_loop * 1e3:.1f} "
            f"| {t_sort * 1e3:.3f} | {t_loop / t_api:.0f}x | {t_api / t_sort:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="P in {64, 512}, n in {16, 64}")
    args = parser.parse_args()
    Ps, ns = ([64, 512], [16, 64]) if args.quick else ([64, 512, 4096], [16, 64, 256])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{platform.processor() or platform.machine()}, CPU")
    print("| P | n | m | downsample (ms) | rule (ms) | loop (ms) | sort (ms) "
          "| loop / downsample | downsample / sort |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    g = torch.Generator().manual_seed(0)
    for P in Ps:
        for n in ns:
            for m in (4, 16):
                print(table_row(P, n, m, g), flush=True)


if __name__ == "__main__":
    main()
