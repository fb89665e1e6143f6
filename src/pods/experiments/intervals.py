"""How sure a comparison is: speed-ups and end-of-budget wins with 95% bootstrap intervals
over seeds.

A variant's seeds are k independent runs; a speed-up computed from their mean curve is one
draw of a noisy quantity. Here each side's seeds are resampled with replacement,
independently (the variant's and the baseline's runs share nothing but the seed numbers),
the quantity is recomputed from the resampled mean curves exactly as for the point
estimate, and scipy.stats.bootstrap reads the 2.5th and 97.5th percentiles of those
recomputations. Every resample needs a number: a variant that never reaches the baseline's
peak in a resample counts as speed-up 0 (infinite time), see ``resampled_speedup``. With
fewer than ``MIN_SEEDS`` seeds on a side there is no interval: 2 seeds have only 3 distinct
resamples, and their percentiles come out as a point or the two seeds' ends (a speed-up of
1.33x [1.33, 1.33] from 2 seeds says nothing of how sure it is). With 3 to 10 seeds the
interval is rough (it tends to be too narrow; it can only be as wide as the seeds' spread),
so it is read as "distinguishable or not", not as a precise range. It also leans low: a
baseline's peak is a maximum of its mean curve, and a resample that repeats seeds has a
noisier mean with a higher maximum, so the point estimate often sits at the interval's upper
end. "faster" is then the cautious verdict.

Where both sides ran the same seeds (the same prompts in the same order; with seeded
sampling, the same first rollouts), ``paired_difference`` compares their end accuracies seed
by seed: a mean difference with a t-interval over the shared seeds.

Everything here takes plain arrays: a side is a ``Seeds`` (each run's accuracy as a step
function on one grid) and nothing reads files.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from pods.experiments.power import detectable_difference

CONFIDENCE = 0.95
N_RESAMPLES = 9999  # scipy's default; about 0.2 s per interval on 3-10 seeds
RNG_SEED = 0  # a fixed generator per interval: the same folder gives the same summary
TOL = 1e-9  # equal accuracies averaged in another order may differ in the last bit
MIN_SEEDS = 3  # seeds a side for a bootstrap interval (and so a verdict)


@dataclass(frozen=True, eq=False)
class Seeds:
    """One variant's runs as step functions of accuracy on a grid shared by its runs."""

    times: np.ndarray  # [G] sorted union of the runs' eval times (or optimizer steps)
    values: np.ndarray  # [k, G] accuracy of the run's last eval at or before t; NaN before
    # its first eval and after its last (a run that has stopped has no accuracy there)
    final: np.ndarray  # [k] each run's last eval: its accuracy at the end of its budget

    @property
    def k(self) -> int:
        return len(self.values)


def step_functions(runs: list[tuple[np.ndarray, np.ndarray]]) -> Seeds:
    """Seeds from each run's (times [E], accuracies [E]); evals at equal times: the last
    written holds (a stable sort keeps the file order)."""
    steps = []
    for t, acc in runs:
        t, acc = np.asarray(t, dtype=float), np.asarray(acc, dtype=float)
        order = np.argsort(t, kind="stable")
        steps.append((t[order], acc[order]))
    grid = np.unique(np.concatenate([t for t, _ in steps]))  # [G]
    values = np.full((len(steps), len(grid)), np.nan)  # [k, G]
    for row, (t, acc) in zip(values, steps, strict=True):
        inside = (grid >= t[0]) & (grid <= t[-1])
        row[inside] = acc[np.searchsorted(t, grid[inside], side="right") - 1]
    return Seeds(times=grid, values=values, final=np.array([acc[-1] for _, acc in steps]))


