"""Test-set evaluation: the same generation code as training, on held-out problems.

The paper's protocol (REFERENCE.md): the whole test set is sampled k times (5) at
temperature 0.9; each metric is computed per repeat and reported as the mean over repeats
with its standard error (``<metric>_sem``). Metrics: answer accuracy, format accuracy (tasks
that ask for a layout), both, and mean completion length in tokens.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pods.prompts import render_prompts
from pods.rollout import generate
from pods.tasks import Problem


def evaluate(model, tokenizer, task, problems: list[Problem], temperature: float,
             max_new_tokens: int, chunk: int, seed: int = 0,
             repeats: int = 1) -> dict[str, float]:
    """Metrics over ``repeats`` samplings of ``problems`` (mean and SEM over repeats).

    Sampling draws from a forked RNG seeded with ``seed``, so evaluating never changes
    the training run's random stream (a resumed run stays identical to an uninterrupted one).
    """
    was_training = model.training
    model.eval()
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    texts, special = render_prompts(tokenizer, task, problems)
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        out = generate(model, tokenizer, texts, repeats, temperature, max_new_tokens, chunk,
                       add_special_tokens=special)  # row i*repeats + r: problem i, repeat r
    model.train(was_training)
    per_repeat = _per_repeat(task, problems, out.texts, out.completion_mask, repeats)
    result: dict[str, float] = {}
    for key, values in per_repeat.items():  # values: [repeats]
        result[f"eval/{key}"] = float(np.mean(values))
        if repeats > 1:
            result[f"eval/{key}_sem"] = float(np.std(values, ddof=1) / np.sqrt(repeats))
    return {**result, "eval/problems": len(problems), "eval/repeats": repeats}


def _per_repeat(task, problems, texts, mask, repeats) -> dict[str, np.ndarray]:
    P = len(problems)
    grid = lambda values: np.asarray(values, dtype=float).reshape(P, repeats)  # noqa: E731
    completions = [(texts[i], problems[i // repeats]) for i in range(P * repeats)]
    correct = grid([_correct(task, text, p) for text, p in completions])  # [P, repeats]
    metrics = {
        "accuracy": correct,
        "reward_mean": grid([task.reward(text, p) for text, p in completions]),
        "completion_len": grid(mask.sum(1).float().tolist()),
    }
    if hasattr(task, "format_ok"):  # tasks that ask for a layout (the math tasks' tags)
        layout = grid([task.format_ok(text) for text, _ in completions])
        metrics["format_accuracy"] = layout
        metrics["both_accuracy"] = correct * layout
    return {k: v.mean(axis=0) if P else np.zeros(repeats) for k, v in metrics.items()}


def _correct(task, completion: str, problem: Problem) -> bool:
    """The task's own correctness check where it has one (the math tasks: the answer
    alone, without format bonuses), else a reward of at least 1."""
    if hasattr(task, "correct"):
        return bool(task.correct(completion, problem))
    return task.reward(completion, problem) >= 1.0


def evaluate_path(path: str, tasks: list[str] | None = None, repeats: int = 5,
                  temperature: float = 0.9, eval_size: int | None = None,
                  max_new_tokens: int | None = None, data_dir: str | None = None,
                  device: str = "auto") -> dict[str, dict]:
    """`pods eval`: a run folder's newest checkpoint, a checkpoint folder, or a model (hub id
    or folder) on one or more tasks' test sets. Returns {task: metrics}."""
    from pods.checkpoint import checkpoint_and_config, latest_checkpoint
    from pods.config import TrainConfig
    from pods.policy import load_saved_policy, resolve_device
    from pods.prompts import drop_long_prompts
    from pods.tasks import get_task

    if repeats < 1 or temperature < 0:
        raise ValueError("--repeats must be >= 1 and --eval-temperature >= 0 (0 = greedy).")
    if latest_checkpoint(path) is not None:
        checkpoint, cfg = checkpoint_and_config(path)
        source = checkpoint / "model"
    else:  # a plain model: evaluate it as it is (e.g. the base model before RL)
        if not tasks:
            raise ValueError(f"{path} is not a run or checkpoint folder; to evaluate it as a "
                             f"model, name the test sets with --task (e.g. --task gsm8k).")
        cfg = TrainConfig(model=path, task=tasks[0])
        source = Path(path)
    overrides = {k: v for k, v in dict(data_dir=data_dir, max_new_tokens=max_new_tokens)
                 .items() if v is not None}
    cfg = cfg.replace(**overrides)
    results: dict[str, dict] = {}
    model = tokenizer = None
    for name in tasks or [cfg.task]:
        task = get_task(name, cfg.replace(task=name).task_options())
        if model is None:
            model, tokenizer = load_saved_policy(source, cfg.model, task,
                                                 resolve_device(device), cfg.model_options())
        problems, dropped = drop_long_prompts(tokenizer, task, task.test(),
                                              cfg.max_prompt_tokens)
        result = evaluate(model, tokenizer, task, problems[:eval_size], temperature,
                          cfg.max_new_tokens, cfg.gen_batch_size, seed=cfg.seed,
                          repeats=repeats)
        results[name] = {**result, "eval/dropped_long_prompts": dropped}
    return {"model": str(source), **results}
