"""Test-set evaluation: the same generation code as training, on held-out problems.

The paper's protocol (arXiv 2504.13818 and its official code): the whole test set is sampled
k times (5) at temperature 0.9; each metric is computed per repeat and reported as the mean
over repeats with its standard error (``<metric>_sem``). Metrics: answer accuracy, format
accuracy (tasks that ask for a layout), both, and mean completion length in tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pods.rollout import Engine, sample_keys
from pods.rollout.prompts import render_prompts
from pods.runtime.distributed import Dist
from pods.tasks import Problem
from pods.tasks.scoring import Scorer, task_map


@dataclass(frozen=True)
class Sampling:
    """How a test set is sampled."""

    temperature: float  # 0 = greedy
    max_new_tokens: int  # completion tokens at most
    seed: int = 0  # the sampling key's seed (pods.rollout.sample_keys)
    repeats: int = 1  # samplings of each problem


def eval_slice(problems: list[Problem], offset: int, size: int | None) -> list[Problem]:
    """The evaluated test problems: ``size`` of them (None: all) from ``offset`` on; an
    offset that leaves none is an error saying how many there are (offset 0 takes the
    split as it is, as evaluations did before offsets)."""
    if offset and offset >= len(problems):
        raise ValueError(f"eval_offset={offset} leaves no test problems: the test split has "
                         f"{len(problems)} (prompts over max_prompt_tokens dropped); lower "
                         f"--eval-offset.")
    return problems[offset:] if size is None else problems[offset:offset + size]


def evaluate(engine: Engine, task, problems: list[Problem], sampling: Sampling,
             dist: Dist | None = None, scorer: Scorer | None = None) -> dict[str, float]:
    """Metrics over ``sampling.repeats`` samplings of ``problems`` (mean and SEM over
    repeats), with the rollouts from ``engine`` (pods.rollout: the run's own engine).

    Sampling is keyed by (seed, problem index) (see pods.rollout), so the result does not
    depend on batching, never touches the training run's random stream, and is the same
    when ``dist`` splits the problems over the ranks of a data-parallel run."""
    dist = dist or Dist(world=1)
    T = len(problems)
    per = -(-T // dist.world)  # problems per rank; the last rank's are padded by repeats
    indices = [min(dist.rank * per + i, T - 1) for i in range(per)] if T else []
    local = [problems[i] for i in indices]
    texts, special = render_prompts(engine.tokenizer, task, local)
    repeats = sampling.repeats
    out = engine.generate(texts, repeats, sampling.temperature, sampling.max_new_tokens,
                          sample_keys(sampling.seed, torch.tensor(indices)), special)
    # row i*repeats + r: problem i, repeat r
    names, values = scores(task, local, out.texts, out.completion_mask, repeats, scorer)
    values = dist.gather(values)[:T]  # [T, repeats, metrics] in problem order
    return {**summarize(names, values), "eval/problems": T, "eval/repeats": repeats}


def summarize(names: list[str], values: torch.Tensor) -> dict[str, float]:
    """values [T, repeats, metrics] -> each metric's mean over repeats of the per-repeat
    mean over problems, and its SEM when repeats > 1."""
    T, repeats = values.shape[:2]
    result: dict[str, float] = {}
    for k, key in enumerate(names):
        per_repeat = values[:, :, k].mean(0).numpy() if T else np.zeros(repeats)  # [repeats]
        result[f"eval/{key}"] = float(np.mean(per_repeat))
        if repeats > 1:
            result[f"eval/{key}_sem"] = float(np.std(per_repeat, ddof=1) / np.sqrt(repeats))
    return result


def scores(task, problems, texts, mask, repeats,
           scorer: Scorer | None = None) -> tuple[list[str], torch.Tensor]:
    """Each completion's metrics: (names, [P, repeats, metrics] float64). Rewards go
    through ``scorer`` (pods.tasks.scoring: reward errors raise, or score 0)."""
    P = len(problems)
    scorer = scorer or Scorer(task)
    completions = [(texts[i], problems[i // repeats]) for i in range(P * repeats)]
    rewards = task_map(task, lambda c: scorer.score(*c)[0], completions)
    metrics = {
        "accuracy": task_map(task, lambda i: float(_correct(task, *completions[i], rewards[i])),
                             range(len(completions))),
        "reward_mean": rewards,
        "completion_len": mask.sum(1).double().tolist(),
    }
    layout = [task.format_ok(text) for text, _ in completions]  # None: no layout asked for
    if completions and None not in layout:  # the math tasks' tags, the code tasks' fence
        layout = [float(ok) for ok in layout]
        metrics["format_accuracy"] = layout
        metrics["both_accuracy"] = [c * f for c, f in zip(metrics["accuracy"], layout,
                                                          strict=True)]
    values = torch.tensor(list(metrics.values()), dtype=torch.float64)  # [metrics, P*repeats]
    return list(metrics), values.T.reshape(P, repeats, len(metrics))


def _correct(task, completion: str, problem: Problem, reward: float) -> bool:
    """The task's own correctness check where it has one (the math tasks: the answer
    alone, without format bonuses), else a reward of at least 1."""
    verdict = task.correct(completion, problem)
    return reward >= 1.0 if verdict is None else bool(verdict)
