import dataclasses

import pytest
import torch

from pods.config import from_dict
from pods.core.selection import GroupStats, Selection, SelectionSpec
from pods.rollout import Rollouts
from pods.train.selection import KeptBatch, rank_batch, selection_spec


def rollouts(rows: int, width: int = 3) -> Rollouts:
    """Rollouts whose prompt id is the row number, completions of length 1 + row % width."""
    ids = torch.arange(rows).unsqueeze(1)
    mask = (torch.arange(width).unsqueeze(0) <= (ids % width)).long()  # [rows, width]
    return Rollouts(ids, torch.ones_like(ids), ids.expand(rows, width).clone(), mask,
                    [str(i) for i in range(rows)], None)


def selection(keep: torch.Tensor, advantages: torch.Tensor) -> Selection:
    return Selection(keep, advantages, GroupStats.of(torch.zeros(keep.shape), keep))


def test_rank_batch_pads_every_rank_to_the_busiest():
    """2 ranks of 2 groups (n = 3): rank 0 keeps 3 rows, rank 1 keeps 1; rank 1's batch is
    padded with 2 copies of its first rollout, masked out, advantage 0."""
    keep = torch.tensor([[1, 0, 1], [0, 1, 0], [0, 0, 0], [0, 0, 1]], dtype=torch.bool)
    chosen = selection(keep, torch.arange(12, dtype=torch.float32).view(4, 3) * keep)
    zero = rank_batch(rollouts(6), chosen, rank=0, world=2)
    assert zero.rows.prompt_ids.flatten().tolist() == [0, 2, 4]
    assert zero.advantages.tolist() == [0, 2, 4]
    mine = rollouts(6)
    one = rank_batch(mine, chosen, rank=1, world=2)
    assert one.rows.prompt_ids.flatten().tolist() == [5, 0, 0]
    assert one.advantages.tolist() == [11, 0, 0]
    assert one.rows.completion_mask.sum(1).tolist() == [3, 0, 0]  # row 5: 1 + 5 % 3 tokens
    assert one.rows.texts == ["5", "0", "0"]
    assert mine.completion_mask[0].sum() == 1  # the padding's copy: the rollouts keep theirs
    # counted once, the same on every rank: 4 kept over the ranks, 2 padding rows (rank 1)
    assert (zero.kept, zero.pad_rows) == (one.kept, one.pad_rows) == (4, 2)
    assert zero.metrics == one.metrics == {"select/pad_rows": 2}
    alone = rank_batch(rollouts(12), chosen, rank=0, world=1)  # one process: no pad
    assert alone.rows.prompt_ids.flatten().tolist() == [0, 2, 4, 11]
    assert (alone.kept, alone.pad_rows) == (4, 0) and alone.metrics == {"select/pad_rows": 0}


def test_the_kept_batch_is_frozen_with_advantages_on_the_device():
    keep = torch.tensor([[1, 0, 1]], dtype=torch.bool)
    kept = rank_batch(rollouts(3), selection(keep, torch.tensor([[1.0, 0, -1]])), 0, 1,
                      torch.device("meta"))  # a device that is not the selection's
    assert kept.advantages.device.type == "meta" and kept.advantages.shape == (2,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        kept.advantages = torch.zeros(2)
    assert isinstance(kept, KeptBatch)


def test_the_spec_comes_from_the_selection_group():
    config = from_dict({"n": 8, "m": 4, "selection": "batch", "max_kept_per_group": 6,
                        "adv_scale": "none"})
    assert selection_spec(config.selection) == SelectionSpec(
        m=4, rule="max_variance", scope="batch", max_per_group=6, adv_scale="none")
    assert selection_spec(from_dict({}).selection) == SelectionSpec(m=16)
    ga = from_dict({"n": 8, "m": 8, "adv_group_size": 4}).selection
    assert selection_spec(ga) == SelectionSpec(m=8, adv_group=4)
