"""The configuration's building blocks: the fixed choices of some fields and the two field
makers every group uses.

``leaf`` makes a documented, defaulted field: ``help`` is what ``pods train --help`` and
the configuration reference print; ``key`` (when present) is the field's flat name in YAML
files and on the command line, where it differs from the attribute name (``model.name`` is
``model:`` / ``--model``). ``group_field`` nests a group. This module imports nothing from
pods, so every component can import the choices it implements (those of the pure math,
the loss's and the selection's, are pods.core's own).
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Literal, get_args

# The fixed choices of some fields, each written once as the field's type (a field typed
# with one takes only those values: pods.config.flat checks them, and they are the flags'
# choices); the components that implement them import the tuples. The choices of the pure
# math are pods.core's (selection scopes, advantage scales, loss normalisations and
# importance-sampling corrections). (Open registries, which a user may extend, are the
# components' own: rules in pods.core.downsample, tasks in pods.tasks, engines in
# pods.rollout, trackers in pods.tracking.)
Dtype = Literal["auto", "float32", "bfloat16", "float16"]
MixedPrecision = Literal["gpu", "no", "bf16", "auto"]
Bf16Updates = Literal["exact", "plain"]
Switch = Literal["auto", "on", "off"]
Checkpointing = Literal[False, True, "auto"]  # pods.train.passes chooses auto's
HfDecode = Literal["loop", "generate"]
WeightCast = Literal["step", "matmul"]  # pods.models.weight_cast
UpdateKernels = Literal["auto", "liger", "torch"]  # pods.models.kernels
UpdateLayout = Literal["auto", "padded", "packed", "shared_prompt"]  # pods.train.layout
Parallelism = Literal["ddp", "fsdp2"]
Schedule = Literal["constant", "linear", "cosine"]
RewardErrors = Literal["raise", "zero"]
CodeReward = Literal["fraction", "all"]
Recipe = Literal["auto", "embedded", "language_model"]
DTYPES: tuple[str, ...] = get_args(Dtype)
MIXED_PRECISIONS: tuple[str, ...] = get_args(MixedPrecision)
BF16_UPDATES: tuple[str, ...] = get_args(Bf16Updates)
SWITCHES: tuple[str, ...] = get_args(Switch)
CHECKPOINTINGS: tuple[bool | str, ...] = get_args(Checkpointing)
HF_DECODES: tuple[str, ...] = get_args(HfDecode)
WEIGHT_CASTS: tuple[str, ...] = get_args(WeightCast)
UPDATE_KERNELS: tuple[str, ...] = get_args(UpdateKernels)
UPDATE_LAYOUTS: tuple[str, ...] = get_args(UpdateLayout)
PARALLELISMS: tuple[str, ...] = get_args(Parallelism)
SCHEDULES: tuple[str, ...] = get_args(Schedule)
REWARD_ERRORS: tuple[str, ...] = get_args(RewardErrors)
CODE_REWARDS: tuple[str, ...] = get_args(CodeReward)
RECIPES: tuple[str, ...] = get_args(Recipe)


def leaf(default: Any, help: str, key: str | None = None) -> Any:
    metadata = {"help": help} if key is None else {"help": help, "key": key}
    return field(default=default, metadata=metadata)


def group_field(cls: type, help: str) -> Any:
    return field(default_factory=cls, metadata={"help": help})
