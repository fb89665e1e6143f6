"""What `pods plan` measures on this machine, through the trainer a run would build: the
base model's rewards on a sample of training prompts (S rollouts each, at the run's
temperature and token limit), the cost of generating and scoring them, of updating on kept
rows and of handing the weights to the engine (``pods.check.plan`` does the arithmetic).

Generation is timed at two sizes, each prompt's S rollouts alone and the second half of
the prompts' in one call, and a line is fitted through them; the update at two or more
row counts (after a warm-up update), each twice, on rows of that call which the run's
selection keeps. The updates train the planner's copy of
the model on its own rollouts; nothing is saved.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from pods.check.plan import Costs, Line
from pods.core.rollout_inputs import completion_lengths, rule_inputs
from pods.core.selection import select
from pods.models.precision import autocast
from pods.rollout import sample_keys
from pods.rollout.prompts import render_prompts
from pods.train.layout_check import check_once
from pods.train.selection import KeptBatch, selection_spec
from pods.train.update import policy_update


@dataclass(frozen=True)
class Sample:
    """How much to measure."""

    prompts: int = 16  # training prompts sampled (Q), at least 2
    samples: int = 16  # rollouts per prompt (S): the finest share of signal is 1/S
    rows: tuple[int, ...] = (2, 8)  # kept-row counts the update is timed at

    def __post_init__(self) -> None:
        if self.prompts < 2 or self.samples < 2:
            raise ValueError(f"--prompts {self.prompts} and --samples {self.samples}: the "
                             f"planner needs at least 2 of each.")
        if len(set(self.rows)) < 2 or min(self.rows) < 1:
            raise ValueError(f"--rows {self.rows}: time the update at two or more different "
                             f"row counts, each at least 1.")


@dataclass(frozen=True)
class Measured:
    rewards: Tensor  # [Q, S] the base model's training rewards
    costs: Costs
    mean_length: float  # completion tokens per rollout


def _timed(call):
    start = time.perf_counter()
    out = call()
    return out, time.perf_counter() - start


def measure(trainer, sample: Sample, log=print) -> Measured:
    """Generate, score and update through ``trainer`` (a ``pods.train.trainer.Trainer``)."""
    cfg, S = trainer.cfg, sample.samples
    picks = np.random.default_rng(cfg.run.seed).choice(
        len(trainer.train_set), size=min(sample.prompts, len(trainer.train_set)), replace=False)
    problems = [trainer.train_set[i] for i in picks]
    texts, special = render_prompts(trainer.tokenizer, trainer.task, problems)

    def generate(first: int, last: int):  # prompts [first, last): rollouts and rewards
        keys = sample_keys(cfg.run.seed, -1, torch.arange(first, last))
        rollouts, seconds = _timed(lambda: trainer.engine.generate(
            texts[first:last], S, cfg.rollout.temperature, cfg.rollout.max_new_tokens, keys,
            special))
        scores, scored = _timed(lambda: trainer.scorer.rewards(
            rollouts.texts, problems[first:last], S, rollouts.finished))
        return rollouts, scores.rewards, seconds, scored

    log(f"plan: generating {S} rollouts for each of {len(problems)} training prompts")
    generate(0, 1)  # warm-up, not counted
    half = len(problems) // 2
    calls = [generate(i, i + 1) for i in range(half)] + [generate(half, len(problems))]
    sizes = [S] * half + [S * (len(problems) - half)]  # rollouts per call
    rewards = torch.cat([call[1] for call in calls])  # [Q, S]
    lengths = torch.cat([call[0].completion_mask.sum(1) for call in calls]).float()
    scored = sum(call[3] for call in calls) / (S * len(problems))
    batch = calls[-1][0]
    kept = _kept_rows(trainer, calls[-1][1], batch)
    update, sync = _update_costs(trainer, batch, kept, sample.rows, log)
    costs = Costs(Line.fit(sizes, [call[2] for call in calls]), scored, update, sync,
                  kept_lengths=tuple(_row_lengths(batch)[kept].tolist()),
                  always_update=cfg.loss.beta > 0)
    return Measured(rewards, costs, float(lengths.mean()))


def _row_lengths(rollouts) -> Tensor:
    """[B] prompt + completion tokens of each rollout (padding excluded)."""
    return (rollouts.prompt_mask.sum(1) + rollouts.completion_mask.sum(1)).long()


def _kept_rows(trainer, rewards: Tensor, rollouts) -> Tensor:
    """[K] the rows of the batch call that the run's selection keeps, shuffled: the update is
    timed on rollouts like those it trains on (max-variance keeps the shortest and longest
    answers, not a random sample of lengths)."""
    config, n = trainer.cfg.selection, rewards.shape[1]
    inputs = {name: value.view(-1, n).cpu() for name, value in
              rule_inputs(config.rule, **rollouts.sources()).items()}  # [Q, n] each
    lengths = completion_lengths(rollouts.completion_mask).view(-1, n).float().cpu()
    spec = dataclasses.replace(selection_spec(config), m=min(config.m, n))  # m <= S
    chosen = select(rewards, inputs, spec, lengths=lengths)
    rows = chosen.keep.flatten().nonzero().flatten()  # [K]
    generator = torch.Generator().manual_seed(trainer.cfg.run.seed)
    return rows[torch.randperm(len(rows), generator=generator)]


def _update_costs(trainer, rollouts, order: Tensor, rows: tuple[int, ...],
                  log) -> tuple[Line, float]:
    """(seconds per update by padded tokens, seconds per weight sync), the rows taken from
    ``order``."""
    if max(rows) > len(order):
        raise ValueError(f"--rows {max(rows)} is more than the {len(order)} rollouts the "
                         f"run's selection keeps in the planner's batch call; use fewer rows "
                         f"or more --prompts.")
    log(f"plan: timing updates on {', '.join(map(str, rows))} kept rows")
    check_once(trainer, rollouts.select(order[:max(rows)]))  # untimed: the updates run in
    # the layout the run would keep after its self-check (pods.train.layout_check)
    xs, ys, syncs = [], [], []
    lengths = _row_lengths(rollouts)  # [B]
    for index, count in enumerate([min(rows), *rows, *rows]):  # the first is a warm-up
        chosen = order.roll(-index * max(rows))[:count]  # other rows each time
        seconds, synced = _one_update(trainer, rollouts, chosen)
        xs.append(count * int(lengths[chosen].max()))  # padded tokens
        ys.append(seconds)
        syncs.append(synced)
    return Line.fit(xs[1:], ys[1:]), sum(syncs[1:]) / len(syncs[1:])


def _one_update(trainer, rollouts, rows: Tensor) -> tuple[float, float]:
    """(update seconds, sync seconds) of one optimizer step on ``rows``, advantages +-1."""
    advantages = torch.tensor([(-1.0) ** i for i in range(len(rows))], device=trainer.device)
    kept = KeptBatch(rollouts.select(rows), advantages, kept=len(rows), pad_rows=0)

    def update():
        with trainer.engine.asleep(), autocast(trainer.device, trainer.precision.update):
            policy_update(trainer.wrapped, trainer.ref_model, trainer.optimizer, kept,
                          trainer.update_spec, trainer.dist)

    _, seconds = _timed(update)
    _, synced = _timed(lambda: trainer.engine.sync_weights(trainer.model))
    return seconds, synced
