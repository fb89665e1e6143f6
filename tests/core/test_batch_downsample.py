import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pods.core.batch_downsample import allocate, batch_max_variance, variance_mass
from pods.core.downsample import downsample

POOL = [-2.0, -0.5, 0.0, 0.0, 0.25, 1.0, 1.0, 3.5]  # ties common, as in test_downsample


def ssd(values) -> float:
    """Sum of squared deviations from the mean: the variance mass of one kept set."""
    v = np.asarray(values, dtype=np.float64)
    return float(((v - v.mean()) ** 2).sum()) if len(v) else 0.0


def brute_force_best(rows, budget: int, max_k: int) -> float:
    """max J over every choice of subsets S_g (|S_g| in {0} u [2, max_k], sum <= budget)."""
    options = []  # per group: (size, mass) of every allowed subset
    for row in rows:
        sizes = [0] + list(range(2, max_k + 1))
        options.append([(k, ssd(c)) for k in sizes for c in itertools.combinations(row, k)])
    return max(sum(mass for _, mass in pick) for pick in itertools.product(*options)
               if sum(k for k, _ in pick) <= budget)


def mass_of(rewards: torch.Tensor, keep: torch.Tensor) -> float:
    return sum(ssd(rewards[g][keep[g]].tolist()) for g in range(rewards.shape[0]))


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n=st.integers(2, 5), P=st.integers(1, 3))
def test_matches_brute_force(data, n, P):
    rows = data.draw(st.lists(st.lists(st.sampled_from(POOL), min_size=n, max_size=n),
                              min_size=P, max_size=P))
    budget = data.draw(st.integers(0, P * n))
    max_k = data.draw(st.integers(2, n))
    rewards = torch.tensor(rows)
    keep = batch_max_variance(rewards, budget, max_k)
    sizes = keep.sum(1)
    assert int(sizes.sum()) <= budget
    assert all(k == 0 or 2 <= k <= max_k for k in sizes.tolist())
    assert mass_of(rewards, keep) == pytest.approx(brute_force_best(rows, budget, max_k),
                                                   abs=1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_variance_mass_matches_brute_force_for_every_size(seed):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(3, 7, generator=g)
    mass, _ = variance_mass(rewards, 7)
    for p in range(3):
        assert mass[p, 0] == 0 and mass[p, 1] == -torch.inf
        for k in range(2, 8):
            best = max(ssd(c) for c in itertools.combinations(rewards[p].tolist(), k))
            assert mass[p, k].item() == pytest.approx(best, abs=1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_one_group_with_budget_m_is_max_variance(seed):
    """P = 1, budget m: the group keeps m, a subset as good as max_variance's."""
    rewards = torch.randint(0, 3, (1, 12), generator=torch.Generator().manual_seed(seed))
    rewards = rewards.float() + torch.tensor([[0.0] * 11 + [0.5]])  # never all equal
    keep = batch_max_variance(rewards, 5)
    assert int(keep.sum()) == 5
    idx = downsample(rewards, 5, "max_variance")
    assert mass_of(rewards, keep) == pytest.approx(ssd(rewards[0, idx[0]].tolist()))


def test_worked_example_binary_rewards():
    """Binary rewards: a kept group with a ones and b zeros has mass ab/(a+b).
    group 0: 3 ones of 8 -> f(2)=1/2, f(4)=1, f(6)=3*3/6=1.5, f(8)=3*5/8=1.875
    group 1: all ones    -> 0 whatever it keeps: keeps nothing
    group 2: 1 one of 8  -> f(k) = (k-1)/k: 1/2, 2/3, ...
    budget 8: g0 keeps 6 (1.5) + g2 keeps 2 (0.5) = 2.0 beats g0 8 (1.875) and
    g0 4 + g2 2 + ... ; the variance-mass optimum, found by brute force over sizes."""
    rewards = torch.tensor([[0, 0, 1, 1, 1, 0, 0, 0], [1] * 8, [0, 1, 0, 0, 0, 0, 0, 0]],
                           dtype=torch.float32)
    keep = batch_max_variance(rewards, 8)
    assert keep.sum(1).tolist() == [6, 0, 2]
    assert rewards[0][keep[0]].sum() == 3  # all three ones and three zeros
    assert rewards[2][keep[2]].tolist() == [0.0, 1.0]  # the one success and one failure
    assert mass_of(rewards, keep) == pytest.approx(2.0)
    # a larger budget goes to the groups with contrast only, up to everything they have
    assert batch_max_variance(rewards, 100).sum(1).tolist() == [8, 0, 8]
    # max_per_group caps each group's share
    assert batch_max_variance(rewards, 100, max_per_group=4).sum(1).tolist() == [4, 0, 4]


def test_groups_without_variance_keep_nothing():
    rewards = torch.tensor([[0.5] * 6, [0.0] * 6, [1.0] * 6])
    assert not batch_max_variance(rewards, 18).any()


def test_allocation_is_exact_where_sizes_interact():
    """Balanced binary groups: f(2) = .5, f(3) = .667, f(4) = 1, not concave. With budget 6
    the best is 4 + 2 (1.5), not equal shares 3 + 3 (1.333); with budget 3, one group keeps
    3 (.667) rather than 2 (.5)."""
    mass = torch.tensor([[0, -np.inf, 0.5, 2 / 3, 1.0]] * 2, dtype=torch.float64)
    assert sorted(allocate(mass, 6).tolist()) == [2, 4]
    assert allocate(mass, 3).tolist() == [3, 0]  # ties: the smaller k for the later group


def test_deterministic_and_fills_the_budget():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 2, (16, 32), generator=g).float()
    a = batch_max_variance(rewards, 16 * 8)
    b = batch_max_variance(rewards.clone(), 16 * 8)
    assert torch.equal(a, b) and int(a.sum()) == 128


@pytest.mark.parametrize(("rewards", "budget", "max_k", "message"), [
    (torch.zeros(2, 4), -1, None, "budget must be a number of rollouts >= 0"),
    (torch.zeros(2, 4), 4, 5, "max_per_group=5 must be between 2 and n=4"),
    (torch.zeros(2, 4), 4, 1, "max_per_group=1 must be between 2 and n=4"),
    (torch.zeros(4), 4, None, r"rewards must have shape \[P, n\]"),
    (torch.tensor([[0.0, float("nan")]]), 2, None, r"NaN or infinite values in group\(s\) 0"),
])
def test_errors(rewards, budget, max_k, message):
    with pytest.raises(ValueError, match=message):
        batch_max_variance(rewards, budget, max_k)
