"""The checks of a ``TrainConfig`` that need the open registries, each asked of the component
that owns it: the rule (``pods.core.downsample.RULES``), the task (``pods.tasks``), the
engine (``pods.rollout.ENGINES``: its name, and its log-probs where the importance-sampling
correction needs them) and the trackers (``pods.tracking``); and what only training refuses
(float16 weights for a full fine-tune, which ``pods eval`` may use). ``pods.config``
checks everything else when a config is built; these run before anything loads: first in
the trainer, and in ``pods compare`` for every run before the first one trains. The rule's
name is checked by ``pods.core.downsample.check_rule`` (as in the TRL and verl adapters),
its per-rollout inputs (``pods.core.rollout_inputs``) with it. A new rule,
task, engine or tracker is one entry in its component's registry, not an edit of config."""

from __future__ import annotations

from collections.abc import Iterator

from pods.config import TrainConfig
from pods.config.checks import one_of
from pods.core.downsample import check_rule
from pods.core.rollout_inputs import rule_sources
from pods.rollout import engine_names, returns_logprobs
from pods.tasks import task_problems
from pods.tracking import tracker_problems


def registry_problems(config: TrainConfig, training: bool = True) -> Iterator[str]:
    """Yield a message for each name in ``config`` that its registry does not hold, and
    where ``training``, for what only training refuses."""
    yield from _rule_problems(config.selection.rule)
    yield from task_problems(config.task, config.model.name)
    yield from one_of("engine", config.rollout.engine, engine_names())
    yield from _logprob_problems(config.loss.is_correction, config.rollout.engine)
    yield from tracker_problems(config.tracking.report_to)
    if training:
        yield from _training_problems(config)


def _training_problems(c: TrainConfig) -> Iterator[str]:
    """What only training refuses (``pods eval`` may evaluate in it): float16 weights of a
    full fine-tune."""
    if c.model.dtype == "float16" and c.model.lora_rank == 0:
        yield "dtype float16 for a full fine-tune: float16's range (6e-8 to 65504) is too " \
              "narrow for training without loss scaling, which pods does not do: small " \
              "gradients and AdamW's second moments underflow to 0, large values overflow " \
              "to inf, and the model collapses; use --dtype bfloat16 (float32's range; " \
              "--bf16-updates exact keeps every update) or float32 (auto). float16 serves a " \
              "LoRA run's frozen base (--lora-rank > 0)."


def _logprob_problems(correction: str, engine: str) -> Iterator[str]:
    """A message when the importance-sampling correction is on and the engine returns no
    log-probs of its sampled tokens (``pods.rollout.returns_logprobs``)."""
    if correction != "none" and engine in engine_names() and not returns_logprobs(engine):
        yield f"is_correction {correction} weighs each token by the engine's log-prob of " \
              f"it, and engine {engine!r} returns none (its module sets no " \
              f"SAMPLED_LOGPROBS); use --engine hf or vllm, or --is-correction none."


def _rule_problems(rule: str) -> Iterator[str]:
    """A message when ``rule`` is not a registered rule (``pods.core.downsample.check_rule``,
    the check the adapters make too), or needs a per-rollout input that pods does not
    compute (``pods.core.rollout_inputs``): refused here, not at the first step's selection."""
    try:
        check_rule(rule, callables=False)
        rule_sources(rule)
    except ValueError as error:
        yield str(error)


def check(config: TrainConfig, training: bool = True) -> TrainConfig:
    """``config``, or a ValueError with the first problem ``registry_problems`` finds
    (``training`` False: an evaluation's, which may compute in float16)."""
    for problem in registry_problems(config, training):
        raise ValueError(f"invalid config: {problem}")
    return config
