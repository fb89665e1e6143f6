"""The checks of ``pods.core.downsample``'s inputs and of a custom rule's output: each
raises a ValueError that says what was wrong and what to change, before any selection
runs. (Rules themselves and their registry: ``pods.core.downsample``.)"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def checked_inputs(fn, rule, grid: Tensor, given: dict) -> dict[str, Tensor]:
    """The inputs a rule names in ``needs``, each checked to be [P, n] finite numbers."""
    found, name = {}, rule if isinstance(rule, str) else getattr(fn, "__name__", "custom")
    for key in tuple(getattr(fn, "needs", ())):
        if given.get(key) is None:
            raise ValueError(f"rule {name!r} needs {key!r} of each rollout: pass {key}=[P, n] "
                             f"to downsample (pods.core.rollout_inputs.rule_inputs computes it "
                             f"from the completions; the trainer and the TRL and verl adapters "
                             f"pass it).")
        value = torch.as_tensor(given[key], device=grid.device)
        value = value.unsqueeze(0) if value.dim() == 1 else value
        if tuple(value.shape) != tuple(grid.shape):
            raise ValueError(f"{key} has shape {tuple(value.shape)}, the rewards "
                             f"{tuple(grid.shape)}; give one value per rollout.")
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise ValueError(f"{key} contains NaN or infinite values; give finite numbers.")
        if key == "lengths" and (value < 0).any():
            raise ValueError("lengths must be token counts (>= 0).")
        found[key] = value
    return found


def as_rewards(rewards) -> Tensor:
    t = torch.as_tensor(rewards)
    if not (t.is_floating_point()):
        t = t.to(torch.float32)
    if t.dim() not in (1, 2):
        raise ValueError(
            f"rewards must have shape [P, n] (P groups of n rollouts) or [n] (one group), "
            f"got {t.dim()} dimensions with shape {tuple(t.shape)}; reshape to [P, n]."
        )
    return t


def check_rewards(rewards: Tensor, m: int) -> None:
    P, n = rewards.shape
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)):
        raise ValueError(f"m must be an integer number of rollouts to keep, got {m!r}.")
    if m < 1:
        raise ValueError(f"m={m} keeps no rollout; set m to at least 1 (and at most n={n}).")
    if m > n:
        raise ValueError(
            f"m={m} is larger than n={n} rollouts per group; lower m to at most {n} "
            f"or generate more rollouts per prompt."
        )
    # A float64 sum is non-finite iff some reward is (float32 sums cannot overflow there),
    # and it allocates no [P, n] temporary; only then look for the groups.
    if not torch.isfinite(rewards.sum(dtype=torch.float64)):
        check_finite(rewards)


def check_finite(rewards: Tensor) -> None:
    groups = (~torch.isfinite(rewards).all(dim=1)).nonzero().flatten().tolist()  # bad rows
    if groups:
        shown = ", ".join(map(str, groups[:10])) + (" ..." if len(groups) > 10 else "")
        raise ValueError(
            f"rewards contain NaN or infinite values in group(s) {shown} (row index); "
            f"fix the reward function or replace them (e.g. torch.nan_to_num) first."
        )


def checked_custom(idx: Tensor, P: int, n: int, m: int) -> Tensor:
    """Validate a custom rule's output and return it with each row sorted."""
    idx = torch.as_tensor(idx)
    if tuple(idx.shape) != (P, m) or idx.is_floating_point():
        raise ValueError(
            f"custom rule returned {idx.dtype} of shape {tuple(idx.shape)}; "
            f"it must return integer column indices of shape [P, m] = [{P}, {m}]."
        )
    idx = idx.long().sort(dim=1).values
    if P and ((idx[:, 0] < 0).any() or (idx[:, -1] >= n).any()):
        raise ValueError(f"custom rule returned indices outside 0..{n - 1}.")
    if (idx[:, 1:] == idx[:, :-1]).any():
        raise ValueError("custom rule returned a repeated index within a group; "
                         "each group's m indices must be distinct.")
    return idx
