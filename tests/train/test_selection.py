import pytest
import torch

from pods.core.advantages import group_advantages
from pods.core.downsample import downsample
from pods.rollout import Rollouts
from pods.train.selection import rank_batch, select, selection_stats


def rollouts(rows: int, width: int = 3) -> Rollouts:
    """Rollouts whose prompt id is the row number, completions of length 1 + row % width."""
    ids = torch.arange(rows).unsqueeze(1)
    mask = (torch.arange(width).unsqueeze(0) <= (ids % width)).long()  # [rows, width]
    return Rollouts(ids, torch.ones_like(ids), ids.expand(rows, width).clone(), mask,
                    [str(i) for i in range(rows)], None)


def test_group_scope_is_downsample_and_group_advantages():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 2, (4, 8), generator=g).float()
    keep, adv = select(rewards, 3, "max_variance")
    idx = downsample(rewards, 3, "max_variance")
    assert torch.equal(keep.nonzero()[:, 1].view(4, 3), idx)
    assert torch.equal(adv.gather(1, idx), group_advantages(rewards.gather(1, idx)))
    assert (adv[~keep] == 0).all()


def test_batch_scope_keeps_p_times_m_at_most_and_no_flat_group():
    rewards = torch.tensor([[0, 1, 0, 1, 0, 1], [1] * 6, [0, 0, 0, 0, 0, 1]]).float()
    keep, adv = select(rewards, 2, "max_variance", scope="batch")  # budget 3 * 2 = 6
    # mass 1.5 either way: 3 ones + 3 zeros of group 0 (9/6), or 4 of it (1) + group 2's
    # one success and a failure (.5); equal rows too, so the later group's smaller k wins
    assert keep.sum(1).tolist() == [6, 0, 0]
    torch.testing.assert_close(adv[0][keep[0]], group_advantages(rewards[:1])[0])
    with pytest.raises(ValueError, match="unknown selection scope 'prompt'"):
        select(rewards, 2, "max_variance", scope="prompt")


def test_rank_batch_pads_every_rank_to_the_busiest():
    """2 ranks of 2 groups (n = 3): rank 0 keeps 3 rows, rank 1 keeps 1; rank 1's batch is
    padded with 2 copies of its first rollout, masked out, advantage 0."""
    keep = torch.tensor([[1, 0, 1], [0, 1, 0], [0, 0, 0], [0, 0, 1]], dtype=torch.bool)
    adv = torch.arange(12, dtype=torch.float32).view(4, 3) * keep
    zero = rank_batch(rollouts(6), keep, adv, rank=0, world=2)
    assert zero.rows.prompt_ids.flatten().tolist() == [0, 2, 4]
    assert zero.advantages.tolist() == [0, 2, 4]
    one = rank_batch(rollouts(6), keep, adv, rank=1, world=2)
    assert one.rows.prompt_ids.flatten().tolist() == [5, 0, 0]
    assert one.advantages.tolist() == [11, 0, 0]
    assert one.rows.completion_mask.sum(1).tolist() == [3, 0, 0]  # row 5: 1 + 5 % 3 tokens
    assert one.rows.texts == ["5", "0", "0"]
    # counted once, the same on every rank: 4 kept over the ranks, 2 padding rows (rank 1)
    assert (zero.kept, zero.pad_rows) == (one.kept, one.pad_rows) == (4, 2)
    alone = rank_batch(rollouts(12), keep, adv, rank=0, world=1)  # one process: no pad
    assert alone.rows.prompt_ids.flatten().tolist() == [0, 2, 4, 11]
    assert (alone.kept, alone.pad_rows) == (4, 0)


def test_selection_stats_worked_numbers():
    rewards = torch.tensor([[0.0, 1.0, 1.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.0, 3.0]])
    keep = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)
    lengths = torch.tensor([[1, 2, 3, 4], [5, 5, 5, 5], [6, 8, 1, 1]])
    s = selection_stats(rewards, keep, lengths)
    assert s["select/kept"] == 5 and s["select/groups_kept"] == pytest.approx(2 / 3)
    assert s["select/reward_mean"] == pytest.approx(2 / 5)  # 0 + 1 + 1 + 0 + 0
    # kept [0, 1, 1]: var 2/9; kept [0, 0]: var 0 (flat) -> mean 1/9; zero-var 1 of 2 kept
    assert s["select/var_kept"] == pytest.approx(1 / 9)
    assert s["select/zero_var_frac"] == 0.5
    # all n: var .25, 0, 27/16 = 1.6875 -> mean 1.9375 / 3; one group of 3 flat
    assert s["select/var_full"] == pytest.approx((0.25 + 1.6875) / 3)
    assert s["select/zero_var_frac_full"] == pytest.approx(1 / 3)
    assert s["select/completion_len"] == pytest.approx((1 + 2 + 3 + 6 + 8) / 5)
    assert s["select/pad_rows"] == 0
    assert selection_stats(rewards, keep, lengths, pad_rows=3)["select/pad_rows"] == 3
