"""The checks of a ``TrainConfig`` made when it is built, each failure saying what to change.

Types first (per flat key, fixed choices included: a field typed with a ``Literal`` takes
only its values, pods.config.flat), then values; the checks that span groups (m against n,
micro-batches against P*m) sit here beside the others. The names of open registries (rule,
task, engine, trackers) are checked by the components that own them, before anything loads
(``pods.train.checks``): this package imports nothing above it (``pods.core`` below it
holds the fixed choices of selection, advantages and the loss)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from pods.config.flat import get, leaves, type_problem, unknown

# A pods.config.train.TrainConfig, which is built on these checks: this module reads its
# groups (c.rollout, c.selection, ...) and never imports it.
Config = Any


def problems(c: Config) -> Iterator[str]:
    """Yield a message for each invalid field (the first one is raised)."""
    typed = [p for p in (type_problem(leaf, get(c, key))
                         for key, leaf in leaves(type(c)).items()) if p]
    if typed:  # the checks below compare values, which needs the right types
        yield from typed
        return
    yield from _counts(c)
    yield from _choices(c)
    yield from _budget(c)
    yield from _ranges(c)
    yield from _task_files(c)


def _counts(c: Config) -> Iterator[str]:
    r, s = c.rollout, c.selection
    for key in ("prompts_per_step", "n", "m", "max_new_tokens", "gen_batch_size",
                "max_sampling_rounds", "num_iterations", "max_prompt_tokens", "eval_repeats"):
        if get(c, key) < 1:
            yield f"{key}={get(c, key)} must be at least 1."
    if s.m > r.n:
        yield f"m={s.m} is larger than n={r.n}: keep at most the n rollouts generated " \
              f"(set --m {r.n} or raise --n)."
    if s.max_kept_per_group is not None and (s.scope != "batch" or
                                             not 2 <= s.max_kept_per_group <= r.n):
        yield f"max_kept_per_group={s.max_kept_per_group} needs selection batch and a " \
              f"value from 2 to n={r.n} (or None)."
    g = s.adv_group_size
    if g is not None and (g < 2 or s.m != r.n or r.n % g or s.scope != "group"):
        yield f"adv_group_size={g} splits each prompt's n rollouts into blocks of at least 2: " \
              f"it needs m = n (got m={s.m}, n={r.n}), n a multiple of it and selection group."
    micro = c.optim.micro_batch_size
    if micro is not None and micro > c.kept_per_step:
        yield f"micro_batch_size={micro} is larger than the batch of kept rollouts P*m = " \
              f"{r.prompts_per_step}*{s.m} = {c.kept_per_step}; lower it."
    if micro is not None and c.optim.micro_batch_tokens is not None:
        yield f"micro_batch_size={micro} and micro_batch_tokens={c.optim.micro_batch_tokens} " \
              f"both cut the update's passes: keep one (--micro-batch-size: rows a pass; " \
              f"--micro-batch-tokens: token positions a pass)."


def one_of(key: str, value: str, known) -> Iterator[str]:
    """The message for a ``value`` of ``key`` outside ``known``: a registry (dict, listed
    sorted) or a tuple of choices (listed in order). The components check their registries'
    names with it too (pods.train.checks)."""
    if value not in known:
        yield unknown(key, value, sorted(known) if isinstance(known, dict) else known)


def _choices(c: Config) -> Iterator[str]:
    """The fixed choices' combinations (each field's own choices are its type's)."""
    if c.selection.scope == "batch" and c.selection.rule != "max_variance":
        yield f"selection batch chooses max-variance subsets of any size, not rule " \
              f"{c.selection.rule!r}; set rule max_variance or selection group."
    if c.run.parallelism == "fsdp2" and c.rollout.engine == "vllm":
        yield "the vllm engine does not run under fsdp2 (each rank's vLLM would need the " \
              "whole model); use --engine hf (or auto), or --parallelism ddp."
    if c.model.mixed_precision in ("bf16", "auto") and c.model.dtype not in ("auto", "float32"):
        yield f"mixed_precision {c.model.mixed_precision} keeps float32 master weights and " \
              f"computes in bfloat16; set --dtype float32 (or auto), or --mixed-precision no " \
              f"to compute in {c.model.dtype}."


