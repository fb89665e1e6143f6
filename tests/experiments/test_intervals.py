"""The interval math on plain arrays: step functions, the degenerate ratios, the probability
of improvement, the bootstrap's single-seed and unbounded cases, verdicts."""

import numpy as np
import pytest

from pods.experiments.intervals import (
    interval,
    p_better,
    resampled_speedup,
    sign_flip_p,
    speedup,
    step_functions,
    to_peak,
    verdict,
)


def test_step_functions_hold_between_evals_and_stop_after_the_last():
    # run 0 evaluates at 0, 10 (twice: the later record holds), 20; run 1 at 5 and 15
    seeds = step_functions([([0, 10, 10, 20], [.1, .2, .3, .4]), ([15, 5], [.6, .5])])
    np.testing.assert_array_equal(seeds.times, [0, 5, 10, 15, 20])
    np.testing.assert_array_equal(seeds.values, [[.1, .1, .3, .3, .4],
                                                 [np.nan, .5, .5, .6, np.nan]])
    np.testing.assert_array_equal(seeds.final, [.4, .6])  # last by time, not by file order
    assert seeds.k == 2


def test_to_peak_from_chosen_runs():
    base = step_functions([([0, 10, 20], [.5, .8, .7]), ([0, 10, 20], [.5, .6, .9])])
    variant = step_functions([([0, 4, 8], [.5, .75, .9])])
    # both baseline runs: mean .5, .7, .8 -> peak .8 at 20; the variant has .8 at 8
    assert to_peak(variant, base) == (20.0, 8.0)
    # run 0 twice: peak .8 at 10; run 1 twice: peak .9 at 20, which the variant reaches at 8
    assert to_peak(variant, base, [0], [0, 0]) == (10.0, 8.0)
    assert to_peak(variant, base, [0], [1, 1]) == (20.0, 8.0)
    higher = step_functions([([0, 10], [.5, .95])] * 2)
    assert to_peak(variant, higher) == (10.0, None)  # never reaches .95


@pytest.mark.parametrize("base_time, time, point, resampled", [
    (20.0, 10.0, 2.0, 2.0),
    (20.0, None, None, 0.0),  # never gets there: infinitely slow
    (20.0, 0.0, None, np.inf),  # there before any training, the baseline was not
    (0.0, 0.0, None, 1.0),  # both there at once: a tie
    (0.0, 5.0, None, 0.0),  # the baseline peaked at once, the variant took 5 s
])
def test_speedup_conventions(base_time, time, point, resampled):
    assert speedup(base_time, time) == point
    assert resampled_speedup(base_time, time) == resampled


def test_p_better_counts_pairs_and_half_ties():
    # .6 beats .5 (1); .8 beats .5 and .7 (2); .9 beats .5 and .7, ties .9 (2.5): 5.5 / 9
    assert p_better(np.array([.6, .8, .9]), np.array([.5, .7, .9])) == pytest.approx(5.5 / 9)
    assert p_better(np.array([.9, .9]), np.array([.1, .2, .3])) == 1.0
    assert p_better(np.array([.3]), np.array([.3])) == 0.5
    # .1 + .2 is 0.30000000000000004: still a tie
    assert p_better(np.array([.1 + .2]), np.array([.3])) == 0.5


def test_interval_needs_two_runs_a_side():
    assert interval(lambda ia, ib: 1.0, 1, 5) is None
    assert interval(lambda ia, ib: 1.0, 5, 1) is None


def test_interval_resamples_each_side_independently():
    """A statistic that is the fraction of run 0 in the resampled left side: with 3 runs
    drawn with replacement that is k/3, k ~ Binomial(3, 1/3). P(k = 0) = 8/27 (30%), so
    the 2.5% point is 0; P(k = 3) = 1/27 (3.7% > 2.5%), so the 97.5% point is 1."""
    assert interval(lambda ia, ib: float(np.mean(ia == 0)), 3, 4) == [0.0, 1.0]
    calls = []  # each side: its own size, integer indices from its own range

    def record(ia, ib):
        calls.append((len(ia), ia.dtype.kind, ia.max() < 3, len(ib), ib.dtype.kind))
        return 0.0

    interval(record, 3, 4)
    assert set(calls) == {(3, "i", True, 4, "i")} and len(calls) > 1000
    assert interval(record, 3, 4) == [0.0, 0.0]  # a constant has a zero-width interval


