"""Down-sampling rules: which m of the n rollouts of each prompt the policy update sees.

Vocabulary used everywhere in pods:
    P  prompts (groups) per step
    n  rollouts generated per prompt
    m  rollouts kept per prompt for the update (1 <= m <= n)

A rule maps a reward matrix [P, n] to m column indices per row. Every rule here works on
all P groups at once: one sort of the rewards gives each group's rank order, the rule marks
m ranks to keep, and the marks are scattered back to the original columns. No Python loop
runs over groups or candidates.

    from pods.core.downsample import downsample, RULES
    idx = downsample(rewards, m, rule="max_variance")       # [P, m], sorted ascending
    kept = rewards.gather(1, idx)                           # [P, m]

Custom rules have the signature of the built-ins, ``rule(rewards, m, generator)`` with
rewards a float tensor [P, n] (already validated: finite, 1 <= m <= n) returning a
LongTensor [P, m] of distinct column indices; pass the callable as ``rule=`` or add it to
``RULES``. A rule that reads more of each rollout than its reward names the inputs in a
``needs`` attribute (e.g. ``("lengths",)``) and takes them as keywords, each [P, n]:
``rule(rewards, m, generator, lengths=...)``, called as ``downsample(..., lengths=...)``.
The inputs and how they are computed from the completions: ``pods.core.rollout_inputs``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from pods.core.downsample_checks import as_rewards, check_rewards, checked_custom, checked_inputs

Rule = Callable[[Tensor, int, "torch.Generator | None"], Tensor]


def _sorted_rows(cols: Tensor) -> Tensor:
    """Each row of the LongTensor ``cols`` [P, m] in ascending order (numpy's vectorised
    sort on CPU, several times faster than torch.sort on many short rows)."""
    if cols.device.type == "cpu":
        return torch.from_numpy(np.sort(cols.numpy(), axis=1))
    return torch.sort(cols, dim=1).values


def _rank_order(rewards: Tensor) -> tuple[Tensor, Tensor]:
    """Stable ascending sort of each group: ties keep column order, so the result is the
    same on every device and backend. Returns sorted values [P, n] and the column of each
    rank [P, n].

    On CPU, rewards that are exact in float32 are sorted by numpy as int64 keys
    (order-preserving float bits << 32 | column): unique keys make any sort stable, and
    numpy's sort is several times faster than torch.sort here, as in ``_sorted_rows``.
    """
    if rewards.device.type != "cpu" or rewards.dtype == torch.float64:
        return torch.sort(rewards, dim=1, stable=True)
    n = rewards.shape[1]
    r = rewards.detach().float()
    bits = (r.numpy() + np.float32(0.0)).view(np.int32)  # + 0.0 turns -0.0 into +0.0
    bits = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # negative floats: reverse their bit order
    keys = (bits.astype(np.int64) << 32) | np.arange(n)  # [P, n] unique per row
    keys.sort(axis=1)
    order = torch.from_numpy(keys & 0xFFFFFFFF)  # [P, n] column of each rank
    return rewards.gather(1, order), order


def max_variance(rewards: Tensor, m: int, generator: torch.Generator | None = None) -> Tensor:
    """The size-m subset with the largest reward variance (PODS, Lemma 3.1).

    Some optimal subset is the k highest plus the m-k lowest rewards for some k in 0..m.
    After one sort, prefix sums of r and r^2 over the m lowest and the m highest give every
    candidate's sum and sum of squares: O(P n log n + P m) in all. Candidates of exactly
    equal score go to the smallest k. With binary rewards this keeps as close to m/2 ones
    and m/2 zeros as the group allows.
    """
    n = rewards.shape[1]
    values, order = _rank_order(rewards)  # [P, n] each
    # float64 and a shift by the median keep m*sum(r^2) - sum(r)^2 free of cancellation.
    # The variance is shift-invariant, and subtracting one of the values is exact, so
    # equal candidates (e.g. with binary rewards) score exactly equal.
    ends = torch.stack([values[:, :m], values[:, n - m :].flip(1)])  # [2, P, m] low, high
    x = ends.double() - values[:, n // 2 : n // 2 + 1].double()  # [2, P, m]
    prefix = torch.nn.functional.pad(torch.stack([x, x * x]).cumsum(-1), (1, 0))
    # prefix[p, 0, :, j] = sum of r^(p+1) over the j lowest, prefix[p, 1, :, j] the j highest
    totals = prefix[:, 1] + prefix[:, 0].flip(-1)  # [2, P, m+1] k highest + m-k lowest
    score = m * totals[1] - totals[0] * totals[0]  # [P, m+1] = m^2 * variance
    best_k = score.argmax(dim=1, keepdim=True)  # [P, 1] first maximum: smallest k
    j = torch.arange(m, device=rewards.device)  # [m]
    ranks = j + (n - m) * (j >= m - best_k)  # [P, m] ranks 0..m-k-1 and n-k..n-1
    return _sorted_rows(order.gather(1, ranks))


def max_reward(rewards: Tensor, m: int, generator: torch.Generator | None = None) -> Tensor:
    """The m highest rewards (ties: later columns first). Known to train badly: no
    negative signal reaches the update."""
    _, order = _rank_order(rewards)
    return _sorted_rows(order[:, -m:])


def min_reward(rewards: Tensor, m: int, generator: torch.Generator | None = None) -> Tensor:
    """The m lowest rewards (ties: earlier columns first)."""
    _, order = _rank_order(rewards)
    return _sorted_rows(order[:, :m])


def random(rewards: Tensor, m: int, generator: torch.Generator | None = None) -> Tensor:
    """m columns uniformly without replacement, drawn from ``generator`` (the global RNG
    when None). Statistically the same as GRPO with m rollouts."""
    P, n = rewards.shape
    noise = torch.rand(P, n, generator=generator, device=rewards.device)  # [P, n]
    return _sorted_rows(noise.topk(m, dim=1).indices)  # the m largest of iid uniforms


def percentile(rewards: Tensor, m: int, generator: torch.Generator | None = None) -> Tensor:
    """The rollouts at m evenly spaced quantiles of the sorted rewards.

    Definition: with ranks 0..n-1 in ascending reward order (stable for ties), keep ranks
    floor(j (n-1) / (m-1) + 1/2) for j = 0..m-1, i.e. quantile levels 0, 1/(m-1), ..., 1;
    the lowest and the highest reward are always kept. m = 1 keeps the median rank
    floor((n-1)/2). The ranks are distinct because their spacing (n-1)/(m-1) >= 1.
    """
    n = rewards.shape[1]
    _, order = _rank_order(rewards)
    j = torch.arange(m, device=rewards.device)
    if m == 1:
        ranks = j + (n - 1) // 2
    else:  # exact integer form of floor(j (n-1)/(m-1) + 1/2)
        ranks = (2 * j * (n - 1) + (m - 1)) // (2 * (m - 1))
    return _sorted_rows(order[:, ranks])


def _top_m(key: Tensor, m: int) -> Tensor:
    """The m columns of largest ``key`` [P, n]; ties go to the lower column (a stable sort of
    -key), so the choice is deterministic on every device."""
    order = torch.sort(-key, dim=1, stable=True).indices  # [P, n] largest first
    return _sorted_rows(order[:, :m])


def max_abs_advantage(rewards: Tensor, m: int,
                      generator: torch.Generator | None = None) -> Tensor:
    """The m rollouts farthest from their group's mean reward over all n, |r_i - mean|:
    CPPO's pruning criterion (arXiv 2503.22342: keep the completions with the largest
    absolute advantage). Ties: lower column first."""
    r = rewards.double()
    return _top_m((r - r.mean(dim=1, keepdim=True)).abs(), m)


def shortest(rewards: Tensor, m: int, generator: torch.Generator | None = None, *,
             lengths: Tensor) -> Tensor:
    """The m shortest completions (GFPO, arXiv 2508.09726: sample more, keep the shortest,
    against length inflation). ``lengths`` [P, n] token counts; ties: lower column first."""
    return _top_m(-lengths.double(), m)


def reward_per_token(rewards: Tensor, m: int, generator: torch.Generator | None = None, *,
                     lengths: Tensor) -> Tensor:
    """The m highest rewards per completion token, r_i / max(len_i, 1) (GFPO's token
    efficiency). Ties: lower column first."""
    return _top_m(rewards.double() / lengths.double().clamp(min=1), m)


shortest.needs = reward_per_token.needs = ("lengths",)  # pods.core.rollout_inputs

RULES: dict[str, Rule] = {
    "max_variance": max_variance,
    "max_reward": max_reward,
    "min_reward": min_reward,
    "random": random,
    "percentile": percentile,
    "max_abs_advantage": max_abs_advantage,
    "shortest": shortest,
    "reward_per_token": reward_per_token,
}
_BUILTIN = frozenset(RULES.values())  # trusted: proven by the tests, output not re-checked


def downsample(
    rewards: Tensor | np.ndarray | list,
    m: int,
    rule: str | Rule = "max_variance",
    generator: torch.Generator | None = None,
    **inputs: Tensor | np.ndarray | list,
) -> Tensor:
    """Indices of the m rollouts to keep in each group.

    rewards: [P, n] floats (P groups of n rollouts) or [n] for one group; lists and numpy
        arrays are converted.
    m: rollouts kept per group, 1 <= m <= n.
    rule: a name in ``RULES`` or a callable ``rule(rewards, m, generator)``.
    generator: a ``torch.Generator`` for rules that draw at random.
    inputs: per-rollout inputs by name, each [P, n] (or [n]), for rules that read them (a
        rule's ``needs`` attribute names them: ``shortest`` and ``reward_per_token`` need
        ``lengths``, completion token counts); other rules ignore them.

    Returns a LongTensor [P, m] ([m] for 1-D input): each row's column indices, distinct
    and ascending. Raises ValueError, before any work, on bad input.
    """
    rewards = as_rewards(rewards)
    one_group = rewards.dim() == 1
    grid = rewards.unsqueeze(0) if one_group else rewards  # [P, n]
    fn = check_rule(rule)
    check_rewards(grid, m)
    extras = checked_inputs(fn, rule, grid, inputs)
    P, n = grid.shape
    if m == n:
        idx = torch.arange(n, device=grid.device).expand(P, n).clone()
    elif fn in _BUILTIN:
        idx = fn(grid, m, generator, **extras)
    else:
        idx = checked_custom(fn(grid, m, generator, **extras), P, n, m)
    return idx[0] if one_group else idx


def rule_needs(rule: str | Rule) -> tuple[str, ...]:
    """The per-rollout inputs a rule (a name in ``RULES`` or a callable) reads besides the
    rewards: its ``needs`` attribute, () when it has none."""
    return tuple(getattr(check_rule(rule), "needs", ()))


def check_rule(rule: str | Rule, option: str = "rule", *, callables: bool = True) -> Rule:
    """The rule ``rule`` names in ``RULES`` (or ``rule``, a callable); else a ValueError
    listing the names. The one check of a rule's name (downsample, SelectionSpec, the config
    checks in pods.train.checks, the TRL and verl adapters). ``option``: the setting's name
    for the message; ``callables``: whether it may hold a callable (a config's may not)."""
    if callables and callable(rule):
        return rule
    if not isinstance(rule, str) or rule not in RULES:
        other = (", or pass a callable rule that returns each group's kept columns, "
                 "LongTensor [P, m] (see pods.core.downsample)") if callables else ""
        raise ValueError(f"unknown {option} {rule!r}; use one of {', '.join(sorted(RULES))}"
                         f"{other}.")
    return RULES[rule]
