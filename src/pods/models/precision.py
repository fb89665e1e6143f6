"""Precision: what the weights are stored in and what the update and sampling compute in.

By default (``--dtype auto``) the weights a run trains are float32 on every device, so
that updates of 1e-6 relative size are not rounded away (bfloat16 keeps 8 bits of
mantissa: a weight of 1.0 moves only by steps of 2**-7; ``lost_share`` measures what a
step would lose). On a GPU with bf16 the update and sampling compute in bfloat16
(``--mixed-precision gpu``, the default): the update's forward and backward passes run on
a bfloat16 copy of the weights cast once an optimizer step (``--weight-cast step``,
pods.models.weight_cast), or under ``torch.autocast`` (``--weight-cast matmul``, and
LoRA), whose matmuls and attention run in bfloat16 (tensor cores; AVX-512 BF16
or AMX on CPUs with ``--mixed-precision auto`` or ``bf16``) while the log-softmax and the
loss stay float32 (pods.models.logprobs upcasts the logits). The backward pass follows the
forward's dtypes; gradients land in float32 on the weights. Under FSDP2 the same is FSDP's
mixed-precision policy (pods.runtime.fsdp): float32 shards gathered in bfloat16, gradients
reduced in float32.

Sampling does not go through autocast: autocast would cast every weight again at every
generated token. The hf engine samples from a bfloat16 copy of the weights instead
(``SamplingCopy``), refreshed after each optimizer step as the vllm engine's weights are.
"""

from __future__ import annotations

import weakref
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from pods.config.groups import ModelConfig

COMPUTE_DTYPES = {"no": None, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Precision:
    """What one run stores and computes in on its device (``plan``)."""

    weights: torch.dtype  # the loaded weights (under FSDP2 the shards are float32)
    mixed: str  # "bf16" or "no": --mixed-precision as this device runs it
    sharded: bool  # FSDP2: its mixed-precision policy computes, not autocast
    lora: bool  # the weights are a frozen base; the trained adapters are float32
    cast: str = "matmul"  # "step": the update runs on a bf16 copy of the float32 weights
    # cast once an optimizer step (pods.models.weight_cast); "matmul": autocast, if any

    @property
    def reference(self) -> torch.dtype:
        """The dtype of the frozen reference model (beta > 0): bfloat16 where the update
        runs on a bf16 copy (the reference then computes as the policy does at the same
        weights, a KL of 0 at the start, in half the memory); else the weights' (under
        autocast, or FSDP2's policy, it computes as the policy does)."""
        return torch.bfloat16 if self.cast == "step" else self.weights

    @property
    def update(self) -> str:
        """"bf16" or "no": what the update computes in, outside FSDP2: the trainer opens
        autocast for it, which the update turns off again where it runs on the bf16 copy
        (``cast`` "step", pods.train.update)."""
        return "no" if self.sharded else self.mixed

    @property
    def sampling(self) -> torch.dtype | None:
        """The engine's dtype where it is not the weights' (a bf16 copy or vLLM's); None."""
        return None if self.sharded else compute_dtype(self.mixed)

    @property
    def shards(self) -> torch.dtype | None:
        """FSDP2: the dtype the float32 shards are gathered in for compute (bfloat16 with
        mixed precision bf16 or bf16 weights, float16 with float16 weights, whose shards
        are float32 masters too); None: float32."""
        if not self.sharded:
            return None
        if self.mixed == "bf16" or self.weights == torch.bfloat16:
            return torch.bfloat16
        return torch.float16 if self.weights == torch.float16 else None

    def describe(self, bf16_updates: str = "exact") -> str:
        """One line: the weights' dtype, how the optimizer keeps them, what the update
        computes in (``pods train``'s log, ``pods plan``)."""
        weights, compute = self._dtypes()
        if self.lora:
            kept = "a frozen base; LoRA adapters float32"
        elif weights == "float32":
            kept = "AdamW's master copy"
        elif weights == "bfloat16" and bf16_updates == "exact":
            kept = "exact updates: float32 master = weight + its low 16 bits"
        else:
            kept = "plain AdamW: updates below the weights' rounding step are lost"
        how = " (FSDP2 policy)" if self.shards else " (a copy cast once a step)" \
            if self.cast == "step" else " (autocast)" if compute != weights else ""
        return f"weights {weights} ({kept}), update computes in {compute}{how}"

    @property
    def short(self) -> str:
        """The two dtypes in a few words (``pods check``'s table)."""
        weights, compute = self._dtypes()
        return f"{weights} weights, {compute} compute"

    def _dtypes(self) -> tuple[str, str]:
        weights = torch.float32 if self.sharded else self.weights  # FSDP2's float32 shards
        compute = self.shards or compute_dtype(self.update) or weights
        return tuple(str(d).removeprefix("torch.") for d in (weights, compute))

    def report(self, options: ModelConfig, bf16_updates: str, device: torch.device) -> list[str]:
        """The lines a run logs at its start: what "auto" chose, the ``describe`` line, and
        a warning where the CPU would emulate bf16 (pods.runtime.machine.slow_bf16)."""
        from pods.runtime.machine import slow_bf16

        lines = []
        if options.mixed_precision == "auto":
            native = "native" if self.mixed == "bf16" else "not native"
            lines.append(f"mixed precision auto: {self.mixed} (bf16 matmuls {native} on this "
                         f"{device.type}; pods env says why)")
        lines.append(f"precision: {self.describe(bf16_updates)}")
        if slow := slow_bf16(device, options.dtype, self.mixed):
            lines.append(f"warning: {slow}")
        return lines


def plan(options: ModelConfig, device: torch.device, sharded: bool = False) -> Precision:
    """The precision a run with ``options`` uses on ``device`` (``sharded``: FSDP2). The
    embedded model (``--model tiny``) computes in float32 under the default "gpu" on every
    device: its matmuls (hidden size 64) are too small for bfloat16 to be faster on a GPU,
    and in float32 its greedy evaluations, the start of ``pods train``'s curve included,
    should match a CPU's on a GPU (not yet run on one; bf16 compute, emulated on a CPU,
    moves its start from 16.0% to 15.2%)."""
    name = options.mixed_precision
    if name == "gpu" and options.name == "tiny":
        name = "no"
    mixed = resolve_mixed_precision(name, device, options.dtype)
    weights, lora = weights_dtype(options, device), options.lora_rank > 0
    copy = mixed == "bf16" and weights == torch.float32 and not (sharded or lora)
    cast = "step" if copy and options.weight_cast == "step" else "matmul"
    return Precision(weights, mixed, sharded, lora, cast)


def weights_dtype(options: ModelConfig, device: torch.device) -> torch.dtype:
    """The dtype the weights are held in: ``options.dtype``; "auto" is float32 (the weights a
    run trains are the optimizer's master copy, on every device), but bfloat16 for a LoRA
    run's frozen base on a GPU with bf16 (it takes no update; PEFT keeps the adapters in
    float32)."""
    if options.dtype != "auto":
        return getattr(torch, options.dtype)
    return torch.bfloat16 if options.lora_rank > 0 and cuda_bf16(device) else torch.float32


def resolve_mixed_precision(name: str, device: torch.device, dtype: str = "auto") -> str:
    """``name`` as this device runs it, for weights of ``dtype`` (--dtype): "gpu" is "bf16"
    on a CUDA GPU that supports it with float32 weights (auto or float32), else "no" (CPU
    runs compute in float32; 16-bit weights compute in their own dtype); "auto" is "bf16"
    where bf16 is computed natively (such a GPU; a CPU with AVX-512 BF16 or AMX, where it is
    about 2x float32) and "no" elsewhere (a CPU without them emulates bf16, tens of times
    slower than float32); "no" and "bf16" are themselves."""
    if name == "gpu":
        float32 = dtype in ("auto", "float32")
        return "bf16" if float32 and cuda_bf16(device) else "no"
    if name != "auto":
        return name
    if device.type == "cuda":
        return "bf16" if cuda_bf16(device) else "no"
    from pods.runtime.machine import NATIVE_BF16, cpu_bf16

    return "bf16" if device.type == "cpu" and cpu_bf16() in NATIVE_BF16 else "no"


def cuda_bf16(device: torch.device) -> bool:
    """Whether ``device`` is a CUDA GPU that computes bfloat16 natively (Ampere and later):
    torch's check counts emulated bf16 by default, which a T4 or V100 runs far slower than
    float32."""
    return device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)


