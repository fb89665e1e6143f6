"""PODS's central step as one function: from a step's rewards [P, n], which rollouts the
update sees, their advantages and the ``select/`` metrics.

    spec = SelectionSpec(m=16, rule="max_variance")              # checked when built
    chosen = select(rewards, {}, spec, generator, lengths)        # rewards, lengths [P, n]
    chosen.keep        # [P, n] bool, the kept rollouts
    chosen.advantages  # [P, n], over each group's kept rollouts, 0 where dropped
    chosen.metrics     # {"select/reward_mean": ..., "select/var_full": ..., ...}

The native trainer (``pods.train.trainer``, then ``pods.train.selection.rank_batch`` cuts
each rank's rows), the TRL adapter and the verl adapter all call ``select``, so the choice
and the metrics are the same wherever PODS runs. ``select`` reads nothing but its arguments
and draws only from ``generator``: a loop around it (generate more groups until enough
have reward variance, then select) calls it once on what it gathered.

Two scopes:
    group  m of each group's n with a ``pods.core.downsample`` rule, advantages over the
           kept m (the paper's PODS);
    batch  P*m in all, chosen across the groups by ``pods.core.batch_downsample`` (groups
           keep 0 or 2..max_per_group each), advantages over each group's kept rollouts.

The metrics are means of per-group statistics (``GroupStats``), so selections made in
separate calls (verl's groups of different sizes) combine exactly: ``GroupStats.cat``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Literal, get_args

import torch
from torch import Tensor

from pods.core.advantages import (
    SCALES,
    Scale,
    group_advantages,
    kept_all_equal,
    masked_group_advantages,
)
from pods.core.batch_downsample import batch_max_variance
from pods.core.downsample import Rule, check_rule, downsample
from pods.core.downsample_checks import check_rewards

Scope = Literal["group", "batch"]
SCOPES: tuple[str, ...] = get_args(Scope)


@dataclass(frozen=True)
class SelectionSpec:
    """What one selection keeps and how its advantages are scaled; checked when built."""

    m: int  # rollouts kept per group (scope batch: P*m in all), 1 <= m <= n
    rule: str | Rule = "max_variance"  # a name in pods.core.downsample.RULES or a callable
    scope: Scope = "group"  # one of SCOPES
    max_per_group: int | None = None  # scope batch: most rollouts a group keeps; None = n
    adv_scale: Scale = "group"  # one of pods.core.advantages.SCALES
    adv_group: int | None = None  # advantages within blocks of this many of each group's n
    #   rollouts in generation order (needs m = n, scope group: the official multi-GPU
    #   GRPO-GA); None = over each group's kept rollouts

    def __post_init__(self) -> None:
        m = self.m
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise ValueError(f"m={m!r} must be a whole number of rollouts kept per group, at "
                             f"least 1 (and at most n).")
        check_rule(self.rule)
        if self.scope not in SCOPES:
            raise ValueError(f"unknown selection scope {self.scope!r}; use one of "
                             f"{', '.join(SCOPES)}.")
        if self.scope == "batch" and self.rule != "max_variance":
            raise ValueError(f"selection scope batch chooses max-variance subsets of any "
                             f"size, not rule {self.rule!r}; use rule max_variance or scope "
                             f"group.")
        k = self.max_per_group
        if k is not None and (self.scope != "batch" or isinstance(k, bool)
                              or not isinstance(k, int) or k < 2):
            raise ValueError(f"max_per_group={k!r} needs scope batch and a whole number of "
                             f"at least 2 (at most n), or None.")
        if self.adv_scale not in SCALES:
            raise ValueError(f"unknown advantage scale {self.adv_scale!r}; use one of "
                             f"{', '.join(SCALES)}.")
        g = self.adv_group
        if g is not None and (self.scope != "group" or isinstance(g, bool)
                              or not isinstance(g, int) or g < 2):
            raise ValueError(f"adv_group={g!r} needs scope group and a whole number of at "
                             f"least 2 (a block of one rollout has no advantage), or None.")


@dataclass(frozen=True)
class GroupStats:
    """Each group's statistics of one selection, [P] each: the ``select/`` metrics are means
    over them (``metrics``), so several selections' stats concatenated (``cat``) give the
    metrics of all their groups together, exactly."""

    var_full: Tensor  # [P] float64 population variance of all n rewards
    flat_full: Tensor  # [P] bool: all n rewards equal
    var_kept: Tensor  # [P] float64 population variance of the kept rewards (0: none kept)
    flat_kept: Tensor  # [P] bool: the kept rewards all equal (False: none kept)
    kept: Tensor  # [P] int64 rollouts kept
    reward_sum: Tensor  # [P] float64 sum of the kept rewards
    length_sum: Tensor | None  # [P] float64 sum of the kept completion lengths; None: unknown

    @staticmethod
    def of(rewards: Tensor, keep: Tensor, lengths: Tensor | None = None) -> GroupStats:
        """rewards [P, n], keep [P, n] bool, lengths [P, n] completion tokens (or None)."""
        r, w = rewards.double().cpu(), keep.cpu().double()  # [P, n] each
        count = w.sum(dim=1)  # [P]
        mean = (r * w).sum(dim=1) / count.clamp(min=1)  # [P] of the kept
        lens = None if lengths is None else (lengths.double().cpu() * w).sum(dim=1)  # [P]
        return GroupStats(
            var_full=r.var(dim=1, correction=0), flat_full=r.amax(1) == r.amin(1),
            var_kept=(((r - mean[:, None]) ** 2) * w).sum(dim=1) / count.clamp(min=1),
            flat_kept=kept_all_equal(r, keep.cpu()) & (count > 0), kept=count.long(),
            reward_sum=(r * w).sum(dim=1), length_sum=lens)

    @staticmethod
    def cat(parts: list[GroupStats]) -> GroupStats:
        """The groups of all ``parts``, in order."""
        def joined(name: str) -> Tensor | None:
            values = [getattr(part, name) for part in parts]
            return None if any(v is None for v in values) else torch.cat(values)

        return GroupStats(**{f.name: joined(f.name) for f in fields(GroupStats)})

    def metrics(self) -> dict[str, float]:
        """The ``select/`` metrics. var_* are population variances averaged over groups
        (kept: over the groups that keep any); zero_var_frac* the fraction of such groups
        whose rewards are all equal; reward_mean and completion_len are means over the kept
        rollouts (completion_len only when lengths were given); kept counts rollouts,
        groups_kept is the fraction of groups that keep any (1 unless scope batch)."""
        live = self.kept > 0  # [P]
        total = int(self.kept.sum())
        out = {
            "select/reward_mean": float(self.reward_sum.sum()) / total if total else 0.0,
            "select/var_full": _mean(self.var_full),
            "select/var_kept": _mean(self.var_kept[live]),
            "select/zero_var_frac_full": _mean(self.flat_full),
            "select/zero_var_frac": _mean(self.flat_kept[live]),
            "select/kept": total,
            "select/groups_kept": _mean(live),
        }
        if self.length_sum is not None:
            out["select/completion_len"] = float(self.length_sum.sum()) / total if total \
                else 0.0
        return out


@dataclass(frozen=True)
class Selection:
    """One selection: what ``select`` returns."""

    keep: Tensor  # [P, n] bool, the kept rollouts
    advantages: Tensor  # [P, n] over each group's kept rollouts, 0 where not kept
    stats: GroupStats  # [P] each, what the metrics are computed from

    @property
    def metrics(self) -> MappingProxyType:
        """The ``select/`` metrics (``GroupStats.metrics``), read-only."""
        return MappingProxyType(self.stats.metrics())

    def columns(self) -> Tensor:
        """[P, k] each group's kept columns, ascending, when every group keeps the same
        number k (scope group: k = m); a ValueError otherwise (use ``keep``)."""
        counts = self.keep.sum(dim=1)  # [P]
        if len(counts) and (counts != counts[0]).any():
            raise ValueError("groups keep different numbers of rollouts (scope batch); "
                             "read the keep mask [P, n] instead of columns.")
        P = self.keep.shape[0]
        return self.keep.nonzero()[:, 1].view(P, -1)  # nonzero is row-major: ascending


def select(rewards: Tensor, inputs: dict[str, Tensor], spec: SelectionSpec,
           generator: torch.Generator | None = None,
           lengths: Tensor | None = None) -> Selection:
    """The kept rollouts of a step, their advantages and the metrics.

    rewards: [P, n] finite floats, one row per prompt (group).
    inputs: the rule's per-rollout inputs by name, each [P, n] (``pods.core.rollout_inputs``;
        {} for a rule of rewards alone).
    spec: m, rule, scope, max_per_group and adv_scale (``SelectionSpec``).
    generator: the stream of rules that draw at random (the global one when None).
    lengths: [P, n] completion tokens, for ``select/completion_len`` (omitted when None).
    """
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape [P, n], got {tuple(rewards.shape)}.")
    if lengths is not None and lengths.shape != rewards.shape:
        raise ValueError(f"lengths has shape {tuple(lengths.shape)}, the rewards "
                         f"{tuple(rewards.shape)}; give one length per rollout.")
    P, n = rewards.shape
    if spec.adv_group is not None:
        keep, advantages = _blocks(rewards, spec)
    elif spec.scope == "group":
        idx = downsample(rewards, spec.m, spec.rule, generator, **inputs)  # [P, m]
        adv = group_advantages(rewards.gather(1, idx), scale=spec.adv_scale)  # [P, m]
        keep = torch.zeros(P, n, dtype=torch.bool, device=rewards.device).scatter(1, idx, True)
        advantages = torch.zeros_like(rewards, dtype=adv.dtype).scatter(1, idx, adv)  # [P, n]
    else:
        check_rewards(rewards, spec.m)  # m <= n and finite rewards, as downsample checks them
        keep = batch_max_variance(rewards, P * spec.m, spec.max_per_group)  # [P, n]
        advantages = masked_group_advantages(rewards, keep, scale=spec.adv_scale)  # [P, n]
    return Selection(keep, advantages, GroupStats.of(rewards, keep, lengths))


def _blocks(rewards: Tensor, spec: SelectionSpec) -> tuple[Tensor, Tensor]:
    """Keep all n of each group, advantages within consecutive blocks of ``adv_group``
    rollouts (generation order): the official multi-GPU GRPO-GA, which generates n x
    accumulation-steps rollouts of one prompt and normalises each block of n as a group.
    rewards [P, n] -> keep [P, n] (all True), advantages [P, n]."""
    P, n = rewards.shape
    g = spec.adv_group
    if spec.m != n or n % g:
        raise ValueError(f"adv_group={g} splits each prompt's n={n} rollouts into blocks: it "
                         f"needs m = n (got m={spec.m}) and n a multiple of {g}.")
    adv = group_advantages(rewards.reshape(P * n // g, g), scale=spec.adv_scale)  # [P*n/g, g]
    return torch.ones(P, n, dtype=torch.bool, device=rewards.device), adv.view(P, n)


def _mean(x: Tensor) -> float:
    return x.double().mean().item() if x.numel() else 0.0
