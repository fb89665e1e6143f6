"""What a paired comparison over seeds can detect, and what missing seeds could change.

A comparison of two variants run on the same k seeds reads the k differences d (variant's
accuracy minus the baseline's, seed by seed) through a paired t-test: the 95% t-interval of
their mean (``intervals.paired_difference``). Before and after running, two questions decide
what its verdict can mean:

- **Power.** With a spread ``sd`` of differences between seeds, how large must the true mean
  difference be for the test to find it 80% of the time (``detectable_difference``), and how
  many seeds find a given difference that often (``seeds_needed``)? Both use the paired
  t-test's exact power, from the noncentral t distribution. A comparison whose detectable
  difference is larger than any plausible effect can only say "not distinguishable".
- **Missing seeds.** When some planned seeds were not run, could any results of theirs have
  turned "not distinguishable" into a verdict, or undone one? ``missing_seed_fills`` scans
  every completion on a grid of feasible differences and returns the range of sizes a
  missing difference must have for the t-interval to exclude 0 on either side, or the
  smallest that stops it excluding 0; None where no completion does. The exact sign-flip
  p-value needs no scan: with 5 seeds it is at least 2/32 = 0.0625, whatever the fifth
  (``intervals.sign_flip_p``).

Everything takes plain numbers or arrays of differences.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05  # two-sided, as the 95% intervals
POWER = 0.8  # the usual planning target: a real difference found 4 times in 5


def t_power(delta: float, sd: float, k: int, alpha: float = ALPHA) -> float:
    """The probability that a paired t-test on k seeds rejects "no difference" (two-sided,
    level ``alpha``) when the true mean difference is ``delta`` and the differences spread
    with standard deviation ``sd`` between seeds (normal differences)."""
    from scipy.stats import nct, t

    if k < 2:
        raise ValueError(f"a paired t-test needs 2 or more seeds, got k={k}")
    if sd <= 0:
        raise ValueError(f"sd must be positive, got {sd}")
    crit = t.ppf(1 - alpha / 2, k - 1)
    shift = abs(delta) / (sd / np.sqrt(k))  # the noncentrality; power is even in delta
    wrong_side = nct.cdf(-crit, k - 1, shift)  # rejecting on the other side: tiny, and
    return float(nct.sf(crit, k - 1, shift) + np.nan_to_num(wrong_side))  # NaN far out


def seeds_needed(delta: float, sd: float, power: float = POWER, alpha: float = ALPHA,
                 most: int = 100_000) -> int | None:
    """The fewest seeds whose paired t-test finds a true difference ``delta`` with
    probability ``power``; None if more than ``most`` would be needed."""
    if delta == 0:
        return None
    lo, hi = 2, 2
    while t_power(delta, sd, hi, alpha) < power:  # doubling, then bisection: power rises
        if hi >= most:  # with k for a fixed delta
            return None
        lo, hi = hi, min(2 * hi, most)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if t_power(delta, sd, mid, alpha) < power else (lo, mid)
    return hi


def detectable_difference(sd: float, k: int, power: float = POWER,
                          alpha: float = ALPHA) -> float:
    """The smallest true mean difference (in sd's units) that a paired t-test on k seeds
    finds with probability ``power``: what k seeds can show at this spread."""
    from scipy.optimize import brentq

    top = 60 * sd / np.sqrt(k)  # noncentrality 60: power 1 at any k >= 2
    return float(brentq(lambda delta: t_power(delta, sd, k, alpha) - power, 0.0, top))


def deciding(d: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Whether each row of differences ``d`` [..., k] has a t-interval excluding 0."""
    from scipy.stats import t

    k = d.shape[-1]
    mean, sd = d.mean(-1), d.std(-1, ddof=1)
    return np.abs(mean) > t.ppf(1 - alpha / 2, k - 1) * sd / np.sqrt(k)


@dataclass(frozen=True)
class Fills:
    """What ``missing`` more seeds could do to a paired t-test over k differences. A
    completion's size is its largest missing difference in absolute value. ``higher``: the
    least and the greatest size of the completions whose t-interval over all k + missing
    excludes 0 with the variant higher; ``lower``: the same with it lower; ``undo``, where
    the k already decide: the signed largest missing difference of the smallest completion
    that no longer excludes 0. None: no completion on the grid does it."""

    decided: bool  # the t-interval over the k differences excludes 0
    higher: tuple[float, float] | None
    lower: tuple[float, float] | None
    undo: float | None


def missing_seed_fills(d: np.ndarray, missing: int, values: np.ndarray) -> Fills:
    """Every completion of the differences ``d`` [k] by ``missing`` more, each one of
    ``values`` [V] (a grid of feasible differences, e.g. -1 to 1 in steps of 1/256), scanned:
    which decide the paired t-test, and how large their missing differences are (``Fills``).
    V^missing completions: keep ``missing`` to 2 or 3."""
    d, values = np.asarray(d, dtype=float), np.asarray(values, dtype=float)
    fills = np.array(list(itertools.product(values, repeat=missing)))  # [F, missing]
    rows = np.concatenate([np.broadcast_to(d, (len(fills), len(d))), fills], axis=1)
    hits, up = deciding(rows), rows.mean(axis=1) > 0  # [F], [F]
    biggest = np.abs(fills).argmax(axis=1)
    signed = fills[np.arange(len(fills)), biggest]  # [F] each completion's largest, signed
    size = np.abs(signed)

    def span(chosen: np.ndarray) -> tuple[float, float] | None:  # [F] bool
        return (float(size[chosen].min()), float(size[chosen].max())) if chosen.any() \
            else None

    decided = len(d) >= 2 and bool(deciding(d[None])[0])
    undo = None
    if decided and (~hits).any():
        undo = float(signed[np.flatnonzero(~hits)[size[~hits].argmin()]])
    return Fills(decided, span(hits & up), span(hits & ~up), undo)
