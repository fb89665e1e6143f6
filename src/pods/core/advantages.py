"""Group-relative advantages over the kept rollouts (P groups of m kept, see downsample.py).

PODS normalises over the kept subset only: after ``idx = downsample(rewards, m)``, pass
``rewards.gather(1, idx)`` [P, m] here, not the full [P, n] group.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

Scale = Literal["group", "batch", "none"]
SCALES: tuple[str, ...] = get_args(Scale)


def group_advantages(
    rewards: Tensor,
    *,
    scale: Scale = "group",
    std_correction: int = 1,
    eps: float = 1e-4,
) -> Tensor:
    """A_i = (r_i - mean of its group) / (std + eps).

    rewards: [P, m] rewards of the kept rollouts, one row per prompt.
    scale: what the centred rewards are divided by:
        "group" - each group's own std (GRPO, PODS; the paper's choice),
        "batch" - one std over all P*m kept rewards,
        "none"  - nothing (Dr. GRPO, Liu et al. 2025, arXiv 2503.20783: the std division
                  biases updates towards too easy and too hard prompts).
    std_correction: 1 for the unbiased estimator (divide by m-1; TRL and the official PODS
        code), 0 for the population std (divide by m).
    eps: added to the std (1e-4 as in the official code).

    A group whose rewards are all equal gets exactly zero advantage, whatever the scale.
    Returns [P, m] in the dtype of ``rewards``.
    """
    if scale not in SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}; use one of {', '.join(SCALES)}.")
    if std_correction not in (0, 1):
        raise ValueError(f"std_correction must be 0 (population std) or 1 (unbiased), "
                         f"got {std_correction!r}.")
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape [P, m], got {tuple(rewards.shape)}.")
    rewards = rewards.float() if not rewards.is_floating_point() else rewards
    centred = rewards - rewards.mean(dim=1, keepdim=True)  # [P, m]
    all_equal = rewards.amax(dim=1, keepdim=True) == rewards.amin(dim=1, keepdim=True)  # [P, 1]
    centred = centred.masked_fill(all_equal, 0.0)  # exact zeros, whatever the float rounding
    if scale == "none":
        return centred
    if scale == "group":
        std = _std(rewards, std_correction, dim=1)  # [P, 1]
    else:
        std = _std(rewards.reshape(1, -1), std_correction, dim=1)  # [1, 1]
    return centred / (std + eps)


def _std(x: Tensor, correction: int, dim: int) -> Tensor:
    """std along ``dim`` (kept), 0 where there are too few values for the estimator."""
    if x.shape[dim] <= correction:
        return torch.zeros_like(x.narrow(dim, 0, 1))
    return x.std(dim=dim, correction=correction, keepdim=True)


def masked_group_advantages(
    rewards: Tensor,
    keep: Tensor,
    *,
    scale: Scale = "group",
    std_correction: int = 1,
    eps: float = 1e-4,
) -> Tensor:
    """``group_advantages`` over a ragged selection: each group's kept rollouts only, where
    groups keep different numbers (batch-level selection, ``pods.core.batch_downsample``).

    rewards: [P, n] all rewards; keep: [P, n] bool, the kept rollouts (a group may keep none).
    Row g's kept entries get what ``group_advantages`` gives for ``rewards[g][keep[g]]`` (to
    float rounding; exact zeros for a group whose kept rewards are equal), with "batch"
    taking one std over all kept rewards.
    Returns [P, n], 0 where not kept.
    """
    if scale not in SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}; use one of {', '.join(SCALES)}.")
    if rewards.shape != keep.shape or rewards.dim() != 2:
        raise ValueError(f"rewards and keep must both have shape [P, n], got "
                         f"{tuple(rewards.shape)} and {tuple(keep.shape)}.")
    rewards = rewards.float() if not rewards.is_floating_point() else rewards
    w = keep.to(rewards.dtype)  # [P, n]
    count = w.sum(dim=1, keepdim=True)  # [P, 1] k_g
    mean = (rewards * w).sum(dim=1, keepdim=True) / count.clamp(min=1)  # [P, 1]
    centred = (rewards - mean) * w  # [P, n]
    all_equal = kept_all_equal(rewards, keep).unsqueeze(1)  # [P, 1]
    centred = centred.masked_fill(all_equal, 0.0)  # exact zeros, as in group_advantages
    if scale == "none":
        return centred
    if scale == "group":
        dof = (count - std_correction).clamp(min=1)  # [P, 1]
        var = (centred * centred).sum(dim=1, keepdim=True) / dof
        std = torch.where(count > std_correction, var.sqrt(), torch.zeros_like(var))
    else:
        std = _std(rewards[keep].reshape(1, -1), std_correction, dim=1)  # [1, 1]
    return centred / (std + eps) * w


def kept_all_equal(rewards: Tensor, keep: Tensor) -> Tensor:
    """[P] bool: whether each group's kept rewards (rewards [P, n] where keep [P, n]) are all
    equal (False for a group that keeps none: its entries are masked out anyway)."""
    big = torch.finfo(rewards.dtype).max
    return rewards.masked_fill(~keep, -big).amax(dim=1) == \
        rewards.masked_fill(~keep, big).amin(dim=1)