def on_common_grid(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times [G'], values [k, G']) at the grid times where every run has an accuracy, so
    each seed counts at each time. A subset of the runs keeps at least these times, so a
    resample never comes out empty when the full set does not."""
    common = ~np.isnan(values).any(axis=0)  # [G]
    if not common.any():
        raise ValueError("the runs have no eval time in common (one ends before another "
                         "starts); remove the odd run.")
    return times[common], values[:, common]


def time_to_peak(times: np.ndarray, mean: np.ndarray) -> float:
    """The first time the mean curve is at its peak."""
    return float(times[np.argmax(mean)])


def reach(times: np.ndarray, mean: np.ndarray, target: float) -> float | None:
    """The first time the mean curve reaches ``target``; None if it never does."""
    hits = np.flatnonzero(mean >= target - TOL)
    return float(times[hits[0]]) if len(hits) else None


def to_peak(variant: Seeds, base: Seeds, iv: Any = slice(None), ib: Any = slice(None)
            ) -> tuple[float, float | None]:
    """(the baseline's time to its peak mean, the variant's time to reach that accuracy or
    None), from the runs ``iv`` of the variant and ``ib`` of the baseline."""
    b_times, b_values = on_common_grid(base.times, base.values[ib])  # [Gb], [kb, Gb]
    v_times, v_values = on_common_grid(variant.times, variant.values[iv])  # [Gv], [kv, Gv]
    b_mean = b_values.mean(axis=0)  # [Gb]
    return time_to_peak(b_times, b_mean), reach(v_times, v_values.mean(axis=0), b_mean.max())


def speedup(base_time: float, time: float | None) -> float | None:
    """The point estimate: the baseline's time / the variant's; None when the variant never
    gets there ("never") or a time is zero (no meaningful ratio, "n/a")."""
    return base_time / time if time and base_time else None


def resampled_speedup(base_time: float, time: float | None) -> float:
    """The same ratio inside the bootstrap, where every resample needs a number: a variant
    that never reaches the target takes infinitely long (0); one that is there at time 0
    while the baseline needed time is infinitely fast (inf); both there at 0 is a tie (1)."""
    if time is None:
        return 0.0
    if time == 0:
        return 1.0 if base_time == 0 else np.inf
    return base_time / time


def steps_at(steps: Seeds, time: float | None, runs: Any = slice(None)) -> float | None:
    """The optimizer steps the runs ``runs`` had made at training time ``time`` (each run's
    step at its last eval at or before it), averaged over them; None for None. ``steps`` holds
    each run's step count as a step function of time, on the same grid as its accuracies, so
    a time read off the mean accuracy curve has each run's step beside it."""
    if time is None:
        return None
    at = int(np.searchsorted(steps.times, time))
    return float(np.mean(steps.values[runs, at]))


def _resampled_ratio(variant: Seeds, base: Seeds, iv: np.ndarray, ib: np.ndarray) -> float:
    return resampled_speedup(*to_peak(variant, base, iv, ib))


def _resampled_steps(sides: tuple[Seeds, Seeds, Seeds, Seeds], iv: np.ndarray, ib: np.ndarray
                     ) -> float:
    """The steps ratio of a resample: the steps each side's runs had made when their mean
    curves got to the (resampled) baseline's peak."""
    variant, base, variant_steps, base_steps = sides
    base_time, time = to_peak(variant, base, iv, ib)
    return resampled_speedup(steps_at(base_steps, base_time, ib),
                             steps_at(variant_steps, time, iv))


def p_better(a: np.ndarray, b: np.ndarray) -> float:
    """The probability that a random run of ``a`` ends above a random run of ``b``: the
    fraction of pairs (i, j) with a[i] > b[j], ties counting 1/2."""
    a = np.asarray(a, dtype=float)[:, None]  # [ka, 1]
    b = np.asarray(b, dtype=float)[None, :]  # [1, kb]
    return float(np.mean((a > b + TOL) + 0.5 * (np.abs(a - b) <= TOL)))


def interval(statistic: Callable[[np.ndarray, np.ndarray], float], ka: int, kb: int
             ) -> list[float | None] | None:
    """The 95% percentile bootstrap interval of ``statistic(ia, ib)`` over runs resampled
    with replacement from ``range(ka)`` and ``range(kb)`` independently; None with a single
    run on either side (nothing to resample). An unbounded end (inf) is None.

    Percentile, not BCa or basic: BCa's jackknife acceleration is undefined or wild for a
    step-function statistic on 3-10 seeds (scipy then warns and returns NaN), and the basic
    interval reflects around the estimate, which can put a speed-up below 0 or a
    probability above 1. The percentile interval stays inside the statistic's range.
    None under ``MIN_SEEDS`` runs on a side too: 2 runs have 3 distinct resamples."""
    if ka < MIN_SEEDS or kb < MIN_SEEDS:
        return None
    from scipy.stats import bootstrap

    def stat(ia: np.ndarray, ib: np.ndarray) -> float:
        return statistic(ia.astype(int), ib.astype(int))

    with np.errstate(invalid="ignore"):  # its standard error (unused) of an inf is NaN
        result = bootstrap((np.arange(ka), np.arange(kb)), stat, paired=False,
                           vectorized=False, n_resamples=N_RESAMPLES,
                           confidence_level=CONFIDENCE, method="percentile",
                           rng=np.random.default_rng(RNG_SEED))
    ci = result.confidence_interval
    return [float(x) if np.isfinite(x) else None for x in (ci.low, ci.high)]


