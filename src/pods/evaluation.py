"""Test-set evaluation: the same generation code as training, on held-out problems."""

from __future__ import annotations

from pathlib import Path

import torch

from pods.prompts import render_prompts
from pods.rollout import generate
from pods.tasks import Problem


def evaluate(model, tokenizer, task, problems: list[Problem], temperature: float,
             max_new_tokens: int, chunk: int, seed: int = 0) -> dict[str, float]:
    """Accuracy (mean reward == 1) and mean completion length over ``problems``.

    Sampling draws from a forked RNG seeded with ``seed``, so evaluating never changes
    the training run's random stream (a resumed run stays identical to an uninterrupted one).
    """
    was_training = model.training
    model.eval()
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    texts, special = render_prompts(tokenizer, task, problems)
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        out = generate(model, tokenizer, texts, 1, temperature, max_new_tokens, chunk,
                       add_special_tokens=special)
    model.train(was_training)
    pairs = list(zip(out.texts, problems, strict=True))
    total = max(len(problems), 1)
    correct = [_correct(task, text, p) for text, p in pairs]
    result = {
        "eval/accuracy": sum(correct) / total,
        "eval/reward_mean": sum(task.reward(text, p) for text, p in pairs) / total,
        "eval/completion_len": out.completion_mask.sum(1).float().mean().item(),
        "eval/problems": len(problems),
    }
    if hasattr(task, "format_ok"):  # tasks that ask for a layout (the math tasks' tags)
        layout = [task.format_ok(text) for text, _ in pairs]
        result["eval/format_accuracy"] = sum(layout) / total
        both = [a and b for a, b in zip(correct, layout, strict=True)]
        result["eval/both_accuracy"] = sum(both) / total
    return result


def _correct(task, completion: str, problem: Problem) -> bool:
    """The task's own correctness check where it has one (the math tasks: the answer
    alone, without format bonuses), else a reward of at least 1."""
    if hasattr(task, "correct"):
        return bool(task.correct(completion, problem))
    return task.reward(completion, problem) >= 1.0


def evaluate_checkpoint(path: str | Path, eval_size: int | None = None,
                        temperature: float | None = None, device: str = "auto") -> dict:
    """Evaluate a run folder's newest checkpoint (or a checkpoint folder) on its task's
    test split; the task and generation settings come from the run's config.yaml."""
    from pods.checkpoint import latest_checkpoint
    from pods.config import from_dict, load_yaml
    from pods.policy import load_policy, resolve_device
    from pods.prompts import drop_long_prompts
    from pods.tasks import get_task

    path = Path(path)
    checkpoint = latest_checkpoint(path)
    if checkpoint is None:
        raise ValueError(f"{path} holds no complete checkpoint (expected a run folder with "
                         f"checkpoints/latest, or a checkpoints/step_N folder).")
    run_dir = checkpoint.parent.parent
    if not (run_dir / "config.yaml").is_file():
        raise ValueError(f"{run_dir} has no config.yaml to tell the task of {checkpoint}.")
    cfg = from_dict(load_yaml(run_dir / "config.yaml"))
    task = get_task(cfg.task, cfg.task_options())
    model, tokenizer = load_policy(str(checkpoint / "model"), task, resolve_device(device))
    problems, dropped = drop_long_prompts(tokenizer, task, task.test(), cfg.max_prompt_tokens)
    problems = problems[:eval_size]
    temperature = cfg.eval_temperature if temperature is None else temperature
    result = evaluate(model, tokenizer, task, problems, temperature, cfg.max_new_tokens,
                      cfg.gen_batch_size, seed=cfg.seed)
    return {"checkpoint": str(checkpoint), **result, "eval/dropped_long_prompts": dropped}
