"""pods.core.selection: one call from rewards [P, n] to the kept rollouts, their advantages
and the select/ metrics, with worked numbers."""

import dataclasses
import math

import pytest
import torch

from pods.core.advantages import group_advantages
from pods.core.downsample import check_rule, downsample
from pods.core.selection import GroupStats, Selection, SelectionSpec, select

# P = 3 groups of n = 4; max_variance keeps m = 2 of each
REWARDS = torch.tensor([[0.0, 1.0, 0.5, 1.0],   # sorted 0, .5, 1, 1 (cols 0, 2, 1, 3):
                                                # 1 lowest + 1 highest = cols 0, 3, var .25
                        [2.0, 2.0, 2.0, 2.0],   # flat: every pair scores 0, the 2 lowest
                        [3.0, 0.0, 0.0, 1.0]])  # sorted 0, 0, 1, 3: lowest + highest = cols 1, 0
LENGTHS = torch.tensor([[1, 2, 3, 4], [5, 5, 5, 5], [6, 8, 1, 1]])


def test_worked_example_keep_advantages_and_metrics():
    chosen = select(REWARDS, {}, SelectionSpec(m=2, adv_scale="none"), None, LENGTHS)
    assert chosen.keep.int().tolist() == [[1, 0, 0, 1], [1, 1, 0, 0], [1, 1, 0, 0]]
    assert chosen.columns().tolist() == [[0, 3], [0, 1], [0, 1]]
    # scale none: kept reward minus the kept mean; g0 [0, 1] mean .5, g2 [3, 0] mean 1.5
    assert chosen.advantages.tolist() == [[-0.5, 0, 0, 0.5], [0, 0, 0, 0], [1.5, -1.5, 0, 0]]
    s = chosen.metrics
    assert s["select/kept"] == 6 and s["select/groups_kept"] == 1.0
    assert s["select/reward_mean"] == pytest.approx(8 / 6)  # 0 + 1 + 2 + 2 + 3 + 0
    # all n: g0 mean .625, squares .390625 + .140625 + .015625 + .140625 = .6875 -> .171875;
    # g1 0; g2 mean 1, squares 4 + 1 + 1 + 0 -> 1.5
    assert s["select/var_full"] == pytest.approx((0.171875 + 0 + 1.5) / 3)
    assert s["select/var_kept"] == pytest.approx((0.25 + 0 + 2.25) / 3)  # [0,1] [2,2] [3,0]
    assert s["select/zero_var_frac_full"] == s["select/zero_var_frac"] == pytest.approx(1 / 3)
    assert s["select/completion_len"] == pytest.approx((1 + 4 + 5 + 5 + 6 + 8) / 6)
    assert len(s) == 8


def test_group_scale_divides_by_the_kept_std():
    chosen = select(REWARDS, {}, SelectionSpec(m=2))  # adv_scale group
    # g0 kept [0, 1]: unbiased std sqrt(.5); g2 kept [3, 0]: std sqrt(4.5); eps 1e-4
    g0, g2 = 0.5 / (math.sqrt(0.5) + 1e-4), 1.5 / (math.sqrt(4.5) + 1e-4)
    torch.testing.assert_close(chosen.advantages, torch.tensor(
        [[-g0, 0, 0, g0], [0, 0, 0, 0], [g2, -g2, 0, 0]]))
    assert "select/completion_len" not in chosen.metrics  # no lengths given


def test_group_scope_is_downsample_then_group_advantages():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 3, (5, 8), generator=g).float()
    lengths = torch.randint(1, 9, (5, 8), generator=g)
    for rule in ("max_variance", "percentile", "shortest"):
        chosen = select(rewards, {"lengths": lengths}, SelectionSpec(m=3, rule=rule))
        idx = downsample(rewards, 3, rule, lengths=lengths)  # [P, 3]
        assert torch.equal(chosen.columns(), idx)
        assert torch.equal(chosen.advantages.gather(1, idx),
                           group_advantages(rewards.gather(1, idx)))
        assert (chosen.advantages[~chosen.keep] == 0).all()


def test_random_rule_draws_from_the_generator():
    rewards = torch.zeros(4, 8)
    spec = SelectionSpec(m=3, rule="random")
    one, two = (select(rewards, {}, spec, torch.Generator().manual_seed(7)) for _ in range(2))
    assert torch.equal(one.keep, two.keep)
    other = select(rewards, {}, spec, torch.Generator().manual_seed(8))
    assert not torch.equal(one.keep, other.keep)