def test_interval_unbounded_end_is_none():
    # inf whenever the left resample is all run 0 (probability 1/27 with 3 runs: 3.7%)
    assert interval(lambda ia, ib: np.inf if (ia == 0).all() else 1.0, 3, 3) == [1.0, None]


def test_two_runs_a_side_give_no_interval():
    """2 runs have 3 distinct resamples: their percentiles would be a point or the runs'
    ends, not a measure of how sure a figure is."""
    assert interval(lambda ia, ib: float(np.mean(ia == 0)), 2, 5) is None
    assert interval(lambda ia, ib: float(np.mean(ia == 0)), 5, 2) is None


@pytest.mark.parametrize("ci, expected", [
    ([1.2, 2.0], "faster"),
    ([1.1, None], "faster"),  # unbounded above
    ([0.2, 0.9], "slower"),
    ([0.5, 1.0], "not distinguishable"),  # 1 is inside, at the edge
    ([1.0, 3.0], "not distinguishable"),
    ([0.0, 1.7], "not distinguishable"),
    (None, None),
])
def test_verdict(ci, expected):
    assert verdict(ci) == expected


def test_paired_difference_over_the_shared_seeds():
    from pods.experiments.intervals import paired_difference

    a = {"seed1": 0.5, "seed2": 0.6, "seed3": 0.9, "seed9": 0.1}
    b = {"seed1": 0.4, "seed2": 0.6, "seed3": 0.6}
    out = paired_difference(a, b)  # differences .1, 0, .3: mean .1333, sd .1528
    assert (out["paired_seeds"], out["paired_wins"]) == (3, 2)
    assert out["paired_diff"] == pytest.approx(0.4 / 3)
    half = 4.302653 * 0.152753 / 3 ** 0.5  # t(.975, 2 dof)
    assert out["paired_diff_ci95"] == pytest.approx([0.4 / 3 - half, 0.4 / 3 + half], abs=1e-5)
    assert paired_difference({"seed1": 0.5}, {"seed2": 0.5})["paired_diff"] is None


def test_paired_difference_says_what_its_seeds_could_detect():
    from pods.experiments.intervals import paired_difference
    from pods.experiments.power import t_power
    from pods.experiments.tables import paired_cell

    a = {"seed1": 0.5, "seed2": 0.6, "seed3": 0.9}
    out = paired_difference(a, {"seed1": 0.4, "seed2": 0.6, "seed3": 0.6})  # sd .1528
    assert t_power(out["paired_detectable"], 0.152753, 3) == pytest.approx(0.8, abs=1e-4)
    lo, hi = out["paired_diff_ci95"]
    assert out["paired_detectable"] > (hi - lo) / 2  # found 4 in 5: beyond the half-width
    assert paired_cell(out).endswith(
        f"sign-flip p = 0.500, 80% power at ±{100 * out['paired_detectable']:.1f})")
    assert paired_difference(a, {"seed1": 0.4, "seed2": 0.5, "seed3": 0.8})[
        "paired_detectable"] is None  # every seed .1 ahead: no spread to plan from
    assert paired_difference({"s": 0.5}, {"s": 0.4})["paired_detectable"] is None


def test_a_bound_near_one_keeps_its_digits():
    from pods.experiments.tables import _bound

    assert (_bound(0.998), _bound(1.004), _bound(1.0), _bound(2.971)) == \
        ("0.9980", "1.0040", "1.00", "2.97")


def test_sign_flip_p_is_exact():
    assert sign_flip_p([0.1, 0.2, 0.05, 0.3, 0.1]) == pytest.approx(2 / 32)  # all one way
    assert sign_flip_p([0.1, -0.1]) == 1.0
    # 1, 2, -3: |sum| 0 is reached by every one of the 8 patterns; 1, 2, 4: |sum| 7 by 2
    assert sign_flip_p([1.0, 2.0, -3.0]) == 1.0
    assert sign_flip_p([1.0, 2.0, 4.0]) == pytest.approx(2 / 8)
    assert sign_flip_p([1.0, -2.0, 4.0]) == pytest.approx(6 / 8)  # |+-1 +-2 +-4| >= 3: 6 of 8
