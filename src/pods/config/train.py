"""``TrainConfig``: the groups of ``pods.config.groups`` and ``pods.config.step`` together,
checked when built; its flat keys (``LEAVES``) and the key-based helpers that YAML files
and flags use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pods.config.flat as flat
import pods.config.recipes as recipes
from pods.config.checks import problems
from pods.config.fields import group_field
from pods.config.flat import Leaf, to_flat
from pods.config.groups import EvalConfig, ModelConfig, RunConfig, TaskConfig, TrackingConfig
from pods.config.step import LossConfig, OptimConfig, RolloutConfig, SelectionConfig


@dataclass(frozen=True)
class TrainConfig:
    """Everything one training run needs. Build it from flat keys with
    ``pods.config.from_dict`` (as YAML files and flags do); every value is checked when it
    is built (``pods.config.checks``), except the names of open registries (rule, task,
    engine, trackers), which their components check before anything loads
    (``pods.train.checks``). Built directly (``TrainConfig()``), every field takes its
    default: the embedded recipe; ``from_dict`` fills the keys it is not given from the
    recipe of the model (``pods.config.recipes``)."""

    model: ModelConfig = group_field(ModelConfig, "The policy: which model, dtype, LoRA.")
    task: TaskConfig = group_field(TaskConfig, "What to train on: data and verifiable reward.")
    rollout: RolloutConfig = group_field(RolloutConfig, "Generation: P prompts, n rollouts "
                                         "each, and the engine.")
    selection: SelectionConfig = group_field(SelectionConfig, "PODS: which m of the n "
                                             "rollouts the update sees, and their "
                                             "advantages.")
    optim: OptimConfig = group_field(OptimConfig, "The optimizer and gradient accumulation.")
    loss: LossConfig = group_field(LossConfig, "The policy-gradient loss.")
    eval: EvalConfig = group_field(EvalConfig, "Held-out evaluation during training.")
    run: RunConfig = group_field(RunConfig, "Budget, checkpoints, seed, folders and devices.")
    tracking: TrackingConfig = group_field(TrackingConfig, "Experiment trackers.")

    def __post_init__(self) -> None:
        for problem in problems(self):
            raise ValueError(f"invalid config: {problem}")

    @property
    def kept_per_step(self) -> int:
        """P*m: the rollouts one step's update sees (with selection group)."""
        return self.rollout.prompts_per_step * self.selection.m

    def to_dict(self) -> dict[str, Any]:
        """The flat mapping of key -> value, as YAML files hold it."""
        return to_flat(self)

    def replace(self, **overrides: Any) -> TrainConfig:
        """A copy with some flat keys changed (``cfg.replace(n=16, lr=1e-3)``)."""
        return from_dict({**self.to_dict(), **overrides})


LEAVES: dict[str, Leaf] = flat.leaves(TrainConfig)  # every flat key, in --help order


def from_dict(values: dict[str, Any]) -> TrainConfig:
    """A config from a mapping of flat keys; a missing key takes the value of the model's
    recipe (``pods.config.recipes``: language-model values for every model but the
    embedded one), else its default. An unknown key is an error that names the key meant.
    A time budget given alone is the whole budget: ``max_time`` without ``max_steps``
    clears the default step budget."""
    recipe = recipes.recipe_values(*(values.get(key, LEAVES[key].default)
                                     for key in ("recipe", "model", "task", "lora_rank")))
    return flat.build(TrainConfig, {**recipe, **values})


def type_problem(key: str, value: Any) -> str | None:
    """What is wrong when ``value`` does not fit field ``key``'s type, else None."""
    return flat.type_problem(LEAVES[key], value)


def as_number(key: str, value: Any) -> Any:
    """YAML 1.1 reads 3e-4 (no dot) as text: take such text as the number it spells."""
    return flat.as_number(LEAVES[key], value)


def describe_fields() -> list[dict[str, Any]]:
    """One row per field for the configuration reference: key, group, type, default (the
    embedded recipe), help and the language-model recipe's value (None where it is the
    default)."""
    return [{"key": leaf.key, "group": leaf.group, "type": leaf.type, "default": leaf.default,
             "help": leaf.help, "flag": "--" + leaf.key.replace("_", "-"),
             "language_model": language_model_default(leaf.key)}
            for leaf in LEAVES.values()]


def language_model_default(key: str) -> str | None:
    """How the language-model recipe sets ``key`` (None: it keeps the field default)."""
    return recipes.language_model_value(key) if key in recipes.KEYS else None