def test_batch_scope_keeps_p_times_m_at_most_and_no_flat_group():
    rewards = torch.tensor([[0, 1, 0, 1, 0, 1], [1] * 6, [0, 0, 0, 0, 0, 1]]).float()
    chosen = select(rewards, {}, SelectionSpec(m=2, scope="batch"))  # budget 3 * 2 = 6
    # mass 1.5 either way: 3 ones + 3 zeros of group 0 (9/6), or 4 of it (1) + group 2's
    # one success and a failure (.5); equal rows too, so the later group's smaller k wins
    assert chosen.keep.sum(1).tolist() == [6, 0, 0]
    torch.testing.assert_close(chosen.advantages[0], group_advantages(rewards[:1])[0])
    s = chosen.metrics
    assert s["select/groups_kept"] == pytest.approx(1 / 3) and s["select/kept"] == 6
    assert s["select/var_kept"] == 0.25 and s["select/zero_var_frac"] == 0.0  # g0 only
    assert s["select/reward_mean"] == 0.5
    with pytest.raises(ValueError, match="groups keep different numbers"):
        chosen.columns()


def test_metrics_of_a_ragged_keep_mask():
    """As the trainer logged them before selection was one function (selection_stats)."""
    rewards = torch.tensor([[0.0, 1.0, 1.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.0, 3.0]])
    keep = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)
    lengths = torch.tensor([[1, 2, 3, 4], [5, 5, 5, 5], [6, 8, 1, 1]])
    s = GroupStats.of(rewards, keep, lengths).metrics()
    assert s["select/kept"] == 5 and s["select/groups_kept"] == pytest.approx(2 / 3)
    assert s["select/reward_mean"] == pytest.approx(2 / 5)  # 0 + 1 + 1 + 0 + 0
    # kept [0, 1, 1]: var 2/9; kept [0, 0]: var 0 (flat) -> mean 1/9; zero-var 1 of 2 kept
    assert s["select/var_kept"] == pytest.approx(1 / 9)
    assert s["select/zero_var_frac"] == 0.5
    # all n: var .25, 0, 27/16 = 1.6875 -> mean 1.9375 / 3; one group of 3 flat
    assert s["select/var_full"] == pytest.approx((0.25 + 1.6875) / 3)
    assert s["select/zero_var_frac_full"] == pytest.approx(1 / 3)
    assert s["select/completion_len"] == pytest.approx((1 + 2 + 3 + 6 + 8) / 5)


def test_nothing_kept_gives_zeros_not_nans():
    stats = GroupStats.of(torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.bool),
                          torch.ones(2, 3))
    s = stats.metrics()
    assert (s["select/kept"], s["select/groups_kept"], s["select/reward_mean"]) == (0, 0.0, 0.0)
    assert (s["select/var_kept"], s["select/zero_var_frac"], s["select/completion_len"]) == \
        (0.0, 0.0, 0.0)
    assert s["select/zero_var_frac_full"] == 1.0


def test_stats_of_separate_calls_join_exactly():
    """Groups selected in two calls (different n) give the metrics of all groups together:
    means over groups and over kept rollouts, not a mean of the two calls' means."""
    wide = select(REWARDS, {}, SelectionSpec(m=2), None, LENGTHS)  # 3 groups of 4
    narrow = select(torch.tensor([[1.0, 0.0]]), {}, SelectionSpec(m=2), None,
                    torch.tensor([[2, 6]]))  # 1 group of 2, kept whole
    s = GroupStats.cat([wide.stats, narrow.stats]).metrics()
    assert s["select/kept"] == 8 and s["select/groups_kept"] == 1.0
    assert s["select/reward_mean"] == pytest.approx((8 + 1) / 8)
    assert s["select/var_full"] == pytest.approx((0.171875 + 0 + 1.5 + 0.25) / 4)
    assert s["select/var_kept"] == pytest.approx((0.25 + 0 + 2.25 + 0.25) / 4)
    assert s["select/zero_var_frac"] == pytest.approx(1 / 4)
    assert s["select/completion_len"] == pytest.approx((29 + 8) / 8)
    no_lengths = select(REWARDS, {}, SelectionSpec(m=2))
    assert "select/completion_len" not in GroupStats.cat([no_lengths.stats,
                                                          narrow.stats]).metrics()


