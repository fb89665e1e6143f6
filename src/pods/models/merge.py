"""A model's weights under its base model's names, with a LoRA adapter folded in: what the
vllm engine loads and the hf engine's bfloat16 sampling copy (pods.models.precision) holds."""

from __future__ import annotations

import torch
from torch import Tensor


@torch.no_grad()
def merged_state_dict(model) -> dict[str, Tensor]:
    """The model's weights under the base model's names; a peft LoRA adapter is folded in
    (W + scale * B A, computed aside: the trainer's weights are not touched)."""
    if not hasattr(model, "peft_config"):
        return model.state_dict()
    from peft.tuners.lora import LoraLayer

    adapter = model.active_adapter
    deltas = {f"{name}.base_layer.weight": module.get_delta_weight(adapter)
              for name, module in model.named_modules()
              if isinstance(module, LoraLayer) and adapter in module.lora_A}
    weights = {}
    for key, value in model.state_dict().items():
        if "lora_" in key:
            continue
        if key in deltas:
            value = value + deltas[key].to(value.dtype)
        weights[key.removeprefix("base_model.model.").replace(".base_layer.", ".")] = value
    return weights
