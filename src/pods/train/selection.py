"""The trainer's selection phase: which of a step's P*n rollouts the update sees, their
advantages, and the ``select/`` metrics (this rank's rows of them: ``pods.train.distributed``).

Two scopes:
    group  m of each group's n with a ``pods.core.downsample`` rule, advantages over the
           kept m (the paper's PODS);
    batch  P*m in all, chosen across the groups by ``pods.core.batch_downsample`` (groups
           keep 0 or 2..max_per_group each), advantages over each group's kept rollouts.
Both return a keep mask [P, n] and advantages [P, n] (0 where dropped), so everything after
selection reads the same for both.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pods.config.groups import SCOPES
from pods.core.advantages import group_advantages, kept_all_equal, masked_group_advantages
from pods.core.batch_downsample import batch_max_variance
from pods.core.downsample import downsample


def select(rewards: Tensor, m: int, rule, *, scope: str = "group",
           max_per_group: int | None = None, generator: torch.Generator | None = None,
           lengths: Tensor | None = None, adv_scale: str = "group") -> tuple[Tensor, Tensor]:
    """rewards [P, n] (and lengths [P, n] for the length rules) -> keep [P, n] bool and
    advantages [P, n] (0 where not kept)."""
    P, n = rewards.shape
    if scope == "group":
        idx = downsample(rewards, m, rule, generator=generator, lengths=lengths)  # [P, m]
        adv = group_advantages(rewards.gather(1, idx), scale=adv_scale)  # [P, m]
        keep = torch.zeros(P, n, dtype=torch.bool).scatter(1, idx, True)
        return keep, torch.zeros(P, n, dtype=adv.dtype).scatter(1, idx, adv)
    if scope != "batch":
        raise ValueError(f"unknown selection scope {scope!r}; use one of {', '.join(SCOPES)}.")
    keep = batch_max_variance(rewards, P * m, max_per_group)  # [P, n]
    return keep, masked_group_advantages(rewards, keep, scale=adv_scale)


def selection_stats(rewards: Tensor, keep: Tensor, lengths: Tensor,
                    world: int = 1) -> dict[str, float]:
    """``select/`` metrics of one step: rewards [P, n], keep [P, n] bool, lengths [P, n].

    var_* are population variances averaged over groups (kept: over the groups that keep
    any); zero_var_frac* the fraction of such groups whose rewards are all equal; pad_rows
    the padding rows that ``rank_batch`` adds over ``world`` ranks."""
    counts = keep.view(world, -1).sum(1)  # [W] rows kept per rank
    live = keep.any(dim=1)  # [P] groups that keep any
    w = keep.double()
    count = w.sum(dim=1).clamp(min=1)  # [P]
    mean = (rewards.double() * w).sum(dim=1) / count  # [P]
    var_kept = (((rewards.double() - mean[:, None]) ** 2) * w).sum(dim=1) / count  # [P]
    all_equal = kept_all_equal(rewards, keep)  # [P]
    return {
        "select/reward_mean": _mean(rewards[keep]),
        "select/var_full": rewards.var(dim=1, correction=0).mean().item(),
        "select/var_kept": _mean(var_kept[live]),
        "select/zero_var_frac_full": (rewards.amax(1) == rewards.amin(1)).float().mean().item(),
        "select/zero_var_frac": _mean(all_equal[live].float()),
        "select/kept": int(keep.sum()),
        "select/groups_kept": live.float().mean().item(),
        "select/pad_rows": int(world * counts.max() - counts.sum()),
        "select/completion_len": _mean(lengths[keep].float()),
    }


def _mean(x: Tensor) -> float:
    return x.double().mean().item() if x.numel() else 0.0