def verdict(ci: list[float | None] | None) -> str | None:
    """"faster" when the whole interval lies above 1, "slower" below, otherwise (1 inside
    it) "not distinguishable"; None without an interval."""
    if ci is None:
        return None
    low, high = ci
    if low is not None and low > 1:
        return "faster"
    if high is not None and high < 1:
        return "slower"
    return "not distinguishable"


def versus(variant: Seeds, base: Seeds, variant_steps: Seeds, base_steps: Seeds
           ) -> dict[str, Any]:
    """A variant against a baseline: the time its mean curve takes to the baseline's peak,
    the speed-up, the optimizer steps its runs had made by then (``*_steps``: each run's
    step count as a step function of time, ``steps_at``) and the steps ratio, with their
    intervals and verdicts, and the probability of ending higher, with its interval."""
    base_time, time = to_peak(variant, base)
    base_step, step = steps_at(base_steps, base_time), steps_at(variant_steps, time)
    out = {"time_to_peak": time, "speedup": speedup(base_time, time),
           "steps_to_peak": step, "steps_ratio": speedup(base_step, step),
           "p_better_at_end": p_better(variant.final, base.final),
           "seeds_variant": variant.k, "seeds_baseline": base.k}
    ratios = {"speedup": partial(_resampled_ratio, variant, base),
              "steps_ratio": partial(_resampled_steps, (variant, base, variant_steps,
                                                        base_steps))}
    for key, statistic in ratios.items():
        # "never" is bounded (it counts as 0, and resamples may get there); "n/a", a zero
        # time in the full sample, has no estimate to bound
        bounded = out[key] is not None or time is None
        out[f"{key}_ci95"] = interval(statistic, variant.k, base.k) if bounded else None
    out["p_better_at_end_ci95"] = interval(
        lambda iv, ib: p_better(variant.final[iv], base.final[ib]), variant.k, base.k)
    out["verdict"] = verdict(out["speedup_ci95"])
    out["steps_verdict"] = verdict(out["steps_ratio_ci95"])
    return out


def paired_difference(a: dict[str, float], b: dict[str, float]) -> dict[str, Any]:
    """End accuracies paired by seed name, over the seeds both sides ran: the mean of
    a - b (``paired_diff``), its 95% t-interval (``paired_diff_ci95``; None under 2 shared
    seeds), the shared seeds and in how many a ended higher (``paired_wins``), and the exact
    sign-flip p-value of the mean (``paired_p``, ``sign_flip_p``; None under 2 shared
    seeds). The t-interval on k differences assumes them roughly normal; with 5 to 10 seeds
    it is the usual paired test's interval, wider than a bootstrap's on so few. The
    sign-flip p assumes nothing of their shape, and says what few seeds can show: with 5,
    at best 2/32 = 0.0625. ``paired_detectable``: the true mean difference a paired t-test
    on these seeds would find 4 times in 5 at the spread seen (``power``; None under 2
    shared seeds or with no spread), what the seeds could have shown at all."""
    d = np.array([a[seed] - b[seed] for seed in a if seed in b])  # [k] shared seeds
    out: dict[str, Any] = {"paired_seeds": len(d), "paired_wins": int((d > TOL).sum()),
                           "paired_diff": float(d.mean()) if len(d) else None,
                           "paired_diff_ci95": None, "paired_p": None,
                           "paired_detectable": None}
    if len(d) >= 2:
        out["paired_p"] = sign_flip_p(d)
        sd = float(d.std(ddof=1))  # the spread of the differences between seeds
        if sd > TOL:
            out["paired_detectable"] = detectable_difference(sd, len(d))
        from scipy.stats import t

        half = t.ppf(0.5 + CONFIDENCE / 2, len(d) - 1) * sd / np.sqrt(len(d))
        out["paired_diff_ci95"] = [float(d.mean() - half), float(d.mean() + half)]
    return out


def sign_flip_p(d: np.ndarray) -> float:
    """The exact two-sided p-value of paired differences ``d`` [k] under the null that each
    difference's sign is a fair coin (what pairing by seed assumes of two equal variants):
    the share of the 2^k sign patterns whose |sum| reaches the observed one. With k = 5 the
    smallest possible value is 2/32 = 0.0625: five seeds, all one way, cannot reach 0.05."""
    d = np.asarray(d, dtype=float)
    flips = np.array(list(itertools.product([1.0, -1.0], repeat=len(d))))  # [2^k, k]
    return float(np.mean(np.abs(flips @ d) >= abs(d.sum()) - TOL))
