import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pods.core.downsample import RULES, _rank_order, downsample


def brute_force_max_variance(row: list[float], m: int) -> float:
    """Largest population variance over every size-m subset of one group."""
    return max(float(np.var(np.array(c, dtype=np.float64)))
               for c in itertools.combinations(row, m))


def subset_variance(rewards: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return rewards.double().gather(1, idx).var(dim=1, correction=0)  # [P]


# Reward values drawn from a small pool so that ties are common; negative and fractional.
POOL = [-2.0, -0.5, 0.0, 0.0, 0.25, 1.0, 1.0, 3.5]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(1, 9), P=st.integers(1, 4))
def test_max_variance_matches_brute_force(data, n, P):
    m = data.draw(st.integers(1, n))
    rows = data.draw(st.lists(st.lists(st.sampled_from(POOL), min_size=n, max_size=n),
                              min_size=P, max_size=P))
    rewards = torch.tensor(rows)
    idx = downsample(rewards, m, "max_variance")
    got = subset_variance(rewards, idx)
    for p in range(P):
        assert got[p].item() == pytest.approx(brute_force_max_variance(rows[p], m), abs=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_max_variance_matches_brute_force_continuous(seed):
    g = torch.Generator().manual_seed(seed)
    n = 10
    rewards = torch.randn(8, n, generator=g) * 5 + 3
    for m in range(1, n + 1):
        got = subset_variance(rewards, downsample(rewards, m))
        want = [brute_force_max_variance(r.tolist(), m) for r in rewards.double()]
        torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))


def test_max_variance_binary_rewards_balance_ones_and_zeros():
    g = torch.Generator().manual_seed(0)
    n, m = 12, 6
    rewards = (torch.rand(500, n, generator=g) < torch.rand(500, 1, generator=g)).float()
    ones = rewards.gather(1, downsample(rewards, m)).sum(1)  # [P] kept ones
    c = rewards.sum(1)  # [P] ones in the group
    lowest = (m - (n - c)).clamp(min=0)  # fewest ones any size-m subset holds
    highest = c.clamp(max=m)  # most ones any size-m subset holds
    assert torch.equal(ones, torch.tensor(m / 2).clamp(lowest, highest))  # m/2 when allowed


def test_max_variance_worked_example():
    # sorted: 0(c1) 0(c2) 0.5(c5) 1(c0) 1(c3) 1(c4); m=3 candidates k=0..3
    # k=0 {0,0,.5} var 1/18; k=1 {0,0,1} 2/9; k=2 {0,1,1} 2/9; k=3 {1,1,1} 0
    # equal best at k=1 and k=2 -> smallest k: the top reward (last tied column, c4) + c1, c2
    idx = downsample(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.5]), 3)
    assert idx.tolist() == [1, 2, 4]


def test_max_variance_large_offset_is_exact():
    base = torch.tensor([[0.0, 1e-3, 2e-3, 5e-3, 1e-2, 3e-2]], dtype=torch.float64)
    idx = downsample(base, 3)
    assert torch.equal(downsample(base + 1e6, 3), idx)  # shift-invariant, no cancellation
    got = subset_variance(base, idx).item()
    assert got == pytest.approx(brute_force_max_variance(base[0].tolist(), 3), rel=1e-12)


@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("m", [1, 3, 7, 8])
def test_every_rule_shape_distinct_sorted(rule, m):
    g = torch.Generator().manual_seed(1)
    rewards = torch.randint(0, 3, (16, 8), generator=g).float()
    lengths = torch.randint(0, 5, (16, 8), generator=g)  # ties and zero lengths
    idx = downsample(rewards, m, rule, generator=g, lengths=lengths)
    assert idx.dtype == torch.long and idx.shape == (16, m)
    assert torch.all((idx >= 0) & (idx < 8))
    assert torch.all(idx[:, 1:] > idx[:, :-1])  # strictly ascending => distinct


@pytest.mark.parametrize("rule", sorted(RULES))
def test_m_equals_n_keeps_everything(rule):
    idx = downsample(torch.randn(3, 5), 5, rule, lengths=torch.ones(3, 5))
    assert idx.tolist() == [[0, 1, 2, 3, 4]] * 3


@pytest.mark.parametrize("rule", sorted(set(RULES) - {"random"}))
def test_deterministic_and_row_independent(rule):
    g = torch.Generator().manual_seed(2)
    rewards = torch.randint(0, 4, (32, 10), generator=g).float()
    lengths = torch.randint(1, 6, (32, 10), generator=g)
    idx = downsample(rewards, 4, rule, lengths=lengths)
    assert torch.equal(idx, downsample(rewards.clone(), 4, rule, lengths=lengths.clone()))
    for p in range(32):  # batching changes nothing: each row alone gives the same answer
        assert torch.equal(downsample(rewards[p], 4, rule, lengths=lengths[p]), idx[p])