def lost_share(weights, lr: float) -> float:
    """The share of the elements of ``weights`` (tensors) that an update of size ``lr``
    leaves unchanged in their own dtype: what one AdamW step (about lr per weight) would
    lose on them. About 0 for float32 weights at RL learning rates; for bfloat16, most
    of a real model's weights (measured: benchmarks/update/update_precision.py)."""
    lost = total = 0
    with torch.no_grad():
        for w in weights:
            moved = (w.float() + lr).to(w.dtype)  # rounded back into the weights' dtype
            lost += int((moved == w).sum())
            total += w.numel()
    return lost / max(total, 1)


def compute_dtype(mixed_precision: str) -> torch.dtype | None:
    """The dtype ``mixed_precision`` computes in; None: the weights' own."""
    return COMPUTE_DTYPES[mixed_precision]


def autocast(device: torch.device, mixed_precision: str):
    """The context the update's forward passes run in."""
    dtype = compute_dtype(mixed_precision)
    if dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


# model: {(dtype, shared): module}. Weak keys: nothing in a copy may hold its model (the
# working copy's gradient hooks hold the masters alone), or a dropped trainer would live on.
_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def copy_module(model, dtype: torch.dtype, shared: bool = True):
    """A plain model of ``model``'s architecture in ``dtype`` on its device (no adapter; made
    without gradients, in eval mode), one per model and dtype: the hf engine's sampling
    copy (``SamplingCopy``) and the update's working copy (pods.models.weight_cast) are
    the same module, so bf16 compute over float32 weights holds one bf16 copy of them.
    Its weights are those of its last refresh (either's). ``shared`` False: a copy of its
    own (an update with liger's kernels, which the sampler's compiled forward cannot take)."""
    from transformers import AutoModelForCausalLM

    copies = _COPIES.setdefault(model, {})
    if (dtype, shared) not in copies:
        base = model.get_base_model() if hasattr(model, "peft_config") else model
        with torch.device(next(base.parameters()).device):  # made where it runs
            module = AutoModelForCausalLM.from_config(base.config, dtype=dtype)
        module.generation_config = base.generation_config
        copies[dtype, shared] = module.requires_grad_(False).eval()
    return copies[dtype, shared]


class SamplingCopy:
    """A plain (no adapter) copy of ``model`` in ``dtype`` to generate from (``copy_module``);
    a LoRA adapter is merged into it (pods.models.merge), so sampling pays no adapter
    matmuls. ``refresh`` copies the trainer's current weights in (0.03 s for SmolLM2-135M
    on 2 CPU cores)."""

    def __init__(self, model, dtype: torch.dtype):
        self.module = copy_module(model, dtype)
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
