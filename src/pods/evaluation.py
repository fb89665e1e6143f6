"""Test-set evaluation: the same generation code as training, on held-out problems.

The paper's protocol (arXiv 2504.13818 and its official code): the whole test set is sampled
k times (5) at temperature 0.9; each metric is computed per repeat and reported as the mean
over repeats with its standard error (``<metric>_sem``). Metrics: answer accuracy, format
accuracy (tasks that ask for a layout), both, and mean completion length in tokens.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from pods.rollout import Engine, sample_keys
from pods.rollout.prompts import render_prompts
from pods.runtime.distributed import Dist
from pods.tasks import Problem
from pods.tasks.scoring import Scorer, task_map


def evaluate(engine: Engine, task, problems: list[Problem], temperature: float,
             max_new_tokens: int, seed: int = 0, repeats: int = 1,
             dist: Dist | None = None, scorer: Scorer | None = None) -> dict[str, float]:
    """Metrics over ``repeats`` samplings of ``problems`` (mean and SEM over repeats), with
    the rollouts from ``engine`` (pods.rollout: the training run's own engine).

    Sampling is keyed by (seed, problem index) (see pods.rollout), so the result does not
    depend on batching, never touches the training run's random stream, and is the same
    when ``dist`` splits the problems over the ranks of a data-parallel run."""
    dist = dist or Dist(world=1)
    T = len(problems)
    per = -(-T // dist.world)  # problems per rank; the last rank's are padded by repeats
    indices = [min(dist.rank * per + i, T - 1) for i in range(per)] if T else []
    local = [problems[i] for i in indices]
    texts, special = render_prompts(engine.tokenizer, task, local)
    out = engine.generate(texts, repeats, temperature, max_new_tokens,
                          sample_keys(seed, torch.tensor(indices)), special)
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


def evaluate_path(path: str, tasks: list[str] | None = None, repeats: int = 5,
                  temperature: float = 0.9, eval_size: int | None = None,
                  max_new_tokens: int | None = None, data_dir: str | None = None,
                  device: str = "auto", engine: str | None = None,
                  fields: dict | None = None, log=None) -> dict[str, dict]:
    """`pods eval`: a run folder's newest readable checkpoint, a checkpoint folder, or a
    model (any --model source: hub id, folder, .gguf file, ...) on one or more tasks' test
    sets. ``fields``: flat config keys to set, such as a custom task's data_file and
    reward_fn or a model's gguf_file. ``log`` (default: stderr) says which checkpoint could
    not be read, if any. Returns {task: metrics}."""
    from pods.config import from_dict
    from pods.models.precision import compute_dtype
    from pods.rollout import EngineSpec, make_engine, resolve_engine
    from pods.rollout.prompts import drop_long_prompts
    from pods.runtime.device import resolve_device
    from pods.tasks import get_task
    from pods.train.checkpoint import checkpoints_and_config, latest_checkpoint
    from pods.train.checks import check

    log = log or (lambda line: print(line, file=sys.stderr))
    if repeats < 1 or temperature < 0:
        raise ValueError("--repeats must be >= 1 and --eval-temperature >= 0 (0 = greedy).")
    checkpoints = None  # a run's, newest first: the first readable one is evaluated
    if latest_checkpoint(path) is not None:
        checkpoints, cfg = checkpoints_and_config(path)
        source = checkpoints[0] / "model"
    else:  # a plain model: evaluate it as it is (e.g. the base model before RL)
        if not tasks:
            raise ValueError(f"{path} is not a run or checkpoint folder; to evaluate it as a "
                             f"model, name the test sets with --task (e.g. --task gsm8k).")
        cfg = from_dict({"model": path, "task": tasks[0], **(fields or {})})
        source = None
    overrides = {k: v for k, v in dict(data_dir=data_dir, max_new_tokens=max_new_tokens,
                                       engine=engine).items() if v is not None}
    cfg = check(cfg.replace(**overrides, **(fields or {})))  # task and engine names, say
    on = resolve_device(device)
    max_tokens = cfg.rollout.max_new_tokens
    resolve_engine(cfg.rollout, on)  # an unusable engine fails before loading
    results: dict[str, dict] = {}
    rollout = None
    for name in tasks or [cfg.task.name]:
        task = get_task(name, cfg.task, cfg.run.seed)
        if rollout is None:
            source, model, tokenizer = _load(path, source, checkpoints, cfg, task, on, log)
            spec = EngineSpec(cfg.rollout, on, cfg.task.max_prompt_tokens + max_tokens,
                              seed=cfg.run.seed, dtype=compute_dtype(cfg.model.mixed_precision))
            rollout = make_engine(spec, model, tokenizer)
        problems, dropped = drop_long_prompts(rollout.tokenizer, task, task.test(),
                                              cfg.task.max_prompt_tokens)
        result = evaluate(rollout, task, problems[:eval_size], temperature, max_tokens,
                          seed=cfg.run.seed, repeats=repeats)
        results[name] = {**result, "eval/dropped_long_prompts": dropped}
    return {"model": str(source), **results}


def _load(path: str, source: Path | None, checkpoints: list[Path] | None, cfg, task, device,
          log):
    """(what was loaded, model, tokenizer): the model source ``path`` as --model reads it
    (``source`` None), a checkpoint folder ``source``, or the newest readable of a run's
    ``checkpoints`` (an unreadable one is passed over, and said, as resume does)."""
    from pods.models.policy import load_policy, load_saved_policy
    from pods.train.checkpoint import first_readable

    if source is None:
        return (path, *load_policy(path, device, cfg.model))

    def load(model_dir: Path):
        return load_saved_policy(model_dir, cfg.model.name, device, cfg.model)

    if not checkpoints:
        return (source, *load(source))
    checkpoint, (model, tokenizer) = first_readable(checkpoints, lambda c: load(c / "model"),
                                                    log)
    return checkpoint / "model", model, tokenizer


def results_table(results: dict) -> str:
    """`pods eval`'s closing table: one row per test set; accuracy as the mean over repeats
    with its SEM when there are several."""
    def percent(r: dict, key: str) -> str:
        if key not in r:
            return "-"
        sem = f" ± {100 * r[key + '_sem']:.1f}" if key + "_sem" in r else ""
        return f"{100 * r[key]:.1f}%{sem}"

    lines = [f"model: {results['model']}",
             "| test set | problems | repeats | accuracy | format accuracy | reward | "
             "completion tokens | prompts dropped (too long) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        if name != "model":
            lines.append(f"| {name} | {r['eval/problems']} | {r['eval/repeats']} | "
                         f"{percent(r, 'eval/accuracy')} | "
                         f"{percent(r, 'eval/format_accuracy')} | "
                         f"{r['eval/reward_mean']:.3f} | {r['eval/completion_len']:.1f} | "
                         f"{r['eval/dropped_long_prompts']} |")
    return "\n".join(lines)

