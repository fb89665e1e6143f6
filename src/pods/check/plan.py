"""The arithmetic of `pods plan`: from a base model's sampled rewards and measured costs,
what each (P, n, m) would give per step and per second. Tensors and floats in, rows out;
nothing is run here (``pods.check.plan_measure`` measures, ``pods.check.planner`` prints).

For a prompt whose sampled rewards take the values v with frequencies q_v (S samples), a
group of n rollouts has reward variance unless all n draw the same value:

    signal(n) = 1 - sum_v q_v ** n          (a 0/1 reward: 1 - p**n - (1 - p)**n)

Its mean over the sampled prompts is the expected share of a step's groups with signal
(with a 95% interval over the prompts: prompts differ, and 16 of them give a rough share).
A prompt none of whose S samples differ counts as never having signal, at any n (the
estimate is only as fine as S). A step of P prompts updates unless no group has signal
(``pods train`` skips such an update), which happens with chance (1 - share) ** P. With the
measured costs (straight lines fitted to timed calls):

    seconds per step = generate(P*n) + score * P*n + chance of an update * (update(P*m) + sync)

where update(R) is a line in the update's padded tokens, R times the expected longest of R
rows drawn from the rows the run's rule kept (their prompt and completion tokens).
    groups with signal per second = P * share / seconds per step

The model is the base model's: completions change length as a run learns, and with them the
costs. One round of generation per step (``dynamic_sampling`` off).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Line:
    """seconds = intercept + slope * x, fitted by least squares to timed calls."""

    intercept: float
    slope: float

    def __call__(self, x: float) -> float:
        return self.intercept + self.slope * x

    @classmethod
    def fit(cls, xs: list[float], ys: list[float]) -> Line:
        """The least-squares line; through the origin when the xs do not differ."""
        if len(xs) != len(ys) or not xs:
            raise ValueError(f"a line needs matching, non-empty sizes and times (got "
                             f"{len(xs)} and {len(ys)}).")
        x, y = torch.tensor(xs, dtype=torch.float64), torch.tensor(ys, dtype=torch.float64)
        if (x == x[0]).all():
            return cls(0.0, float(y.sum() / x.sum()))
        slope = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
        return cls(float(y.mean()) - slope * float(x.mean()), slope)


@dataclass(frozen=True)
class Costs:
    """What a step's phases cost on this machine, measured (``plan_measure``)."""

    generate: Line  # seconds per generate call, by rollouts in the call (P*n)
    score: float  # seconds per rollout scored
    update: Line  # seconds per optimizer step, by padded tokens (rows x longest row)
    sync: float  # seconds to hand the new weights to the engine, per update
    kept_lengths: tuple[int, ...] = (1,)  # prompt + completion tokens of rows the rule kept
    always_update: bool = False  # a KL term (beta > 0) trains even without reward variance

    def update_seconds(self, rows: int) -> float:
        """An update on ``rows`` kept rows: padded to the longest of them, whose expected
        length is that of the longest of ``rows`` draws from ``kept_lengths``."""
        return self.update(rows * expected_max(self.kept_lengths, rows))


def expected_max(values: tuple[int, ...], k: int) -> float:
    """The expected largest of ``k`` draws (with replacement) from ``values``:
    sum_i v_(i) ((i / K)^k - ((i - 1) / K)^k) over the K values sorted ascending."""
    v = torch.tensor(sorted(values), dtype=torch.float64)  # [K]
    i = torch.arange(1, len(v) + 1, dtype=torch.float64)
    return float((v * ((i / len(v)) ** k - ((i - 1) / len(v)) ** k)).sum())


