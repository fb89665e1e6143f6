"""Batch-level down-sampling (beyond the paper): keep a budget of B rollouts in total, chosen
across all P groups of a step, instead of m from every group.

With m fixed per group (the paper's PODS), a group whose n rewards are all equal still takes
m rows of the update and teaches nothing (its advantages are zero), while a group with rich
contrast can give only m. The paper names adaptive down-sampling as future work. Here each
group g keeps k_g rollouts S_g, chosen to maximise the step's within-group reward variance
mass

    J = sum_g sum_{i in S_g} (r_i - mean(S_g))^2          (= sum_g k_g Var(S_g))

subject to sum_g k_g <= B and k_g in {0} u [2, K] (a kept group keeps at least 2, since one
rollout alone has no contrast; K caps a group's share, default n). The trainer's budget is
B = P*m, the update size of fixed-m PODS, so both spend the same update compute.

Solved exactly, in two stages:
1. For each size k the best S_g is the max-variance subset of that size, the j highest plus
   the k-j lowest rewards for some j (PODS Lemma 3.1). Prefix sums over one sort of each
   group give every (k, j) candidate's sum and sum of squares, so f_g(k), the largest sum of
   squared deviations of k of group g's rollouts, is found for all k at once: O(P K^2).
2. f_g is nondecreasing in k (adding x to S adds k/(k+1) (x - mean_S)^2 >= 0) but not concave
   (binary rewards, balanced: f(2) = 1/2, f(3) = 2/3, f(4) = 1), so a greedy allocation is
   not exact. A dynamic program over groups, one max-plus convolution per group, is:
   O(P B K) time. tests/test_batch_downsample.py checks both stages against brute force.

Ties: among allocations of equal J the one with the fewest rows wins (so a group without
variance keeps nothing: it would add rows and no mass), then the smallest k for the later
groups; within a group, the candidate with the fewest highest rewards (as ``max_variance``).
Every rank of a data-parallel run computes the same allocation from the gathered rewards.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from pods.core.downsample import _rank_order
from pods.core.downsample_checks import check_rewards


def variance_mass(rewards: Tensor, max_k: int) -> tuple[Tensor, Tensor]:
    """f_g(k) for k = 0..max_k: the largest sum of squared deviations from their mean of k of
    each group's rewards (k = 1 is marked -inf: not allowed), and the number j of highest
    rewards in that best subset (the rest are the k-j lowest).

    rewards: [P, n] floats; max_k <= n. Returns f [P, K+1] float64 and j [P, K+1] int64.
    """
    return _sorted_variance_mass(_rank_order(rewards)[0], max_k)


def _sorted_variance_mass(values: Tensor, max_k: int) -> tuple[Tensor, Tensor]:
    """``variance_mass`` of rewards already sorted ascending in each row, values [P, n]."""
    n = values.shape[1]
    # as in max_variance: float64, shifted by the median (the mass is shift-invariant)
    x = values.double() - values[:, n // 2 : n // 2 + 1].double()  # [P, n]
    pad = torch.nn.functional.pad
    low = pad(torch.stack([x, x * x]).cumsum(-1), (1, 0))  # [2, P, n+1] sums of the j lowest
    high = pad(torch.stack([x, x * x]).flip(-1).cumsum(-1), (1, 0))  # ... of the j highest
    K = max_k
    k = torch.arange(K + 1).unsqueeze(1)  # [K+1, 1] subset size
    j = torch.arange(K + 1).unsqueeze(0)  # [1, K+1] how many of the highest
    lows = (k - j).clamp(min=0).expand(K + 1, K + 1)  # [K+1, K+1] how many of the lowest
    sums = high[:, :, j.expand(K + 1, K + 1)] + low[:, :, lows]  # [2, P, K+1, K+1]
    score = k * sums[1] - sums[0] * sums[0]  # [P, K+1, K+1] = k^2 Var = k * mass
    score = score.masked_fill(j > k, -torch.inf)  # j <= k only
    best_j = score.argmax(dim=2)  # [P, K+1] first maximum: fewest of the highest
    best = score.gather(2, best_j.unsqueeze(2)).squeeze(2)  # [P, K+1]
    mass = (best / k.T.clamp(min=1)).clamp(min=0.0)  # [P, K+1]; rounding never makes it < 0
    if K >= 1:
        mass[:, 1] = -torch.inf  # one rollout alone: no contrast, not allowed
    return mass, best_j


def allocate(mass: Tensor, budget: int) -> Tensor:
    """The sizes k_g [P] that maximise sum_g mass[g, k_g] with sum_g k_g <= budget (dynamic
    program over groups). mass: [P, K+1] as ``variance_mass`` returns, -inf where a size is
    not allowed. Ties: fewest rows in all, then the smallest k for the later groups."""
    f = mass.double().numpy()  # [P, K+1]
    P, K1 = f.shape
    B = min(budget, P * (K1 - 1))
    prev = np.full(B + 1, -np.inf)  # prev[b]: the best total of the groups so far, b rows
    prev[0] = 0.0
    rows = np.arange(B + 1)[:, None] - np.arange(K1)[None, :]  # [B+1, K+1] rows before g
    choice = np.zeros((P, B + 1), dtype=np.int64)
    for g in range(P):
        options = np.where(rows >= 0, prev[rows.clip(min=0)] + f[g], -np.inf)  # [B+1, K+1]
        choice[g] = options.argmax(axis=1)  # first maximum: the smallest k
        prev = options[np.arange(B + 1), choice[g]]
    b = int(np.argmax(prev))  # first maximum: the fewest rows
    sizes = np.zeros(P, dtype=np.int64)
    for g in range(P - 1, -1, -1):
        sizes[g] = choice[g, b]
        b -= sizes[g]
    return torch.from_numpy(sizes)


def batch_max_variance(rewards: Tensor, budget: int, max_per_group: int | None = None) -> Tensor:
    """Which rollouts to keep: a bool mask [P, n] with at most ``budget`` True in all, each
    group keeping 0 or 2..``max_per_group`` (default n) rollouts, maximising the variance mass
    J (module docstring). rewards: [P, n] finite floats."""
    rewards = torch.as_tensor(rewards)
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape [P, n], got {tuple(rewards.shape)}.")
    P, n = rewards.shape
    K = n if max_per_group is None else max_per_group
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"budget must be a number of rollouts >= 0, got {budget!r}.")
    if not 2 <= K <= n:
        raise ValueError(f"max_per_group={K} must be between 2 and n={n}.")
    host = rewards.cpu()
    check_rewards(host, 1)  # finite rewards, else a message naming the groups
    values, order = _rank_order(host)  # [P, n] ascending, and the column of each rank
    mass, best_j = _sorted_variance_mass(values, K)  # [P, K+1] each
    sizes = allocate(mass, budget)  # [P]
    highest = best_j.gather(1, sizes.unsqueeze(1))  # [P, 1]
    rank = torch.arange(n).unsqueeze(0)  # [1, n]
    kept_rank = (rank < sizes.unsqueeze(1) - highest) | (rank >= n - highest)  # [P, n]
    keep = torch.zeros(P, n, dtype=torch.bool).scatter(1, order, kept_rank)  # [P, n]
    return keep.to(rewards.device)
