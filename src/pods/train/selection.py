"""The trainer's selection phase: which of a step's P*n rollouts the update sees, their
advantages, and the ``select/`` metrics (this rank's rows of them: ``pods.runtime.distributed``).

Two scopes:
    group  m of each group's n with a ``pods.core.downsample`` rule, advantages over the
           kept m (the paper's PODS);
    batch  P*m in all, chosen across the groups by ``pods.core.batch_downsample`` (groups
           keep 0 or 2..max_per_group each), advantages over each group's kept rollouts.
Both return a keep mask [P, n] and advantages [P, n] (0 where dropped), so everything after
selection reads the same for both. ``rank_batch`` then cuts this rank's kept rows out of them:
the ``KeptBatch`` the update takes, which counts the kept rows and the padding once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pods.config.groups import SCOPES
from pods.core.advantages import group_advantages, kept_all_equal, masked_group_advantages
from pods.core.batch_downsample import batch_max_variance
from pods.core.downsample import downsample
from pods.rollout import Rollouts


@dataclass
class KeptBatch:
    """What the update trains on: this rank's kept rollouts and their advantages."""

    rows: Rollouts  # [K] this rank's kept rollouts, padded to the busiest rank's count
    advantages: Tensor  # [K] (0 on padding rows)
    kept: int  # kept rollouts over all ranks, padding excluded (the normaliser's count)
    pad_rows: int  # padding rows over all ranks (completion mask 0: they add nothing)


def select(rewards: Tensor, m: int, rule, *, scope: str = "group",
           max_per_group: int | None = None, generator: torch.Generator | None = None,
           inputs: dict[str, Tensor] | None = None,
           adv_scale: str = "group") -> tuple[Tensor, Tensor]:
    """rewards [P, n] (and the rule's per-rollout ``inputs``, each [P, n]:
    pods.core.rollout_inputs) -> keep [P, n] bool and advantages [P, n] (0 where not kept)."""
    P, n = rewards.shape
    if scope == "group":
        idx = downsample(rewards, m, rule, generator=generator, **(inputs or {}))  # [P, m]
        adv = group_advantages(rewards.gather(1, idx), scale=adv_scale)  # [P, m]
        keep = torch.zeros(P, n, dtype=torch.bool).scatter(1, idx, True)
        return keep, torch.zeros(P, n, dtype=adv.dtype).scatter(1, idx, adv)
    if scope != "batch":
        raise ValueError(f"unknown selection scope {scope!r}; use one of {', '.join(SCOPES)}.")
    keep = batch_max_variance(rewards, P * m, max_per_group)  # [P, n]
    return keep, masked_group_advantages(rewards, keep, scale=adv_scale)


def rank_batch(rollouts: Rollouts, keep: Tensor, advantages: Tensor, rank: int,
               world: int) -> KeptBatch:
    """This rank's kept rollouts and their advantages [K], in row order.

    ``keep``/``advantages`` [P, n] cover all ranks; ``rollouts`` holds this rank's P/world
    groups. With batch-level selection ranks keep different numbers, so every rank's batch
    is padded to the busiest rank's size with copies of its first rollout whose completion
    mask is zero and advantage 0: they add nothing to the loss or its normaliser, and every
    rank makes the same number of forward and backward passes (DDP and FSDP need that)."""
    P, n = keep.shape
    per = P // world
    counts = keep.view(world, per * n).sum(1)  # [W] rows kept per rank
    mine = slice(rank * per, (rank + 1) * per)
    rows = keep[mine].flatten().nonzero().flatten()  # [K_r] of this rank's per*n
    adv = advantages[mine][keep[mine]]  # [K_r]
    pad = int(counts.max()) - len(rows)
    if pad:
        rows = torch.cat([rows, rows.new_zeros(pad)])
        adv = torch.cat([adv, adv.new_zeros(pad)])
    batch = rollouts.select(rows)
    if pad:
        batch.completion_mask[len(rows) - pad:] = 0
    return KeptBatch(batch, adv, kept=int(counts.sum()),
                     pad_rows=int(world * counts.max() - counts.sum()))


def selection_stats(rewards: Tensor, keep: Tensor, lengths: Tensor,
                    pad_rows: int = 0) -> dict[str, float]:
    """``select/`` metrics of one step: rewards [P, n], keep [P, n] bool, lengths [P, n].

    var_* are population variances averaged over groups (kept: over the groups that keep
    any); zero_var_frac* the fraction of such groups whose rewards are all equal; pad_rows
    the padding rows that ``rank_batch`` added over the ranks (``KeptBatch.pad_rows``)."""
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
        "select/pad_rows": pad_rows,
        "select/completion_len": _mean(lengths[keep].float()),
    }


def _mean(x: Tensor) -> float:
    return x.double().mean().item() if x.numel() else 0.0
