import math

import pytest
import torch

from pods.core.advantages import group_advantages, masked_group_advantages


def test_group_scale_worked_numbers():
    # group [1, 0, 0, 1]: mean 0.5; unbiased std = sqrt(4 * 0.25 / 3) = sqrt(1/3) = 0.57735
    a = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]]))
    d = math.sqrt(1 / 3) + 1e-4
    torch.testing.assert_close(a, torch.tensor([[0.5 / d, -0.5 / d, -0.5 / d, 0.5 / d]]))


def test_population_std_and_no_scaling():
    r = torch.tensor([[2.0, 0.0, 1.0]])  # mean 1; population std sqrt(2/3) = 0.81650
    d = math.sqrt(2 / 3) + 1e-4
    a = group_advantages(r, std_correction=0)
    torch.testing.assert_close(a, torch.tensor([[1 / d, -1 / d, 0.0]]))
    # Dr. GRPO: centred only
    torch.testing.assert_close(group_advantages(r, scale="none"), torch.tensor([[1.0, -1.0, 0.0]]))


def test_batch_scale_uses_one_std():
    r = torch.tensor([[1.0, 0.0], [4.0, 2.0]])
    # centred [[.5, -.5], [1, -1]]; std over all four rewards 1, 0, 4, 2 (mean 1.75):
    # unbiased var = (0.5625 + 3.0625 + 5.0625 + 0.0625) / 3 = 2.9167, std 1.70783
    d = math.sqrt(8.75 / 3) + 1e-4
    a = group_advantages(r, scale="batch")
    torch.testing.assert_close(a, torch.tensor([[0.5 / d, -0.5 / d], [1 / d, -1 / d]]))


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_equal_rewards_give_exact_zero(scale):
    # 0.1 * 3 / 3 != 0.1 in floating point: the zero must be forced, not computed
    r = torch.tensor([[0.1, 0.1, 0.1], [1.0, 0.0, 1.0], [7.3, 7.3, 7.3]])
    a = group_advantages(r, scale=scale)
    assert torch.all(a[0] == 0) and torch.all(a[2] == 0) and torch.all(a[1] != 0)
    assert torch.all(group_advantages(torch.tensor([[5.0], [2.0]]), scale=scale) == 0)  # m = 1


def test_advantages_sum_to_zero_per_group():
    r = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(group_advantages(r).sum(1), torch.zeros(64), atol=1e-5, rtol=0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(scale="global"), "group, batch, none"),
    (dict(std_correction=2), "std_correction"),
])
def test_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        group_advantages(torch.ones(2, 3), **kwargs)


def test_rejects_wrong_shape():
    with pytest.raises(ValueError, match=r"\[P, m\]"):
        group_advantages(torch.ones(3))


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("correction", [0, 1])
def test_masked_advantages_equal_those_of_each_groups_kept_rollouts(scale, correction):
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 3, (6, 8), generator=g).float()
    rewards[1] = 2.0  # a group without variance
    keep = torch.rand(6, 8, generator=g) < 0.5
    keep[0] = False  # keeps nothing
    keep[2] = torch.arange(8) == 3  # keeps one
    got = masked_group_advantages(rewards, keep, scale=scale, std_correction=correction)
    assert (got[~keep] == 0).all()
    if scale == "batch":  # one std over every kept reward: GRPO over all groups at once
        kept = rewards[keep]
        std = kept.std(correction=correction)
    for p in range(6):
        row = rewards[p][keep[p]].unsqueeze(0)  # [1, k]
        if row.shape[1] == 0:
            continue
        want = group_advantages(row, scale="none" if scale == "batch" else scale,
                                std_correction=correction)[0]
        if scale == "batch":
            want = want / (std + 1e-4)
        torch.testing.assert_close(got[p][keep[p]], want, rtol=1e-5, atol=1e-6)
    assert (got[1] == 0).all() and (got[2] == 0).all()  # no variance: exact zeros


def test_masked_advantages_reject_mismatched_shapes():
    with pytest.raises(ValueError, match=r"rewards and keep must both have shape \[P, n\]"):
        masked_group_advantages(torch.zeros(2, 4), torch.ones(2, 3, dtype=torch.bool))