def _budget(c: Config) -> Iterator[str]:
    if c.run.max_steps is None and c.run.max_time is None:
        yield "no budget: set max_steps and/or max_time."
    for key in ("max_steps", "max_time", "eval_size", "micro_batch_size",
                "micro_batch_tokens"):
        value = get(c, key)
        if value is not None and value <= 0:
            yield f"{key}={value} must be positive (or None for no limit)."
    if c.run.keep_checkpoints < 1:
        yield f"keep_checkpoints={c.run.keep_checkpoints} must be >= 1: a run keeps at least " \
              f"its newest checkpoint (the one a resume and `pods eval` read)."
    if c.eval.offset < 0:
        yield f"eval_offset={c.eval.offset} must be >= 0 (test problems skipped)."
    for key in ("eval_every", "checkpoint_every", "lr", "temperature", "clip_eps",
                "dist_timeout"):
        if get(c, key) <= 0:
            yield f"{key}={get(c, key)} must be positive."


def _ranges(c: Config) -> Iterator[str]:
    o, w = c.optim, c.task.math
    if min(c.loss.beta, o.weight_decay, o.max_grad_norm, c.eval.temperature, w.format,
           w.tags, w.correctness) < 0:
        yield "beta, weight_decay, max_grad_norm, eval_temperature and the reward weights " \
              "must be >= 0."
    if not c.loss.is_cap > 1:
        yield f"is_cap={c.loss.is_cap} must be > 1: ratios are truncated at is_cap and " \
              f"masked outside [1/is_cap, is_cap] (TRL's default: 2)."
    if not (0 <= o.adam_beta1 < 1 and 0 <= o.adam_beta2 < 1):
        yield "adam_beta1 and adam_beta2 must be in [0, 1)."
    if not (0 <= o.warmup_frac < 1 and 0 <= o.lr_floor <= 1):
        yield f"warmup_frac={o.warmup_frac} must be in [0, 1) and lr_floor={o.lr_floor} " \
              f"in [0, 1] (fractions of the budget and of lr)."
    if not 0 < c.rollout.vllm_gpu_memory_utilization <= 1:
        yield f"vllm_gpu_memory_utilization={c.rollout.vllm_gpu_memory_utilization} must " \
              f"be in (0, 1]: the fraction of GPU memory vLLM may take."
    m = c.model
    if m.lora_rank < 0 or m.lora_alpha <= 0 or not 0 <= m.lora_dropout < 1:
        yield "lora_rank must be >= 0 (0 = full fine-tuning), lora_alpha > 0 and " \
              "0 <= lora_dropout < 1."
    if c.task.truncated_reward is not None and not math.isfinite(c.task.truncated_reward):
        yield f"truncated_reward={c.task.truncated_reward} must be a finite number (or None " \
              f"to grade truncated rollouts)."
    code = c.task.code
    if code.test_timeout <= 0 or code.memory_mb < 32:
        yield "code_test_timeout must be positive and code_memory_mb at least 32."
    for key in ("code_max_tests", "sandbox_workers"):
        if get(c, key) is not None and get(c, key) < 1:
            yield f"{key}={get(c, key)} must be at least 1 (or None)."


def _task_files(c: Config) -> Iterator[str]:
    t = c.task
    if t.name == "custom" and not t.data_file:
        yield "task custom needs --data-file FILE (records with 'prompt' and 'answer')."
    if t.reward_fn is not None and len([p for p in t.reward_fn.split(":") if p]) != 2:
        yield f"reward_fn {t.reward_fn!r} must look like module:function."