def test_max_and_min_reward_keep_extremes():
    rewards = torch.tensor([[3.0, -1.0, 7.0, 0.5, 7.0, 2.0]])
    assert downsample(rewards, 2, "max_reward").tolist() == [[2, 4]]
    assert downsample(rewards, 3, "max_reward").tolist() == [[0, 2, 4]]
    assert downsample(rewards, 2, "min_reward").tolist() == [[1, 3]]
    # ties: max_reward prefers later columns, min_reward earlier ones
    assert downsample(torch.zeros(1, 4), 2, "max_reward").tolist() == [[2, 3]]
    assert downsample(torch.zeros(1, 4), 2, "min_reward").tolist() == [[0, 1]]


def test_percentile_definition():
    # rewards sorted ascending by column 4,2,0,3,1 (values 0..4 scrambled)
    rewards = torch.tensor([[2.0, 4.0, 1.0, 3.0, 0.0]])
    # n=5, m=3: ranks floor(j*4/2 + 1/2) = 0, 2, 4 -> columns 4, 0, 1
    assert downsample(rewards, 3, "percentile").tolist() == [[0, 1, 4]]
    # m=1: median rank floor(4/2) = 2 -> column 0
    assert downsample(rewards, 1, "percentile").tolist() == [[0]]
    # n=10, m=4: ranks floor(j*9/3 + 1/2) = 0, 3, 6, 9
    r = torch.arange(10.0).flip(0).unsqueeze(0)  # rank k sits at column 9-k
    assert downsample(r, 4, "percentile").tolist() == [[0, 3, 6, 9]]
    # n=8, m=3: ranks floor(j*7/2 + 1/2) = 0, 4, 7 (3.5 rounds half up)
    assert downsample(torch.arange(8.0), 3, "percentile").tolist() == [0, 4, 7]


def test_random_is_reproducible_and_uniform():
    rewards = torch.zeros(2000, 8)
    a = downsample(rewards, 3, "random", generator=torch.Generator().manual_seed(7))
    b = downsample(rewards, 3, "random", generator=torch.Generator().manual_seed(7))
    c = downsample(rewards, 3, "random", generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)
    freq = torch.bincount(a.flatten(), minlength=8).float() / 2000  # expect 3/8 each
    assert torch.all((freq - 3 / 8).abs() < 0.04)


def test_one_group_lists_and_numpy():
    # ranks: 0(c0) 0(c2) .5(c4) 1(c1) 1(c3); k=1 keeps the lowest (c0) and the highest (c3)
    assert downsample([0.0, 1.0, 0.0, 1.0, 0.5], 2).tolist() == [0, 3]
    # row 0 ranks 0(c1) 1(c0) 1(c2) 1(c3): k=0 {c1, c0} and k=1 {c1, c3} tie -> k=0
    # row 1 ranks 0(c0) 0(c1) 0(c2) 1(c3): k=1 {c0, c3} is the only non-zero variance
    idx = downsample(np.array([[1, 0, 1, 1], [0, 0, 0, 1]]), 2)  # integer array is converted
    assert idx.tolist() == [[0, 1], [0, 3]]


def test_custom_rule_callable_and_registered():
    def first_m(rewards, m, generator):
        return torch.arange(m).flip(0).expand(rewards.shape[0], m)  # unsorted on purpose

    assert downsample(torch.randn(2, 5), 3, first_m).tolist() == [[0, 1, 2]] * 2
    RULES["first_m"] = first_m
    try:
        assert downsample(torch.randn(5), 2, "first_m").tolist() == [0, 1]
    finally:
        del RULES["first_m"]


@pytest.mark.parametrize("bad, message", [
    (lambda r, m, g: torch.zeros(r.shape[0], m + 1, dtype=torch.long), "shape"),
    (lambda r, m, g: torch.zeros(r.shape[0], m, dtype=torch.long), "repeated"),
    (lambda r, m, g: torch.full((r.shape[0], m), 99).cumsum(1), "outside"),
    (lambda r, m, g: torch.rand(r.shape[0], m), "integer"),
])
def test_custom_rule_bad_output(bad, message):
    with pytest.raises(ValueError, match=message):
        downsample(torch.randn(2, 6), 3, bad)


@pytest.mark.parametrize("rewards, m, rule, message", [
    (torch.randn(2, 4), 0, "max_variance", "at least 1"),
    (torch.randn(2, 4), -3, "max_variance", "at least 1"),
    (torch.randn(2, 4), 5, "max_variance", "larger than n=4"),
    (torch.randn(2, 4), 2.0, "max_variance", "integer"),
    (torch.randn(2, 3, 4), 2, "max_variance", r"shape \[P, n\].*\(2, 3, 4\)"),
    (torch.tensor(1.0), 1, "max_variance", "0 dimensions"),
    (torch.randn(2, 4), 2, "max_varience", "max_variance, min_reward, percentile, random"),
])
def test_errors(rewards, m, rule, message):
    with pytest.raises(ValueError, match=message):
        downsample(rewards, m, rule)


