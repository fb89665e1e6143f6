"""`pods eval`: a run's newest readable checkpoint, a checkpoint folder or a model, on one or
more tasks' test sets (pods.evaluation), and the table it prints."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class EvalRequest:
    """What `pods eval` evaluates, and how."""

    path: str  # a run folder, a checkpoints/step_N folder, or a model (any --model source)
    tasks: tuple[str, ...] = ()  # test sets; () = the run's task (a model needs one)
    repeats: int | None = None  # samplings of each test set; None: a run's own
    # eval_repeats, a model's the paper's 5
    temperature: float | None = None  # 0 = greedy; None: a run's own eval_temperature, a
    # model's the paper's 0.9
    size: int | None = None  # test problems per set; None: a run's own eval_size for its
    # task (the problems its training evaluations scored), else all
    device: str = "auto"
    fields: dict[str, Any] = field(default_factory=dict)  # flat config keys to set: a
    # custom task's data_file and reward_fn, a model's gguf_file, max_new_tokens, engine...

    def __post_init__(self):
        if (self.repeats is not None and self.repeats < 1) or \
                (self.temperature is not None and self.temperature < 0):
            raise ValueError("--repeats must be >= 1 and --eval-temperature >= 0 "
                             "(0 = greedy).")


def evaluate_path(request: EvalRequest, log=None) -> dict[str, dict]:
    """`pods eval`: a run folder's newest readable checkpoint, a checkpoint folder, or a
    model (any --model source: hub id, folder, .gguf file, ...) on one or more tasks' test
    sets. ``log`` (default: stderr) says which checkpoint could not be read, if any.
    Returns {"model": what was loaded, task: metrics, ...}."""
    from pods.evaluation import Sampling, eval_slice, evaluate
    from pods.models.precision import plan
    from pods.rollout import EngineSpec, make_engine, resolve_engine
    from pods.rollout.prompts import drop_long_prompts
    from pods.runtime.device import resolve_device
    from pods.tasks import get_task

    log = log or (lambda line: print(line, file=sys.stderr))
    checkpoints, cfg = _config(request)
    on = resolve_device(request.device)
    resolve_engine(cfg.rollout, on)  # an unusable engine fails before loading
    tasks = {name: get_task(name, cfg.task, cfg.run.seed)  # a wrong name fails before loading
             for name in request.tasks or (cfg.task.name,)}
    source, model, tokenizer = _load(request.path, checkpoints, cfg, on, log)
    lengths = {name: _new_tokens(name, cfg, request) for name in tasks}
    spec = EngineSpec(cfg.rollout, on, cfg.task.max_prompt_tokens + max(lengths.values()),
                      seed=cfg.run.seed,
                      dtype=plan(cfg.model, on).sampling)
    engine = make_engine(spec, model, tokenizer)
    temperature, repeats = _protocol(request, cfg, checkpoints is not None)
    results: dict[str, Any] = {"model": str(source)}
    for name, task in tasks.items():
        sampling = Sampling(temperature, lengths[name], seed=cfg.run.seed, repeats=repeats)
        problems, dropped = drop_long_prompts(engine.tokenizer, task, task.test(),
                                              cfg.task.max_prompt_tokens)
        size = _size(request, cfg, checkpoints is not None and name == cfg.task.name, log)
        chosen = eval_slice(problems, cfg.eval.offset, size)
        result = evaluate(engine, task, chosen, sampling)
        results[name] = {**result, "eval/dropped_long_prompts": dropped,
                         "eval/temperature": temperature,
                         "eval/max_new_tokens": lengths[name]}
    return results


PAPER = (0.9, 5)  # the paper's evaluation: 5 samplings at temperature 0.9


def _protocol(request: EvalRequest, cfg, run: bool) -> tuple[float, int]:
    """(temperature, repeats): the flags', else a run's own evaluation settings (so its
    checkpoint scores as its training evaluations did), else the paper's."""
    default = (cfg.eval.temperature, cfg.eval.repeats) if run else PAPER
    return (default[0] if request.temperature is None else request.temperature,
            default[1] if request.repeats is None else request.repeats)


