"""The update's kernels (``--update-kernels``): liger-kernel's Triton kernels on a CUDA GPU,
or torch's (transformers' modules and pods's chunked head, pods.models.logprobs).

    update_kernels(name, device, sharded)   "liger" or "torch"; an unusable "liger" fails
    use_kernels(model, kernels, strict)     put liger's RMSNorm, SwiGLU, RoPE on ``model``,
                                            and make its head a ``FusedHead``
    FusedHead                               an output head whose per-token log-probs are
                                            liger's fused linear cross-entropy (no [tokens,
                                            V] logits kept; pods.models.logprobs asks it)

liger-kernel (Hsu et al., 2024, github.com/linkedin/Liger-Kernel) fuses the output head
with the log-softmax a chunk of tokens at a time, computing the head's gradients in the
forward pass, and replaces RMSNorm, the SwiGLU MLP and the rotary embedding by fused
kernels. pods's loss needs per-token log-probs (its normalisations, corrections and the
engine/trainer gap are its own, pods.core), so it takes liger's fused linear
cross-entropy without reduction (log p = -CE), not its GRPO loss. Its kernels need Triton
and a CUDA GPU; elsewhere pods's chunked head does the same in torch. RoPE is patched in
transformers' modeling module (liger's way), so the hf engine's sampling also uses it.
"""

from __future__ import annotations

import importlib.util

import torch
from torch import Tensor

INSTALL = "pip install 'pods-rl[gpu]'  (or: pip install liger-kernel)"


def liger_installed() -> bool:
    return importlib.util.find_spec("liger_kernel") is not None


def update_kernels(name: str, device: torch.device, sharded: bool = False) -> str:
    """``name`` (--update-kernels) as this run uses it: "auto" is "liger" on a CUDA GPU
    where liger-kernel is installed (not under FSDP2, whose sharded head it cannot take),
    else "torch". "liger" where it cannot run raises, with what to do."""
    usable = device.type == "cuda" and not sharded and liger_installed()
    if name == "auto":
        return "liger" if usable else "torch"
    if name == "liger" and not usable:
        if device.type != "cuda":
            why = f"its Triton kernels need a CUDA GPU and this run is on {device.type}"
        elif sharded:
            why = "it takes the output head whole, and FSDP2 shards it"
        else:
            why = f"liger-kernel is not installed; {INSTALL}"
        raise ValueError(f"--update-kernels liger cannot run here: {why}. Use "
                         f"--update-kernels auto (liger where it can run) or torch.")
    return name


def use_kernels(model, kernels: str, strict: bool = True) -> str:
    """With ``kernels`` "liger", liger's RMSNorm and SwiGLU modules on ``model`` and its
    RoPE, where liger-kernel patches ``model``'s architecture; the kernels used. An
    architecture it does not patch raises where ``strict`` (--update-kernels liger), and
    is "torch" otherwise (auto)."""
    if kernels != "liger":
        return kernels
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    kind = model.config.model_type
    apply = MODEL_TYPE_TO_APPLY_LIGER_FN.get(kind)
    if apply is None and strict:
        raise ValueError(f"liger-kernel has no kernels for the {kind!r} architecture; use "
                         f"--update-kernels auto or torch.")
    if apply is None:
        return "torch"
    # the head's log-probs are pods's (FusedHead), so no fused loss in the forward
    apply(model=model, rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
          fused_linear_cross_entropy=False)
    head = model.get_output_embeddings()
    if type(head) is torch.nn.Linear:  # the same module and weight (tied ones stay tied)
        head.__class__ = FusedHead
    return kernels


class FusedHead(torch.nn.Linear):
    """An output head (``lm_head``) whose forward is nn.Linear's and whose per-token
    log-probs (``logprobs``, what pods.models.logprobs.head_logprobs asks of it) are
    liger-kernel's fused linear cross-entropy. ``use_kernels`` makes a model's head one."""

    def logprobs(self, states: Tensor, targets: Tensor, temperature: float) -> Tensor:
        """[T] float32 log-probs of ``targets`` [T] from the final hidden states [T, H]."""
        return liger_logprobs(states, targets, self, temperature)


def liger_logprobs(states: Tensor, targets: Tensor, head: torch.nn.Module,
                   temperature: float) -> Tensor:
    """[T] float32 log-probs of ``targets`` [T] under softmax(head(states) / temperature),
    ``states`` [T, H]: liger's fused linear cross-entropy per token, negated."""
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    ce = liger_fused_linear_cross_entropy(states / temperature, head.weight, targets,
                                          head.bias, reduction="none",
                                          accum_dtype=torch.float32)  # [T]
    return -ce.float()
