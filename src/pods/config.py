"""Training configuration: one frozen dataclass, filled from defaults, a YAML file and CLI flags.

Each field is documented once, in its ``help`` metadata; ``pods train --help`` prints it.
Baselines are configurations of one loop:
    GRPO        n == m                       (e.g. n=16, m=16)
    GRPO-PODS   n > m with a rule            (e.g. n=64, m=16, rule=max_variance)
    GRPO-GA     n == m large, small micro-batch (e.g. n=64, m=64, micro_batch_size=128)
    batch-level n > m, selection=batch: P*m kept across the step's prompts (beyond the paper)
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pods.core.advantages import SCALES
from pods.core.downsample import RULES
from pods.core.loss import NORMS
from pods.models.policy import DTYPES
from pods.rollout import ENGINES
from pods.tasks.scoring import POLICIES
from pods.tracking import TRACKERS, unknown_trackers
from pods.train.schedule import SCHEDULES
from pods.train.selection import SCOPES


def _f(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class TrainConfig:
    # what to train
    model: str = _f("tiny", "Causal LM: a Hugging Face hub id, a local folder, or 'tiny' (the "
                    "embedded model, built and warmed up locally; needs no network).")
    task: str = _f("arithmetic", "Task (data + verifiable reward): arithmetic (embedded), "
                   "gsm8k, math (test: MATH-500), amc23 (test only), code (LiveCodeBench), "
                   "mbpp, humaneval (test only), chemistry (SciKnowEval), custom.")
    data_dir: str | None = _f(None, "Folder of local data files for the hub tasks "
                              "(offline machines); None = the Hugging Face hub.")
    data_file: str | None = _f(None, "custom task: JSONL/JSON/Parquet records with 'prompt' "
                               "and 'answer' (optional 'split': train/test).")
    reward_fn: str | None = _f(None, "custom task: reward as module:function, called with "
                               "(completion, answer) -> float; None = the math reward.")
    reward_errors: str = _f("raise", "A reward function that raises or returns no finite "
                            "number: raise (stop, naming the function, problem and "
                            "completion, after a checkpoint of the last complete step) or "
                            "zero (score 0, count rollout/reward_errors, warn once).")
    code_test_timeout: float = _f(2.0, "Code tasks: seconds each test may run (sandbox).")
    code_memory_mb: int = _f(512, "Code tasks: memory limit of each test's process, MiB.")
    code_max_tests: int | None = _f(8, "Code tasks: tests run per problem per step (the "
                                    "first ones); None = all. Evaluation runs all.")
    code_reward: str = _f("fraction", "Code tasks: reward = fraction of tests passed, or "
                          "all (1 only when every test passes).")
    sandbox_workers: int | None = _f(None, "Code tasks: rollouts scored at once, each in its "
                                     "own sandboxed processes; None = the CPU count.")
    correctness_weight: float = _f(1.0, "Math rewards: reward for a correct answer.")
    format_weight: float = _f(0.1, "Math rewards: weight of the <think>/<answer> format bonus "
                              "(0 with tag_weight 0 = correctness only).")
    tag_weight: float = _f(0.1, "Math rewards: weight of the tag-count bonus (0.25 per tag).")
    max_prompt_tokens: int = _f(512, "Prompts longer than this (in tokens) are dropped and "
                                "counted.")
    dtype: str = _f("auto", "Weights dtype: float32, bfloat16, float16, or auto (bfloat16 on "
                    "a GPU that supports it, else float32).")
    lora_rank: int = _f(0, "LoRA rank; 0 = full fine-tuning (the paper's single-GPU runs: 64).")
    lora_alpha: float = _f(64.0, "LoRA alpha (the paper: 64).")
    lora_dropout: float = _f(0.0, "LoRA dropout.")
    lora_target_modules: str = _f("q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                                  "Comma-separated module names that get LoRA adapters.")
    gradient_checkpointing: bool = _f(False, "Recompute activations in the backward pass "
                                      "(less memory, more time).")
    # PODS
    prompts_per_step: int = _f(8, "P: prompts sampled per step.")
    n: int = _f(64, "Rollouts generated per prompt.")
    m: int = _f(16, "Rollouts kept per prompt for the update (m == n is plain GRPO).")
    rule: str = _f("max_variance", "Down-sampling rule; see pods.core.downsample.RULES.")
    selection: str = _f("group", "group: keep m of each prompt's n (the paper); batch: keep "
                        "P*m in all, across the step's prompts, maximising the total "
                        "within-group reward variance mass (0 or 2+ per prompt; beyond the "
                        "paper, needs rule max_variance; see pods.core.batch_downsample).")
    max_kept_per_group: int | None = _f(None, "selection batch: most rollouts one prompt may "
                                        "keep; None = n.")
    # optimisation
    lr: float = _f(6e-4, "AdamW learning rate (the peak, under a schedule).")
    lr_schedule: str = _f("cosine", "Learning-rate schedule over the budget (max_steps or "
                          "max_time, whichever ends first): constant, linear or cosine decay "
                          "to lr_floor * lr (see pods.train.schedule).")
    warmup_frac: float = _f(0.05, "Fraction of the budget over which the lr rises linearly "
                            "from 0 to lr, before the schedule's decay.")
    lr_floor: float = _f(0.1, "The lr at the end of a linear or cosine schedule, as a "
                         "fraction of lr.")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    adam_beta1: float = _f(0.9, "AdamW beta1.")
    adam_beta2: float = _f(0.999, "AdamW beta2 (the paper: 0.99).")
    max_grad_norm: float = _f(1.0, "Gradient clipping norm; 0 disables clipping.")
    micro_batch_size: int | None = _f(None, "Sequences per forward/backward pass (gradient "
                                      "accumulation); None = all P*m kept in one pass.")
    num_iterations: int = _f(1, "Optimizer steps per generation batch; > 1 reuses the "
                             "rollouts with the clipped ratio against the old policy.")
    clip_eps: float = _f(0.2, "Lower (and default upper) clip range of the ratio.")
    clip_eps_high: float | None = _f(None, "Upper clip range (DAPO clip-higher); None = clip_eps.")
    beta: float = _f(0.0, "KL penalty weight to the starting policy (k3); 0 as in the paper.")
    loss_norm: str = _f("sequence", "Loss normalisation: sequence (paper), token (DAPO), "
                        "constant (Dr. GRPO).")
    adv_scale: str = _f("group", "Advantage scaling: group std (GRPO), batch std, or none "
                        "(Dr. GRPO).")
    # generation
    temperature: float = _f(1.0, "Sampling temperature of the rollouts.")
    max_new_tokens: int = _f(8, "Completion length limit in tokens.")
    gen_batch_size: int = _f(512, "Most sequences generated at once (hf: per generate() "
                             "call; vllm: max_num_seqs).")
    engine: str = _f("auto", "Generation engine for training and evaluation: hf "
                     "(transformers generate on the trainer's module), vllm (vLLM in this "
                     "process, weights synced after every step), or auto (vllm where it is "
                     "installed and the device is a GPU, else hf).")
    vllm_gpu_memory_utilization: float = _f(0.3, "vllm engine: the fraction of GPU memory "
                                            "vLLM takes (weights + KV cache; the rest is the "
                                            "trainer's); on a CPU, vLLM reads it as the "
                                            "fraction of CPU memory it may reserve.")
    vllm_sleep: bool = _f(False, "vllm engine on a GPU: release vLLM's memory during each "
                          "update (sleep mode) and restore it for the next generation.")
    # budget, evaluation, checkpoints
    max_steps: int | None = _f(800, "Stop after this many optimizer steps (None: no limit); "
                                "a step budget makes the lr schedule and the result "
                                "independent of the machine's speed.")
    max_time: float | None = _f(None, "Stop after this many training seconds (None: no "
                                "limit); with max_steps too, whichever comes first.")
    eval_every: float = _f(5.0, "Evaluate every this many training seconds (and at time 0).")
    eval_size: int | None = _f(500, "Test problems per evaluation; None = the whole test split.")
    eval_temperature: float = _f(0.0, "Evaluation sampling temperature; 0 = greedy (the "
                                 "paper: 0.9).")
    eval_repeats: int = _f(1, "Samplings of the test set per evaluation, reported as mean "
                           "and SEM (the paper: 5).")
    checkpoint_every: float = _f(60.0, "Checkpoint every this many training seconds (and at "
                                 "the end).")
    # bookkeeping
    seed: int = _f(0, "Seed of prompts, sampling and selection.")
    out_dir: str = _f("runs", "Folder under which the run folder is made.")
    run_name: str | None = _f(None, "Run folder name; None = a timestamp and the n/m/rule.")
    device: str = _f("auto", "cpu, cuda, cuda:1, ... or auto (cuda when available).")
    progress: bool = _f(True, "Show a progress bar.")
    report_to: str = _f("none", "Experiment trackers that also get every metric (rank 0): "
                        "none, or a comma-separated list (a list in YAML) of tensorboard, "
                        "wandb, trackio, mlflow; each is an extra, e.g. pods-rl[wandb].")
    tracker_project: str = _f("pods", "Trackers: the W&B / Trackio project, MLflow experiment.")
    tracker_group: str | None = _f(None, "Trackers: the run's group (pods compare sets "
                                   "comparison-variant); the tracker's run name is the "
                                   "group, a dash and the run folder's name.")
    dist_timeout: float = _f(1800.0, "Distributed runs: seconds a rank waits for the others "
                             "in a collective before the run stops with an error.")

    def __post_init__(self) -> None:
        if isinstance(self.report_to, list | tuple):  # YAML and Python may give a list
            object.__setattr__(self, "report_to", ",".join(map(str, self.report_to)))
        for problem in _problems(self):
            raise ValueError(f"invalid config: {problem}")

    @property
    def kept_per_step(self) -> int:
        return self.prompts_per_step * self.m

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def model_options(self):
        from pods.models.policy import ModelOptions

        return ModelOptions(dtype=self.dtype, lora_rank=self.lora_rank,
                            lora_alpha=self.lora_alpha, lora_dropout=self.lora_dropout,
                            lora_target_modules=self.lora_target_modules,
                            gradient_checkpointing=self.gradient_checkpointing)

    def engine_options(self):
        from pods.rollout import EngineOptions

        return EngineOptions(engine=self.engine, gen_batch_size=self.gen_batch_size,
                             max_model_len=self.max_prompt_tokens + self.max_new_tokens,
                             vllm_gpu_memory_utilization=self.vllm_gpu_memory_utilization,
                             vllm_sleep=self.vllm_sleep, seed=self.seed)

    def task_options(self):
        from pods.tasks import TaskOptions

        return TaskOptions(data_dir=self.data_dir, data_file=self.data_file,
                           reward_fn=self.reward_fn,
                           correctness_weight=self.correctness_weight,
                           format_weight=self.format_weight,
                           tag_weight=self.tag_weight, seed=self.seed,
                           code_test_timeout=self.code_test_timeout,
                           code_memory_mb=self.code_memory_mb,
                           code_max_tests=self.code_max_tests, code_reward=self.code_reward,
                           sandbox_workers=self.sandbox_workers)

    def replace(self, **overrides: Any) -> TrainConfig:
        return from_dict({**self.to_dict(), **overrides})


def _problems(c: TrainConfig):
    """Yield a message for each invalid field (the first one is raised)."""
    from pods.tasks import TASKS  # deferred: tasks import the config-free core only

    typed = [p for p in (type_problem(f, getattr(c, f)) for f in FIELDS) if p]
    if typed:  # the checks below compare values, which needs the right types
        yield from typed
        return
    for name in ("prompts_per_step", "n", "m", "max_new_tokens", "gen_batch_size",
                 "num_iterations", "max_prompt_tokens", "eval_repeats"):
        if getattr(c, name) < 1:
            yield f"{name}={getattr(c, name)} must be at least 1."
    if c.m > c.n:
        yield f"m={c.m} is larger than n={c.n}: keep at most the n rollouts generated " \
              f"(set --m {c.n} or raise --n)."
    if c.rule not in RULES:
        yield f"unknown rule {c.rule!r}; use one of {', '.join(sorted(RULES))}."
    if c.selection not in SCOPES:
        yield f"unknown selection {c.selection!r}; use one of {', '.join(SCOPES)}."
    if c.selection == "batch" and c.rule != "max_variance":
        yield f"selection batch chooses max-variance subsets of any size, not rule " \
              f"{c.rule!r}; set rule max_variance or selection group."
    if c.max_kept_per_group is not None and (c.selection != "batch" or
                                             not 2 <= c.max_kept_per_group <= c.n):
        yield f"max_kept_per_group={c.max_kept_per_group} needs selection batch and a value " \
              f"from 2 to n={c.n} (or None)."
    if c.task not in TASKS:
        yield f"unknown task {c.task!r}; use one of {', '.join(sorted(TASKS))}."
    if c.loss_norm not in NORMS:
        yield f"unknown loss_norm {c.loss_norm!r}; use one of {', '.join(NORMS)}."
    if c.adv_scale not in SCALES:
        yield f"unknown adv_scale {c.adv_scale!r}; use one of {', '.join(SCALES)}."
    if c.max_steps is None and c.max_time is None:
        yield "no budget: set max_steps and/or max_time."
    for name in ("max_steps", "max_time", "eval_size", "micro_batch_size"):
        value = getattr(c, name)
        if value is not None and value <= 0:
            yield f"{name}={value} must be positive (or None for no limit)."
    for name in ("eval_every", "checkpoint_every", "lr", "temperature", "clip_eps",
                 "dist_timeout"):
        if getattr(c, name) <= 0:
            yield f"{name}={getattr(c, name)} must be positive."
    if c.micro_batch_size is not None and c.micro_batch_size > c.kept_per_step:
        yield f"micro_batch_size={c.micro_batch_size} is larger than the batch of kept " \
              f"rollouts P*m = {c.prompts_per_step}*{c.m} = {c.kept_per_step}; lower it."
    if min(c.beta, c.weight_decay, c.max_grad_norm, c.eval_temperature, c.format_weight,
           c.tag_weight, c.correctness_weight) < 0:
        yield "beta, weight_decay, max_grad_norm, eval_temperature and the reward weights " \
              "must be >= 0."
    if not (0 <= c.adam_beta1 < 1 and 0 <= c.adam_beta2 < 1):
        yield "adam_beta1 and adam_beta2 must be in [0, 1)."
    if c.lr_schedule not in SCHEDULES:
        yield f"unknown lr_schedule {c.lr_schedule!r}; use one of {', '.join(SCHEDULES)}."
    if not (0 <= c.warmup_frac < 1 and 0 <= c.lr_floor <= 1):
        yield f"warmup_frac={c.warmup_frac} must be in [0, 1) and lr_floor={c.lr_floor} " \
              f"in [0, 1] (fractions of the budget and of lr)."
    if c.reward_errors not in POLICIES:
        yield f"unknown reward_errors {c.reward_errors!r}; use {' or '.join(POLICIES)}."
    for name in unknown_trackers(c.report_to):
        yield f"unknown tracker {name!r} in report_to; use none or a comma-separated list " \
              f"of {', '.join(TRACKERS)}."
    if c.engine not in ENGINES:
        yield f"unknown engine {c.engine!r}; use one of {', '.join(ENGINES)}."
    if not 0 < c.vllm_gpu_memory_utilization <= 1:
        yield f"vllm_gpu_memory_utilization={c.vllm_gpu_memory_utilization} must be in " \
              f"(0, 1]: the fraction of GPU memory vLLM may take."
    if c.dtype not in DTYPES:
        yield f"unknown dtype {c.dtype!r}; use one of {', '.join(DTYPES)}."
    if c.lora_rank < 0 or c.lora_alpha <= 0 or not 0 <= c.lora_dropout < 1:
        yield "lora_rank must be >= 0 (0 = full fine-tuning), lora_alpha > 0 and " \
              "0 <= lora_dropout < 1."
    if c.model == "tiny" and c.task not in ("arithmetic",) and c.task in TASKS:
        yield f"the embedded model 'tiny' only knows the arithmetic task's characters; for " \
              f"task {c.task!r} pass a real model with --model (hub id or folder)."
    if c.task == "custom" and not c.data_file:
        yield "task custom needs --data-file FILE (records with 'prompt' and 'answer')."
    if c.code_test_timeout <= 0 or c.code_memory_mb < 32:
        yield "code_test_timeout must be positive and code_memory_mb at least 32."
    for name in ("code_max_tests", "sandbox_workers"):
        if getattr(c, name) is not None and getattr(c, name) < 1:
            yield f"{name}={getattr(c, name)} must be at least 1 (or None)."
    if c.code_reward not in ("fraction", "all"):
        yield f"unknown code_reward {c.code_reward!r}; use fraction or all."
    if c.reward_fn is not None and len([p for p in c.reward_fn.split(":") if p]) != 2:
        yield f"reward_fn {c.reward_fn!r} must look like module:function."


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def from_dict(values: dict[str, Any]) -> TrainConfig:
    """A config from a mapping of field names; unknown names are an error."""
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown config field(s) {', '.join(unknown)}; "
                         f"known fields: {', '.join(FIELDS)}.")
    return TrainConfig(**values)


def read_yaml(path: str | Path) -> tuple[Any, dict[str, int]]:
    """A YAML file's content and the line of each top-level key; a syntax error is one
    line naming the file, line and column."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} does not exist.")
    text = path.read_text()
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        # where the broken construct starts (PyYAML notices the problem a line later)
        mark = getattr(error, "context_mark", None) or getattr(error, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ValueError(f"{where}: YAML syntax error ({problem}); write one `field: value` "
                         f"per line, with a space after the colon.") from None
    lines = {}
    if isinstance(node, yaml.MappingNode):
        lines = {str(key.value): key.start_mark.line + 1 for key, _ in node.value}
    return data, lines


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A training config file: each field name known and each value of its field's type
    (numbers that YAML reads as text, such as ``3e-4``, are taken as numbers); an error
    names the file and line."""
    data, lines = read_yaml(path)
    data = data or {}
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of field: value.")
    for name, value in data.items():
        where = f"{path}, line {lines.get(str(name), '?')}"
        if name not in FIELDS:
            close = difflib.get_close_matches(str(name), FIELDS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else "see `pods train --help`."
            raise ValueError(f"{where}: unknown field {name!r}; {hint}")
        if name == "report_to" and isinstance(value, list):
            value = ",".join(map(str, value))
        data[name] = value = as_number(name, value)
        problem = type_problem(name, value)
        if problem:
            raise ValueError(f"{where}: {problem}")
    return data


_KINDS = {"int": "a whole number", "float": "a number", "str": "text", "bool": "true or false"}


def type_problem(name: str, value: Any) -> str | None:
    """What is wrong when ``value`` does not fit field ``name``'s type, else None."""
    kinds = [k.strip() for k in str(FIELDS[name].type).split("|")]
    if value is None:
        return None if "None" in kinds else f"{name} must be {_KINDS[kinds[0]]}, not empty."
    fits = {"int": isinstance(value, int), "float": isinstance(value, int | float),
            "str": isinstance(value, str), "bool": isinstance(value, bool)}[kinds[0]]
    if isinstance(value, bool) and kinds[0] != "bool":
        fits = False
    if fits:
        return None
    empty = " (or null)" if "None" in kinds else ""
    return f"{name}={value!r} must be {_KINDS[kinds[0]]}{empty}."


def as_number(name: str, value: Any) -> Any:
    """YAML 1.1 reads 3e-4 (no dot) as text: take such text as the number it spells."""
    if isinstance(value, str) and str(FIELDS[name].type).startswith("float"):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def save_yaml(config: TrainConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))


def _parse_optional(kind: type):
    def parse(text: str):
        return None if text.lower() in ("none", "null") else kind(text)

    parse.__name__ = kind.__name__
    return parse


def _parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per TrainConfig field (--max-time and --max_time both work); unset flags
    stay None so that YAML values and defaults are not overridden."""
    group = parser.add_argument_group("training config (override the YAML file)")
    for f in dataclasses.fields(TrainConfig):
        kind = f.type.split(" | ")[0] if isinstance(f.type, str) else f.type
        parse = {"int": int, "float": float, "str": str, "bool": _parse_bool}[kind]
        if "None" in str(f.type):
            parse = _parse_optional(parse)
        flags = list(dict.fromkeys([f"--{f.name.replace('_', '-')}", f"--{f.name}"]))
        group.add_argument(*flags, dest=f"cfg_{f.name}", type=parse, default=argparse.SUPPRESS,
                           metavar=kind.upper(),
                           help=f"{f.metadata['help']} (default: {f.default})")


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainConfig fields given as flags (those added by ``add_config_flags``)."""
    return {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg_")}


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Defaults < --config YAML < flags."""
    values = load_yaml(args.config) if getattr(args, "config", None) else {}
    return from_dict({**values, **flag_overrides(args)})