def _size(request: EvalRequest, cfg, own: bool, log) -> int | None:
    """Test problems to score: --eval-size, else for a run's own task its eval_size (the
    same problems in the same order as its training evaluations: the test split, prompts
    over max_prompt_tokens dropped, from eval_offset), said in a line; else all."""
    if request.size is not None or not own:
        return request.size
    size = cfg.eval.size
    log(f"{cfg.task.name}: the problems training evaluated: "
        f"{'all' if size is None else f'the first {size}'} of the test split from offset "
        f"{cfg.eval.offset} (eval_size, eval_offset of the run; --eval-size N changes it)")
    return size


def _new_tokens(task: str, cfg, request: EvalRequest) -> int:
    """A test set's completion length: --max-new-tokens, else the run's for its own task,
    else the recipe's for that task (the language-model recipe's by task; the embedded
    recipe's own), whatever the order of --task."""
    from pods.config.recipes import recipe_values

    if "max_new_tokens" in request.fields:
        return request.fields["max_new_tokens"]
    if task == cfg.task.name:
        return cfg.rollout.max_new_tokens
    values = recipe_values(cfg.run.recipe, cfg.model.name, task, cfg.model.lora_rank)
    return values.get("max_new_tokens", cfg.rollout.max_new_tokens)


def _config(request: EvalRequest):
    """(a run's checkpoints to try, newest first, or None for a plain model; the
    TrainConfig to evaluate with, its names checked before anything is loaded)."""
    from pods.config import from_dict
    from pods.runs.checkpoints import checkpoints_and_config, latest_checkpoint
    from pods.train.checks import check

    checkpoints = None
    if latest_checkpoint(request.path) is not None:
        checkpoints, cfg = checkpoints_and_config(request.path)
    else:  # a plain model: evaluate it as it is (e.g. the base model before RL)
        from pods.models.source import check_source

        check_source(request.path, request.fields.get("gguf_file"))  # runs/none: at once
        if not request.tasks:
            raise ValueError(f"{request.path} is not a run or checkpoint folder; to evaluate "
                             f"it as a model, name the test sets with --task (e.g. --task "
                             f"gsm8k).")
        cfg = from_dict({"model": request.path, "task": request.tasks[0], **request.fields})
    return checkpoints, check(cfg.replace(**request.fields), training=False)  # task and
    # engine names, say; float16 may evaluate what it may not train


def _load(path: str, checkpoints: list[Path] | None, cfg, device, log):
    """(what was loaded, model, tokenizer): the model source ``path`` as --model reads it
    (``checkpoints`` None), or the newest readable of ``checkpoints`` (an unreadable one is
    passed over, and said, as resume does)."""
    from pods.models.policy import load_policy, load_saved_policy
    from pods.runs.checkpoints import first_readable

    if checkpoints is None:
        return (path, *load_policy(path, device, cfg.model))
    checkpoint, (model, tokenizer) = first_readable(
        checkpoints, lambda c: load_saved_policy(c / "model", cfg.model.name, device,
                                                 cfg.model), log)
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
             "| test set | problems | temperature | repeats | new tokens | accuracy | "
             "format accuracy | reward | completion tokens | prompts dropped (too long) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        if name != "model":
            lines.append(f"| {name} | {r['eval/problems']} | {r['eval/temperature']:g} | "
                         f"{r['eval/repeats']} | {r['eval/max_new_tokens']} | "
                         f"{percent(r, 'eval/accuracy')} | "
                         f"{percent(r, 'eval/format_accuracy')} | "
                         f"{r['eval/reward_mean']:.3f} | {r['eval/completion_len']:.1f} | "
                         f"{r['eval/dropped_long_prompts']} |")
    return "\n".join(lines)

