"""What a user meant by a key pods does not know: a typo of a pods key, a TRL or verl name
for one, or a nested block (pods configs are flat). YAML files, ``from_dict`` and
command-line flags all say it the same way. This module imports nothing of pods."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# Names of TRL's GRPOConfig and verl's ppo_trainer config -> (pods's key, what differs).
FOREIGN = {
    "learning_rate": ("lr", ""),
    "num_generations": ("n", "rollouts generated per prompt; m of them are kept"),
    "per_device_train_batch_size": ("micro_batch_size", "sequences per forward/backward "
                                    "pass; prompts_per_step sets P"),
    "gradient_accumulation_steps": ("micro_batch_size", "pods accumulates over "
                                    "micro-batches of the step's P*m kept rollouts"),
    "max_completion_length": ("max_new_tokens", ""),
    "max_response_length": ("max_new_tokens", ""),
    "max_prompt_length": ("max_prompt_tokens", ""),
    "train_batch_size": ("prompts_per_step", "P"),
    "lr_scheduler_type": ("lr_schedule", ""),
    "warmup_ratio": ("warmup_frac", ""),
    "epsilon": ("clip_eps", ""),
    "clip_ratio": ("clip_eps", ""),
    "epsilon_high": ("clip_eps_high", ""),
    "clip_ratio_high": ("clip_eps_high", ""),
    "kl_coef": ("beta", ""),
    "kl_loss_coef": ("beta", ""),
    "loss_type": ("loss_norm", ""),
    "loss_agg_mode": ("loss_norm", ""),
    "scale_rewards": ("adv_scale", ""),
    "model_name_or_path": ("model", ""),
    "output_dir": ("out_dir", ""),
    "num_train_epochs": ("max_steps", "or max_time"),
    "total_training_steps": ("max_steps", ""),
    "use_vllm": ("engine", "engine vllm"),
    "bf16": ("mixed_precision", "mixed_precision bf16, or dtype bfloat16"),
    "ppo_micro_batch_size_per_gpu": ("micro_batch_size", ""),
    "gpu_memory_utilization": ("vllm_gpu_memory_utilization", ""),
}


def suggestion(key: str, known: Iterable[str], spell=repr) -> str:
    """``did you mean 'lr'?`` for an unknown ``key``; a TRL or verl name (``learning_rate``,
    ``actor_rollout_ref.actor.optim.lr``) names pods's key; else the closest known key.
    ``spell`` writes a key as the user would (``--lr`` for a flag)."""
    known = list(known)
    name = key.lstrip("-").replace("-", "_")
    last = name.rsplit(".", 1)[-1]
    if name in FOREIGN or last in FOREIGN:
        meant, note = FOREIGN.get(name) or FOREIGN[last]
        return f"pods calls it {spell(meant)}{f' ({note})' if note else ''}; {key} is a " \
               f"TRL or verl name."
    if "." in name and last in known:
        return f"pods keys are flat: did you mean {spell(last)}?"
    close = difflib.get_close_matches(name, known, n=1)
    return f"did you mean {spell(close[0])}?" if close else "see `pods train --help`."


def nested_block(key: str, inner: Iterable, known: Iterable[str]) -> str:
    """The message for a nested mapping under ``key`` (``rollout: {n: 64}``): configs are
    flat; which of its keys pods knows, to write at the top level, and which it does not."""
    known = list(known)
    inner = [str(k) for k in inner]
    flat_keys = [k for k in inner if k in known]
    others = [k for k in inner if k not in known]
    text = f"{key!r} holds a nested block, but pods configs are flat: one `key: value` per " \
           f"line at the top level, with no group names."
    if flat_keys:
        text += f" Write {', '.join(flat_keys)} at the top level instead."
    if others:
        text += " Unknown inside it: " + "; ".join(f"{k} ({suggestion(k, known)})"
                                                  for k in others)
    return text
