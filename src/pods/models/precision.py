"""Mixed precision (``--mixed-precision bf16``, or ``auto``: bf16 where the device computes
it natively): float32 weights, bfloat16 compute.

The weights and the optimizer stay in float32, so updates of 1e-6 relative size are not
rounded away (bfloat16 keeps 8 bits of mantissa: a weight of 1.0 moves only by steps of
2**-7); the update's forward passes run under ``torch.autocast``, whose matmuls and
attention run in bfloat16 (AVX-512 BF16 or AMX on CPUs, tensor cores on GPUs) while the
log-softmax and the loss stay float32 (pods.models.logprobs upcasts the logits). The
backward pass follows the forward's dtypes; gradients land in float32 on the weights.

Sampling does not go through autocast: autocast would cast every weight again at every
generated token. The hf engine samples from a bfloat16 copy of the weights instead
(``SamplingCopy``), refreshed after each optimizer step as the vllm engine's weights are.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

COMPUTE_DTYPES = {"no": None, "bf16": torch.bfloat16}


def resolve_mixed_precision(name: str, device: torch.device) -> str:
    """``name`` as this device runs it: "auto" is "bf16" where bf16 is computed natively (a
    CUDA GPU that supports it; a CPU with AVX-512 BF16 or AMX, where it is about 2x float32)
    and "no" elsewhere (a CPU without them emulates bf16, tens of times slower than float32);
    "no" and "bf16" are themselves."""
    if name != "auto":
        return name
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    from pods.runtime.machine import NATIVE_BF16, cpu_bf16

    return "bf16" if device.type == "cpu" and cpu_bf16() in NATIVE_BF16 else "no"


def compute_dtype(mixed_precision: str) -> torch.dtype | None:
    """The dtype ``mixed_precision`` computes in; None: the weights' own."""
    return COMPUTE_DTYPES[mixed_precision]


def autocast(device: torch.device, mixed_precision: str):
    """The context the update's forward passes run in."""
    dtype = compute_dtype(mixed_precision)
    if dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


class SamplingCopy:
    """A plain (no adapter, no grad) copy of ``model`` in ``dtype`` to generate from; a
    LoRA adapter is merged into it (pods.models.merge), so sampling pays no adapter matmuls.
    ``refresh`` copies the trainer's current weights in (0.03 s for SmolLM2-135M on 2 CPU cores)."""

    def __init__(self, model, dtype: torch.dtype):
        from transformers import AutoModelForCausalLM

        base = model.get_base_model() if hasattr(model, "peft_config") else model
        device = next(base.parameters()).device
        self.module = AutoModelForCausalLM.from_config(base.config, dtype=dtype).to(device)
        self.module.generation_config = base.generation_config
        self.module.requires_grad_(False).eval()
        self.refresh(model)

    @torch.no_grad()
    def refresh(self, model) -> None:
        from pods.models.merge import merged_state_dict

        missing, unexpected = self.module.load_state_dict(merged_state_dict(model),
                                                          strict=False)
        tied = {"lm_head.weight"} if self.module.config.tie_word_embeddings else set()
        if set(missing) - tied or unexpected:
            raise RuntimeError(f"the sampling copy does not match the model: missing "
                               f"{sorted(set(missing) - tied)[:3]}, unexpected "
                               f"{sorted(unexpected)[:3]}")
