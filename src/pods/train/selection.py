"""The trainer's side of selection: the spec from the config, and this rank's cut.

Which rollouts are kept, their advantages and the ``select/`` metrics are one call to
``pods.core.selection.select`` on the step's gathered rewards [P, n] (the same on every
rank, and the same function the TRL and verl adapters call). What is left here is
the trainer's own step after it: ``rank_batch`` cuts this rank's kept rows out of the
rollouts it generated, padded to the busiest rank (``pods.runtime.distributed``), into the
frozen ``KeptBatch`` the update takes, advantages already on the device; ``Sampled`` is
what the step's sampling phase hands its update (``Trainer.sample`` -> ``Trainer.update``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pods.config.step import SelectionConfig
from pods.core.selection import Selection, SelectionSpec
from pods.rollout import Rollouts
from pods.tasks.scoring import Scores


def selection_spec(config: SelectionConfig) -> SelectionSpec:
    """The core's selection spec from the config's selection group."""
    return SelectionSpec(m=config.m, rule=config.rule, scope=config.scope,
                         max_per_group=config.max_kept_per_group, adv_scale=config.adv_scale,
                         adv_group=config.adv_group_size)


@dataclass(frozen=True)
class KeptBatch:
    """What the update trains on: this rank's kept rollouts and their advantages."""

    rows: Rollouts  # [K] this rank's kept rollouts, padded to the busiest rank's count
    advantages: Tensor  # [K] on the training device (0 on padding rows)
    kept: int  # kept rollouts over all ranks, padding excluded (the normaliser's count)
    pad_rows: int  # padding rows over all ranks (completion mask 0: they add nothing)

    @property
    def metrics(self) -> dict[str, int]:
        """``select/pad_rows``: the padding rows added over the ranks (batch scope only)."""
        return {"select/pad_rows": self.pad_rows}


def rank_batch(rollouts: Rollouts, selection: Selection, rank: int, world: int,
               device: torch.device | str = "cpu") -> KeptBatch:
    """This rank's kept rollouts and their advantages [K], in row order.

    ``selection`` covers all ranks ([P, n]); ``rollouts`` holds this rank's P/world groups.
    With batch-level selection ranks keep different numbers, so every rank's batch is
    padded to the busiest rank's size with copies of its first rollout whose completion
    mask is zero and advantage 0: they add nothing to the loss or its normaliser, and every
    rank makes the same number of forward and backward passes (DDP and FSDP need that)."""
    keep, advantages = selection.keep.cpu(), selection.advantages.cpu()  # [P, n] each
    P, n = keep.shape
    per = P // world
    counts = keep.view(world, per * n).sum(1)  # [W] rows kept per rank
    mine = slice(rank * per, (rank + 1) * per)
    rows = keep[mine].flatten().nonzero().flatten()  # [K_r] of this rank's per*n
    adv = advantages[mine][keep[mine]]  # [K_r]
    pad = int(counts.max()) - len(rows)
    batch = rollouts.select(torch.cat([rows, rows.new_zeros(pad)]))  # [K]
    if pad:  # the copies train nothing (this batch is a new one: the rollouts keep theirs)
        batch.completion_mask[len(rows):] = 0
    return KeptBatch(batch, torch.cat([adv, adv.new_zeros(pad)]).to(device),
                     kept=int(counts.sum()), pad_rows=int(world * counts.max() - counts.sum()))


@dataclass(frozen=True)
class Sampled:
    """What a step's sampling phase hands to its update (``Trainer.sample``)."""

    kept: KeptBatch  # this rank's kept rollouts and their advantages
    metrics: dict[str, float]  # rollout/reward_mean and the select/ metrics
    lengths: Tensor  # [P_r, n] this rank's completion lengths (all n)
    scores: Scores  # this rank's rewards and their counts (errors, truncated, ...)
    signal: bool  # something to learn from: a kept rollout with a non-zero advantage (or
    # a KL term to follow); the same on every rank (selection sees all P groups)