@pytest.mark.parametrize("bad_value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_rewards_name_the_group(bad_value):
    rewards = torch.zeros(5, 4)
    rewards[3, 1] = bad_value
    with pytest.raises(ValueError, match=r"group\(s\) 3 "):
        downsample(rewards, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_rank_order_is_a_stable_sort(dtype):
    g = torch.Generator().manual_seed(3)
    r = torch.cat([torch.randn(50, 33, generator=g) * 1e3,
                   torch.randint(-2, 3, (50, 33), generator=g).float(),
                   torch.tensor([[0.0, -0.0, 1e-40, -1e-40, float("1e38")] * 6 + [0.0] * 3])])
    r = r.to(dtype)
    values, order = _rank_order(r)
    want_values, want_order = torch.sort(r, dim=1, stable=True)
    assert torch.equal(order, want_order) and torch.equal(values, want_values)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_no_groups(rule):
    assert downsample(torch.zeros(0, 6), 2, rule, lengths=torch.zeros(0, 6)).shape == (0, 2)


def test_huge_finite_float64_rewards_are_accepted():
    # their sum overflows to inf: the fast check must not mistake that for a bad reward
    rewards = torch.tensor([[1e308, 1e308, -1e308, 0.0]], dtype=torch.float64)
    assert downsample(rewards, 2, "max_reward").tolist() == [[0, 1]]


def reference_top(keys: list[float], m: int) -> list[int]:
    """The m columns of largest key, ties to the lower column, ascending."""
    return sorted(sorted(range(len(keys)), key=lambda i: (-keys[i], i))[:m])


@settings(max_examples=200, deadline=None)
@given(data=st.data(), n=st.integers(1, 8), P=st.integers(1, 3))
def test_peer_rules_match_their_definitions(data, n, P):
    m = data.draw(st.integers(1, n))
    rows = data.draw(st.lists(st.lists(st.sampled_from(POOL), min_size=n, max_size=n),
                              min_size=P, max_size=P))
    lengths = data.draw(st.lists(st.lists(st.integers(0, 5), min_size=n, max_size=n),
                                 min_size=P, max_size=P))
    rewards, lens = torch.tensor(rows), torch.tensor(lengths)
    got = {rule: downsample(rewards, m, rule, lengths=lens).tolist()
           for rule in ("max_abs_advantage", "shortest", "reward_per_token")}
    for p in range(P):
        mean = sum(rows[p]) / n
        deviation = [abs(r - mean) for r in rows[p]]
        if m < n:
            assert got["max_abs_advantage"][p] == reference_top(deviation, m)
            assert got["shortest"][p] == reference_top([-x for x in lengths[p]], m)
            per_token = [r / max(x, 1) for r, x in zip(rows[p], lengths[p], strict=True)]
            assert got["reward_per_token"][p] == reference_top(per_token, m)
        # exact: no other subset has a larger total |advantage| (CPPO's criterion)
        kept = sum(deviation[i] for i in got["max_abs_advantage"][p])
        best = max(sum(c) for c in itertools.combinations(deviation, m))
        assert kept == pytest.approx(best, abs=1e-9)


def test_peer_rules_worked_example():
    rewards = torch.tensor([[0.0, 1.0, 1.0, 1.0, 0.5]])  # mean 0.7
    lengths = torch.tensor([[10, 3, 30, 3, 1]])
    # |r - .7| = .7, .3, .3, .3, .2: the .7, then the first of the tied .3s
    assert downsample(rewards, 2, "max_abs_advantage").tolist() == [[0, 1]]
    assert downsample(rewards, 2, "shortest", lengths=lengths).tolist() == [[1, 4]]  # 1, then 3
    assert downsample(rewards, 2, "reward_per_token", lengths=lengths).tolist() == [[1, 4]]


def test_length_rules_need_lengths_and_custom_rules_can_ask():
    with pytest.raises(ValueError, match="rule 'shortest' needs 'lengths' of each rollout: "
                       r"pass lengths=\[P, n\]"):
        downsample(torch.zeros(2, 4), 2, "shortest")
    with pytest.raises(ValueError, match=r"lengths has shape \(2, 3\), the rewards \(2, 4\)"):
        downsample(torch.zeros(2, 4), 2, "reward_per_token", lengths=torch.ones(2, 3))
    with pytest.raises(ValueError, match="lengths contains NaN"):
        downsample(torch.zeros(1, 4), 2, "shortest", lengths=torch.tensor([1.0, math.nan, 2, 3]))

    def longest(rewards, m, generator, *, lengths):  # a user rule asking for lengths
        return lengths.topk(m, dim=1).indices

    longest.needs = ("lengths",)
    lengths = torch.tensor([[5, 1, 9, 2]])
    assert downsample(torch.zeros(1, 4), 2, longest, lengths=lengths).tolist() == [[0, 2]]
    assert downsample(torch.zeros(1, 4), 2, "max_reward", lengths=lengths).tolist() == [[2, 3]]


def test_lengths_must_be_token_counts():
    with pytest.raises(ValueError, match=r"lengths must be token counts \(>= 0\)"):
        downsample(torch.zeros(1, 4), 2, "shortest", lengths=torch.tensor([1, -1, 2, 3]))
