"""The update's kernels (``--update-kernels``): liger-kernel's Triton kernels on a CUDA GPU,
or torch's (transformers' modules and pods's chunked head, pods.models.logprobs).

    update_kernels(name, device, sharded)   "liger" or "torch"; an unusable "liger" fails
    use_kernels(model, kernels, strict)     put liger's RMSNorm and SwiGLU on ``model`` alone,
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
and a CUDA GPU; elsewhere pods's chunked head does the same in torch.

Only the model asked for gets liger's modules. liger's ``apply_liger_kernel_to_<arch>``
patches the given model's modules and, besides, rebinds names in transformers' modeling
modules (``Qwen2RMSNorm``, ``Qwen2MLP``, ``apply_rotary_pos_emb``), so that every model
built later in the process (a reference or evaluation model, a CPU model, the next trainer)
would get Triton modules: ``use_kernels`` restores those names after liger's call
(``scoped``). liger's RoPE is such a name (a function of the modeling module, not a module
of the model) and so is not used: the rotary embedding stays torch's.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import warnings
from contextlib import contextmanager

import torch
from torch import Tensor

INSTALL = "pip install -e '.[gpu]' in pods's clone (or: pip install liger-kernel)"


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
    """With ``kernels`` "liger", liger's RMSNorm and SwiGLU modules on ``model`` (on it
    alone: ``scoped``), where liger-kernel patches ``model``'s architecture; the kernels used. An
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
    try:
        with scoped():
            apply(model=model, **liger_arguments(apply))
    except (TypeError, ValueError, AttributeError, ImportError) as error:
        why = f"liger-kernel's {getattr(apply, '__name__', 'patch')} for {kind!r} failed " \
              f"({type(error).__name__}: {error})"
        if strict:
            raise ValueError(f"{why}; use --update-kernels auto or torch.") from error
        warnings.warn(f"{why}: the update computes with torch's kernels.", RuntimeWarning,
                      stacklevel=2)
        return "torch"
    head = model.get_output_embeddings()
    if type(head) is torch.nn.Linear:  # the same module and weight (tied ones stay tied)
        head.__class__ = FusedHead
    return kernels


@contextmanager
def scoped():
    """Whatever names liger's patch rebinds in transformers' modules (loaded ones and any it
    imports) are restored when the block ends: its modules stay on the model it was given,
    which holds them as instances (their forwards bound), and nowhere else."""
    def modules():
        return {name: module for name, module in list(sys.modules.items())
                if name.startswith("transformers") and module is not None}

    before = {name: dict(vars(module)) for name, module in modules().items()}
    try:
        yield
    finally:
        for name, module in modules().items():
            names = before.get(name)
            if names is None:  # imported by the patch: what it rebound, read from liger's
                continue  # module-level patches is not knowable; pods asks none of those
            for key, value in list(vars(module).items()):
                if key in names and names[key] is not value:
                    setattr(module, key, names[key])
                elif key not in names and key.startswith(("Liger", "liger")):
                    delattr(module, key)


# what pods asks of liger's patch: its kernels, and no fused loss in the forward (the
# head's log-probs are pods's, a FusedHead); each architecture's function takes some of
# these (Gemma's and PaliGemma's geglu where the others have swiglu; Pixtral has no
# cross_entropy), so each gets those its signature names. No RoPE: liger's is a name in
# transformers' modeling module, which would reach every model of the architecture.
LIGER_OPTIONS = {"rope": False, "rms_norm": True, "swiglu": True, "geglu": True,
                 "cross_entropy": False, "fused_linear_cross_entropy": False}
COMMON = ("rope", "rms_norm", "swiglu", "cross_entropy", "fused_linear_cross_entropy")


def liger_arguments(apply) -> dict[str, bool]:
    """The options of ``LIGER_OPTIONS`` that ``apply`` (an apply_liger_kernel_to_* function)
    takes, by its signature; a function of **kwargs alone gets the common ones."""
    params = inspect.signature(apply).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()) and \
            not set(params) & set(LIGER_OPTIONS):
        return {k: LIGER_OPTIONS[k] for k in COMMON}
    return {k: v for k, v in LIGER_OPTIONS.items() if k in params}


class FusedHead(torch.nn.Linear):
    """An output head (``lm_head``) whose forward is nn.Linear's and whose per-token
    log-probs at temperature 1 (``logprobs``, what pods.models.logprobs asks of it) are
    liger-kernel's fused linear cross-entropy. ``use_kernels`` makes a model's head one.

    Only at temperature 1: the sampler divides the float32-upcast logits by T, and liger's
    kernel takes no temperature, so dividing its input (the hidden states, in bf16) would
    round once more than the sampler does (a probe at T = 0.9: 0.014 nats a token on
    average, 0.056 at most), and a head's bias would not be divided at all. At another
    temperature pods's chunked head computes the log-probs (the same memory bound), and
    liger's RMSNorm and SwiGLU kernels stay."""

    def logprobs(self, states: Tensor, targets: Tensor, temperature: float) -> Tensor:
        """[T] float32 log-probs of ``targets`` [T] from the final hidden states [T, H]."""
        if temperature != 1.0:
            raise ValueError(f"the fused head computes log-probs at temperature 1 only, not "
                             f"{temperature}: pods.models.logprobs uses the chunked head")
        return liger_logprobs(states, targets, self)


def liger_logprobs(states: Tensor, targets: Tensor, head: torch.nn.Module) -> Tensor:
    """[T] float32 log-probs of ``targets`` [T] under softmax(head(states)), ``states``
    [T, H]: liger's fused linear cross-entropy per token, negated (its logits are the
    head's bf16 output upcast, as the sampler's)."""
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    ce = liger_fused_linear_cross_entropy(states, head.weight, targets, head.bias,
                                          reduction="none",
                                          accum_dtype=torch.float32)  # [T]
    return -ce.float()
