"""pods.experiments.power: the paired t-test's power against published reference values and
a simulation, and the scan of missing seeds against the t-interval it must agree with."""

import numpy as np
import pytest

from pods.experiments.intervals import paired_difference
from pods.experiments.power import (
    detectable_difference,
    missing_seed_fills,
    seeds_needed,
    t_power,
)

GRID = np.arange(-256, 257) / 256


def test_power_matches_the_reference_tables():
    # one-sample (paired) t-test, two-sided 0.05, power 0.8: Cohen's d = 1 needs 10 seeds
    # (actual power 0.803), d = 0.5 needs 34 (G*Power's and Cohen's tables)
    assert seeds_needed(1.0, 1.0) == 10
    assert t_power(1.0, 1.0, 10) == pytest.approx(0.8031, abs=1e-4)
    assert seeds_needed(0.5, 1.0) == 34
    assert seeds_needed(5.0, 10.0) == 34  # only the ratio matters
    assert seeds_needed(0.0, 1.0) is None


def test_power_is_the_test_s_size_at_no_difference_and_even_in_the_difference():
    assert t_power(0.0, 1.0, 5) == pytest.approx(0.05, abs=1e-12)
    assert t_power(-0.7, 1.0, 6) == pytest.approx(t_power(0.7, 1.0, 6))
    powers = [t_power(0.7, 1.0, k) for k in range(2, 30)]
    assert all(np.diff(powers) > 0)


def test_the_detectable_difference_is_found_four_times_in_five_by_simulation():
    from scipy.stats import t

    sd, k = 15.0, 5
    delta = detectable_difference(sd, k)
    assert t_power(delta, sd, k) == pytest.approx(0.8, abs=1e-6)
    d = np.random.default_rng(0).normal(delta, sd, size=(40_000, k))  # [trials, k]
    stat = d.mean(1) / (d.std(1, ddof=1) / np.sqrt(k))
    assert np.mean(np.abs(stat) > t.ppf(0.975, k - 1)) == pytest.approx(0.8, abs=0.01)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="2 or more seeds"):
        t_power(1.0, 1.0, 1)
    with pytest.raises(ValueError, match="sd must be positive"):
        t_power(1.0, 0.0, 5)


def excludes_zero(d: np.ndarray) -> bool:
    lo, hi = paired_difference(dict(enumerate(d)), dict.fromkeys(range(len(d)), 0.0))[
        "paired_diff_ci95"]
    return lo > 0 or hi < 0


def test_one_missing_seed_agrees_with_the_t_interval_value_by_value():
    d = np.array([0.152, 0.024, 0.074, 0.301])  # pods - grpo_ga at 309 s, seeds 200-203
    f = missing_seed_fills(d, 1, GRID)
    hits = [x for x in GRID if excludes_zero(np.append(d, x))]
    assert not f.decided and f.lower is None
    assert f.higher == (pytest.approx(min(hits)), pytest.approx(max(hits)))
    assert 0.10 < min(hits) < max(hits) < 0.40


def test_a_decided_test_names_the_smallest_seed_that_undoes_it():
    d = np.array([0.069, 0.046, 0.040, 0.120])  # t-interval about [+3.9, +9.9] points
    f = missing_seed_fills(d, 1, GRID)
    assert f.decided and excludes_zero(d)
    assert not excludes_zero(np.append(d, f.undo))
    smaller = [x for x in GRID if abs(x) < abs(f.undo)]
    assert smaller and all(excludes_zero(np.append(d, x)) for x in smaller)


def test_two_missing_seeds_that_cannot_decide_say_so():
    d = np.array([0.14, -0.113, -0.192])  # one way, then the other
    f = missing_seed_fills(d, 2, GRID[::8])
    assert (f.decided, f.higher, f.lower, f.undo) == (False, None, None, None)
    g = missing_seed_fills(np.array([0.05, 0.06, 0.07]), 2, GRID[::8])
    assert g.higher is not None and g.higher[0] <= 0.07  # two more like them decide
