"""Speed of batched max-variance down-sampling against the obvious per-group loop.

For each (P, n, m) it times, on the same float32 reward tensor [P, n]:
  downsample   pods.core.downsample.downsample(rewards, m), the public call (input checks included)
  rule         pods.core.downsample.max_variance, the batched rule alone
  loop         a per-group reference written the obvious way: sort each group, try every
               k = 0..m, recompute the candidate's variance with torch each time
  sort         a bare torch.sort(rewards, dim=1) of the same tensor
and checks that loop and batched kept subsets have the same variance before timing.

    python benchmarks/selection/downsample_speed.py            # the full grid (make bench)
    python benchmarks/selection/downsample_speed.py --quick    # P 64, n 16 and 64
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402
from pods.core.downsample import downsample, max_variance  # noqa: E402


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


def seconds(fn, pool: list[torch.Tensor]) -> float:
    """Median wall time of fn(rewards) over repeats lasting about 0.3 s (suite.timed).

    Each repeat takes the next tensor of ``pool``: sorting the same small tensor again and
    again lets the CPU's branch predictor learn it, which makes torch.sort look up to 4x
    faster than it is on new rewards.
    """
    calls = iter(range(10**9))
    return suite.timed(lambda: fn(pool[next(calls) % len(pool)]), repeats=3, min_seconds=0.3)


def check_same_variance(rewards: torch.Tensor, m: int) -> None:
    var = lambda idx: rewards.double().gather(1, idx).var(dim=1, correction=0)  # noqa: E731
    fast, slow = var(downsample(rewards, m)), var(reference_loop(rewards, m))
    torch.testing.assert_close(fast, slow, rtol=1e-6, atol=1e-9)


def table_row(P: int, n: int, m: int, g: torch.Generator) -> dict:
    pool = [torch.randn(P, n, generator=g) for _ in range(16)]  # [P, n] each
    check_same_variance(pool[0], m)
    ms = {what: 1e3 * seconds(fn, pool) for what, fn in (
        ("downsample", lambda r: downsample(r, m)), ("rule", lambda r: max_variance(r, m)),
        ("loop", lambda r: reference_loop(r, m)), ("sort", lambda r: torch.sort(r, dim=1)))}
    return {"P": P, "n": n, "m": m, **ms}


def main() -> None:
    args = suite.parser(__doc__, "P 64, n 16 and 64").parse_args()
    Ps, ns = ([64], [16, 64]) if args.quick else ([64, 512, 4096], [16, 64, 256])
    print(suite.machine())
    g = torch.Generator().manual_seed(0)
    rows = [table_row(P, n, m, g) for P in Ps for n in ns for m in (4, 16)]
    print(suite.markdown(
        ["P", "n", "m", "downsample (ms)", "rule (ms)", "loop (ms)", "sort (ms)",
         "loop / downsample", "downsample / sort"],
        [[r["P"], r["n"], r["m"], f"{r['downsample']:.3f}", f"{r['rule']:.3f}",
          f"{r['loop']:.1f}", f"{r['sort']:.3f}", f"{r['loop'] / r['downsample']:.0f}x",
          f"{r['downsample'] / r['sort']:.2f}x"] for r in rows], "r" * 9))
    suite.write_json(args.json, rows)


if __name__ == "__main__":
    main()