def test_the_values_are_frozen():
    chosen = select(REWARDS, {}, SelectionSpec(m=2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        chosen.keep = None
    with pytest.raises(TypeError):
        chosen.metrics["select/kept"] = 0  # a read-only view
    with pytest.raises(dataclasses.FrozenInstanceError):
        SelectionSpec(m=2).m = 3
    assert isinstance(chosen, Selection)


@pytest.mark.parametrize("fields, message", [
    (dict(m=0), "m=0 must be a whole number of rollouts kept per group, at least 1"),
    (dict(m=True), "m=True must be a whole number"),
    (dict(m=2, rule="best"), "unknown rule 'best'; use one of max_abs_advantage, max_reward"),
    (dict(m=2, scope="prompt"), "unknown selection scope 'prompt'; use one of group, batch"),
    (dict(m=2, scope="batch", rule="random"), "use rule max_variance or scope group"),
    (dict(m=2, max_per_group=4), "max_per_group=4 needs scope batch"),
    (dict(m=2, scope="batch", max_per_group=1), "a whole number of at least 2"),
    (dict(m=2, adv_scale="global"), "unknown advantage scale 'global'; use one of group"),
    (dict(m=4, adv_group=1), "adv_group=1 needs scope group and a whole number of at least 2"),
    (dict(m=4, scope="batch", adv_group=2), "adv_group=2 needs scope group"),
])
def test_the_spec_says_what_to_change(fields, message):
    with pytest.raises(ValueError, match=message):
        SelectionSpec(**fields)


def test_advantage_blocks_are_the_official_grpo_ga():
    """adv_group=2 over n=4 (m=n): every rollout kept, each block of 2 in generation order
    normalised as its own group, as the paper's multi-GPU GRPO-GA does."""
    chosen = select(REWARDS, {}, SelectionSpec(m=4, adv_group=2, adv_scale="none"))
    assert chosen.keep.all()
    # blocks [0, 1] [.5, 1] | [2, 2] [2, 2] | [3, 0] [0, 1], each minus its own mean
    assert chosen.advantages.tolist() == [[-0.5, 0.5, -0.25, 0.25], [0, 0, 0, 0],
                                          [1.5, -1.5, -0.5, 0.5]]
    grouped = select(REWARDS, {}, SelectionSpec(m=4, adv_group=2)).advantages
    assert torch.equal(grouped, group_advantages(REWARDS.view(6, 2)).view(3, 4))
    whole = select(REWARDS, {}, SelectionSpec(m=4, adv_group=4)).advantages
    assert torch.equal(whole, select(REWARDS, {}, SelectionSpec(m=4)).advantages)
    with pytest.raises(ValueError, match="needs m = n \\(got m=2\\) and n a multiple of 2"):
        select(REWARDS, {}, SelectionSpec(m=2, adv_group=2))
    with pytest.raises(ValueError, match="n a multiple of 3"):
        select(REWARDS, {}, SelectionSpec(m=4, adv_group=3))


def test_bad_inputs_are_refused_before_any_work():
    with pytest.raises(ValueError, match="m=5 is larger than n=4"):
        select(REWARDS, {}, SelectionSpec(m=5))
    with pytest.raises(ValueError, match="m=5 is larger than n=4"):
        select(REWARDS, {}, SelectionSpec(m=5, scope="batch"))
    with pytest.raises(ValueError, match="lengths has shape"):
        select(REWARDS, {}, SelectionSpec(m=2), None, LENGTHS[:2])
    with pytest.raises(ValueError, match="needs 'lengths'"):
        select(REWARDS, {}, SelectionSpec(m=2, rule="shortest"))


def test_check_rule_is_the_one_rule_check():
    assert check_rule("max_variance").__name__ == "max_variance"
    assert check_rule(len) is len  # a callable is a rule
    with pytest.raises(ValueError) as error:
        check_rule("best", "pods_rule", callables=False)
    assert str(error.value) == (
        "unknown pods_rule 'best'; use one of max_abs_advantage, max_reward, max_variance, "
        "min_reward, percentile, random, reward_per_token, shortest.")
    with pytest.raises(ValueError, match="or pass a callable rule"):
        check_rule("best")
    with pytest.raises(ValueError, match="unknown rule"):
        check_rule(len, callables=False)  # a config's rule is a name