@dataclass(frozen=True)
class Candidate:
    """One setting to weigh: P prompts a step, n generated and m kept per prompt."""

    P: int
    n: int
    m: int

    def __post_init__(self) -> None:
        if not 1 <= self.m <= self.n or self.P < 1:
            raise ValueError(f"{self} needs P >= 1 and 1 <= m <= n.")

    @classmethod
    def parse(cls, text: str) -> Candidate:
        """``PxN/M``, as ``1x64/16``: P=1, n=64, m=16."""
        match = re.fullmatch(r"\s*(\d+)x(\d+)/(\d+)\s*", text)
        if not match:
            raise ValueError(f"candidate {text!r} is not PxN/M (P prompts, n generated, m "
                             f"kept per prompt), e.g. 1x64/16.")
        return cls(*map(int, match.groups()))

    def __str__(self) -> str:
        return f"{self.P}x{self.n}/{self.m}"


def signal_chance(rewards: Tensor, n: int) -> Tensor:
    """[Q] the chance that a group of n rollouts of each prompt has reward variance, with
    rollouts drawn from the prompt's S sampled rewards (``rewards`` [Q, S])."""
    chances = []
    for row in rewards:  # [S]
        _, counts = torch.unique(row, return_counts=True)
        q = counts.double() / len(row)  # [values] each value's frequency
        chances.append(1.0 - float((q ** n).sum()))
    return torch.tensor(chances, dtype=torch.float64)


@dataclass(frozen=True)
class Prediction:
    """One candidate's expected step."""

    candidate: Candidate
    share: float  # expected share of groups with reward variance
    share_error: float  # half-width of its 95% interval over the sampled prompts (normal)
    update_chance: float  # chance that the step updates (some group has signal)
    generate_s: float  # generation and scoring
    update_s: float  # update and weight sync, times the chance of an update
    step_s: float

    @property
    def signal_per_s(self) -> float:
        """Groups with signal per second of training."""
        return self.candidate.P * self.share / self.step_s


def predict(costs: Costs, rewards: Tensor, candidate: Candidate) -> Prediction:
    """The expected step of ``candidate`` given ``rewards`` [Q, S] and ``costs``."""
    P, n, m = candidate.P, candidate.n, candidate.m
    chances = signal_chance(rewards, n)  # [Q]
    share = float(chances.mean())
    error = 1.96 * float(chances.std()) / len(chances) ** 0.5 if len(chances) > 1 else 1.0
    chance = 1.0 if costs.always_update else 1.0 - (1.0 - share) ** P
    generate = costs.generate(P * n) + costs.score * P * n
    update = chance * (costs.update_seconds(P * m) + costs.sync)
    return Prediction(candidate, share, error, chance, generate, update, generate + update)


def recommend(predictions: list[Prediction]) -> dict[int, Prediction]:
    """For each m, the candidate with the most groups with signal per second (ties: fewer
    rollouts generated)."""
    best: dict[int, Prediction] = {}
    for p in sorted(predictions, key=lambda p: p.candidate.P * p.candidate.n):
        m = p.candidate.m
        if m not in best or p.signal_per_s > best[m].signal_per_s:
            best[m] = p
    return dict(sorted(best.items()))


def table(predictions: list[Prediction]) -> str:
    """The candidates as a markdown table, most groups with signal per second first."""
    lines = ["| P x n / m | groups with signal | updates | generate s | update s | "
             "s per step | groups with signal per s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for p in sorted(predictions, key=lambda p: -p.signal_per_s):
        lines.append(f"| {p.candidate} | {100 * p.share:.0f}% ± {100 * p.share_error:.0f} "
                     f"| {100 * p.update_chance:.0f}% "
                     f"| {p.generate_s:.2f} | {p.update_s:.2f} | {p.step_s:.2f} | "
                     f"{p.signal_per_s:.3f} |")
    return "\n".join(lines)


def default_candidates(P: int, n: int, m: int) -> list[Candidate]:
    """The run's own (P, n, m), GRPO on m (n = m) and PODS with n = 2m, 4m, 8m, each at P and
    2P prompts a step."""
    found = {Candidate(p, k, m) for p in (P, 2 * P) for k in (m, 2 * m, 4 * m, 8 * m, n)
             if k >= m}
    return sorted(found, key=lambda c: (c.P, c.n))
