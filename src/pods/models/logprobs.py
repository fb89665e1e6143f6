"""Per-token log-probs of completions under the policy: what the loss, the ratio and the
engine/trainer log-prob gap are computed from.

Memory: the output projection's logits are the largest tensors of an update ([tokens x
vocabulary]: 49,152 columns for SmolLM2, 152k for Qwen2.5), and autograd would keep them
(and their float32 copy for the log-softmax) until the backward pass. So for a model with
an output head (``get_output_embeddings``), the model runs with its head passing the final
hidden states through, and the head is applied here a chunk of completion tokens at a time
(``HEAD_CHUNK`` floats of logits), each chunk under activation checkpointing: only the
hidden states [tokens, H] are kept, and each chunk's logits are made again in the backward
pass. Padding positions are skipped. The update's memory then does not grow with the
vocabulary beyond one chunk; the price is one more pass of the head in the backward
(``benchmarks/update/update_memory.py`` measures both).

Precision: the result is float32 whatever the weights' dtype. bf16 logits are upcast
before the log-softmax: a bf16 log-softmax rounds each log-prob by up to ~4e-3 relative,
which would bias the ratio, the KL term and ``rollout/logprob_gap`` (tests/train/test_bf16).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from pods.models.kernels import FusedHead


def completion_logprobs(model, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                        completion_mask: Tensor, temperature: float) -> Tensor:
    """log pi(token) of each completion token under the sampling distribution
    softmax(logits / temperature). Prompts left-padded [B, Lp], completions right-padded
    [B, Lc]; returns [B, Lc] (0 at padding, or meaningless there: mask them).

    ``model`` is a causal LM taking ``logits_to_keep`` (transformers), possibly wrapped
    (DDP's ``.module``, PEFT, FSDP2); with an output head the head is applied in chunks
    (module docstring), or by liger-kernel's fused linear cross-entropy where the head is
    a ``FusedHead`` (--update-kernels, pods.models.kernels), else the model's logits are
    used as they come."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [B, Lp+Lc]
    attention = torch.cat([prompt_mask, completion_mask], dim=1)  # [B, Lp+Lc]
    positions = (attention.cumsum(1) - 1).clamp(min=0)  # as generate() numbers them
    width = completion_ids.shape[1]
    head = output_head(model)
    with passing_through(head):
        out = model(input_ids=ids, attention_mask=attention, position_ids=positions,
                    logits_to_keep=width + 1).logits[:, :-1]  # [B, Lc, H] or [B, Lc, V]
    if head is None:
        return _full_logprobs(out, completion_ids, temperature)
    sharded = _sharded_root(model)
    if sharded is not None:  # FSDP2 resharded the head with the root after the forward
        sharded.unshard()  # its backward (root post-backward) reshards it again
    logp = head_logprobs(out, completion_ids, completion_mask, head, temperature)
    if sharded is not None and not torch.is_grad_enabled():
        sharded.reshard()
    return logp


# config fields of models that change the head's output before returning it as logits
# (Gemma 2's soft-capping, Cohere's and Granite's scaling): their logits are used as they come
LOGIT_CHANGES = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def output_head(model) -> torch.nn.Module | None:
    """The module that maps final hidden states to logits (``lm_head``), or None where
    there is none or the model changes its output (``LOGIT_CHANGES``)."""
    inner = getattr(model, "module", model)  # DDP keeps the model as .module
    get = getattr(inner, "get_output_embeddings", None)
    head = get() if callable(get) else None
    config = getattr(inner, "config", None)
    if any(getattr(config, name, None) not in (None, 1.0) for name in LOGIT_CHANGES):
        return None
    return head if isinstance(head, torch.nn.Module) else None


def _sharded_root(model):
    """The outermost FSDP2 module (``fully_shard``), whose parameters hold the head's, or
    None when the model is not sharded."""
    for module in model.modules():  # outermost first
        if type(module).__name__.startswith("FSDP"):  # fully_shard's classes: FSDP<Name>
            from torch.distributed.fsdp import FSDPModule

            if isinstance(module, FSDPModule):
                return module
    return None


@contextmanager
def passing_through(head: torch.nn.Module | None):
    """While open, ``head`` returns its input (the model's logits are then its final hidden
    states); its own forward, hooks and all, is back when it closes."""
    if head is None:
        yield
        return
    saved = head.__dict__.get("forward")  # an instance forward (accelerate's hooks set one)
    head.forward = _identity
    try:
        yield
    finally:
        if saved is None:
            del head.forward
        else:
            head.forward = saved


def _identity(hidden: Tensor) -> Tensor:
    return hidden


def head_logprobs(hidden: Tensor, completion_ids: Tensor, completion_mask: Tensor,
                  head: torch.nn.Module, temperature: float) -> Tensor:
    """[B, Lc] log-probs from the final hidden states ``hidden`` [B, Lc, H] of the positions
    that predict ``completion_ids`` [B, Lc]: ``head`` on the unpadded tokens (``token_logprobs``);
    0 at padding."""
    where = completion_mask.bool()  # [B, Lc]
    anchor = hidden.flatten(0, 1)[:1], completion_ids.flatten()[:1]  # [1, H], [1]
    return _scatter(where, token_logprobs(hidden[where], completion_ids[where], head,
                                          temperature, anchor))


def token_logprobs(states: Tensor, targets: Tensor, head: torch.nn.Module, temperature: float,
                   anchor: tuple[Tensor, Tensor]) -> Tensor:
    """[N] log-probs of ``targets`` [N] from the final hidden states ``states`` [N, H]: the
    head a chunk at a time, each chunk checkpointed when gradients are on (a ``FusedHead``
    at temperature 1: liger's fused kernel does both). With no token (N = 0: a rank's
    padding rows under batch selection), 0 times the head on ``anchor`` (a state [1, H] and
    a target [1]): the head and the model still take part in the backward, as DDP and FSDP
    need of every rank."""
    if not states.shape[0]:
        return 0.0 * _chunk_logprobs(*anchor, head, temperature).sum()  # []
    if isinstance(head, FusedHead) and temperature == 1.0:
        return head.logprobs(states, targets, temperature)  # at another temperature the
    # fused kernel cannot divide the logits as the sampler does (pods.models.kernels)
    step = max(1, HEAD_CHUNK // _vocabulary(head))  # tokens per chunk
    parts = []
    for start in range(0, states.shape[0], step):
        args = (states[start:start + step], targets[start:start + step], head, temperature)
        parts.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False)
                     if torch.is_grad_enabled() and states.requires_grad
                     else _chunk_logprobs(*args))
    return torch.cat(parts)


