"""Learning-rate schedules: a multiplier of the base lr as a function of budget progress.

Progress is the fraction of the run's budget spent, in [0, 1]: steps done / max_steps, or
training seconds / max_time, whichever is further along (``budget_progress``). The lr is
recomputed from it before every optimizer step instead of being kept in a scheduler
object, so a resumed run gets the same lr from its restored step count and clock, and
there is no scheduler state to checkpoint.

Why decay at all: a constant lr that learns fast early keeps taking steps of the same size
once the policy is nearly right, and the noisy policy gradient of a few hundred kept
rollouts then knocks it back down (the old default climbed to 84% and fell 25 points
between two evaluations). Decaying to a floor makes the last evaluation close to the best.

Shapes of the multiplier (w = warmup fraction, f = floor, p = progress):
    warm-up      p < w:  (p / w), linear from 0 to 1 (the first step gets a small lr)
    constant     1
    linear       f + (1 - f) * (1 - q)               with q = (p - w) / (1 - w)
    cosine       f + (1 - f) * (1 + cos(pi * q)) / 2
"""

from __future__ import annotations

import math

from pods.config.fields import SCHEDULES


def lr_multiplier(progress: float, schedule: str = "constant", warmup: float = 0.0,
                  floor: float = 0.0) -> float:
    """The factor to multiply the base lr by at ``progress`` (clipped to [0, 1]).

    >>> lr_multiplier(0.5, "cosine")  # half-way down the cosine
    0.5
    >>> round(lr_multiplier(0.55, "linear", warmup=0.1, floor=0.1), 4)  # q = 0.5
    0.55
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown lr schedule {schedule!r}; use one of {', '.join(SCHEDULES)}.")
    p = min(max(progress, 0.0), 1.0)
    if p < warmup:
        return p / warmup
    if schedule == "constant":
        return 1.0
    q = (p - warmup) / (1.0 - warmup) if warmup < 1 else 1.0  # decay progress in [0, 1]
    decay = 1.0 - q if schedule == "linear" else (1.0 + math.cos(math.pi * q)) / 2
    return floor + (1.0 - floor) * decay


def budget_progress(steps: int, seconds: float, max_steps: int | None,
                    max_time: float | None) -> float:
    """Fraction of the budget spent: the further along of steps and training seconds (the
    run stops when either runs out); 0 for a budget that is not set."""
    parts = [steps / max_steps if max_steps else 0.0, seconds / max_time if max_time else 0.0]
    return min(max(parts), 1.0)