def _scatter(where: Tensor, values: Tensor) -> Tensor:
    """[B, Lc] float32: ``values`` [N] at the True places of ``where`` [B, Lc], 0 elsewhere
    (``values`` a scalar: added everywhere, so its graph is kept)."""
    out = torch.zeros(where.shape, dtype=torch.float32, device=where.device)
    return out + values if values.dim() == 0 else out.masked_scatter(where, values)


def packed_logprobs(model, packing, completion_ids: Tensor, completion_mask: Tensor,
                    temperature: float) -> Tensor:
    """``completion_logprobs`` of the rows of a micro-batch laid out as one stream
    (``pods.models.packing.pack`` of these rows, completions right-padded [b, Lc]); returns
    [b, Lc]. The model runs once on the stream, under ``packed_attention``; only the
    positions that predict a completion token reach the head."""
    from pods.models.packed_attention import KEYWORD, switched

    if not switched(model):
        raise RuntimeError("packed_logprobs runs inside packed_attention(model), forward and "
                           "backward (gradient checkpointing recomputes the attention there).")
    where = completion_mask.bool()  # [b, Lc]
    targets = completion_ids[where]  # [N] row-major, as the stream holds them
    keep = packing.predictors if len(packing.predictors) else \
        packing.predictors.new_zeros(1)  # [N] (a first position for a pass without tokens)
    head = output_head(model)
    with passing_through(head):
        out = model(input_ids=packing.input_ids, position_ids=packing.position_ids,
                    use_cache=False, logits_to_keep=keep,
                    **{KEYWORD: packing}).logits[0]  # [N, H] or [N, V]
    if head is None:
        values = _full_logprobs(out.unsqueeze(0), targets.unsqueeze(0), temperature)[0] \
            if len(targets) else 0.0 * out.float().sum()
        return _scatter(where, values)
    sharded = _sharded_root(model)
    if sharded is not None:  # as in completion_logprobs
        sharded.unshard()
    values = token_logprobs(out[:len(targets)], targets, head, temperature,
                            (out[:1], keep.new_zeros(1)))
    if sharded is not None and not torch.is_grad_enabled():
        sharded.reshard()
    return _scatter(where, values)


def _vocabulary(head: torch.nn.Module) -> int:
    """The head's output width (a Linear's out_features, also when FSDP shards its weight)."""
    width = getattr(head, "out_features", None)
    weight = getattr(head, "weight", None)
    if width is None and isinstance(weight, Tensor) and weight.dim() == 2:
        width = weight.shape[0]
    return int(width or 2**17)


def _chunk_logprobs(states: Tensor, targets: Tensor, head: torch.nn.Module,
                    temperature: float) -> Tensor:
    """[t] log-probs of ``targets`` [t] from ``states`` [t, H]."""
    logits = head(states).float() / temperature  # [t, V]
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)


def _full_logprobs(logits: Tensor, completion_ids: Tensor, temperature: float) -> Tensor:
    """[B, Lc] from the model's own logits [B, Lc, V], the float32 log-softmax a few
    sequences at a time (at most ``HEAD_CHUNK`` floats)."""
    step = max(1, HEAD_CHUNK // max(logits.shape[1] * logits.shape[2], 1))
    parts = []
    for start in range(0, logits.shape[0], step):
        chunk = logits[start : start + step].float() / temperature  # [b, Lc, V]
        ids_chunk = completion_ids[start : start + step].unsqueeze(-1)  # [b, Lc, 1]
        parts.append(chunk.gather(-1, ids_chunk).squeeze(-1) - chunk.logsumexp(-1))
    return torch.cat(parts)  # [B, Lc]


HEAD_CHUNK = 2**25  # floats (128 MB in float32) of logits per chunk
