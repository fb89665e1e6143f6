"""Attention over a ``Packing`` stream, registered in transformers' attention interface.

``pods_packed`` is an attention function like transformers' own (``sdpa``, ``flex_attention``):
the model's attention modules call it with the stream's queries, keys and values
``[1, heads, T, d]`` and the ``pods_packing`` keyword the update passes to the model, and
it answers ``[1, T, heads, d]``. Under it, torch's ``scaled_dot_product_attention`` solves
the two small dense problems of ``pods.models.packing`` (prompts over themselves, each
completion over its prompt and itself), with the kernels torch picks for the device (flash
or memory-efficient attention on CUDA, the fused CPU kernel on a CPU), grouped-query
attention included. No model class is patched: ``packed_attention`` switches a model's
``config._attn_implementation`` to it for the update and back after, and a model whose
attention does not go through the interface is caught by the trainer's self-check.

Refused (``refusal``): models whose attention is not plain softmax attention over every
earlier token: sliding windows, attention logit soft-capping, attention sinks, layers that
are not attention (linear attention, state spaces), encoder-decoders.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor

NAME = "pods_packed"
KEYWORD = "pods_packing"  # the model's keyword argument that carries the Packing


def packed_attention_forward(module, query: Tensor, key: Tensor, value: Tensor,
                             attention_mask, **kwargs) -> tuple[Tensor, None]:
    """transformers' attention-function signature: query [1, Hq, T, d], key and value
    [1, Hkv, T, d] of the stream (``dropout`` and ``scaling`` among ``kwargs``, as the
    attention modules pass them); returns [1, T, Hq, d]."""
    dropout, scaling = kwargs.get("dropout", 0.0), kwargs.get("scaling")
    packing = kwargs.get(KEYWORD)
    if packing is None:
        raise RuntimeError(f"attention {NAME!r} was called without {KEYWORD}=: it computes "
                           f"the update's packed layout only (pods.models.packing).")
    for name in ("sliding_window", "softcap", "s_aux"):
        if kwargs.get(name) is not None:
            raise ValueError(f"attention {NAME!r} does not compute {name}; use "
                             f"--update-layout padded for this model.")
    prompts_mask, rows_mask = packing.masks()  # [G, 1, P, P], [R, 1, C, P + C]
    q, k, v = query[0], key[0], value[0]  # [H, T, d]
    gqa = q.shape[0] != k.shape[0]
    p_q, p_k, p_v = (_take(x, packing.prompt_index) for x in (q, k, v))  # [G, H, P, d]
    prompts = F.scaled_dot_product_attention(p_q, p_k, p_v, attn_mask=prompts_mask,
                                             dropout_p=dropout, scale=scaling,
                                             enable_gqa=gqa)  # [G, Hq, P, d]
    parts = [prompts.transpose(1, 2)[packing.prompt_valid]]  # [Tp, Hq, d]
    if packing.row_index.shape[0]:
        group = packing.row_group  # [R]
        r_q, r_k, r_v = (_take(x, packing.row_index) for x in (q, k, v))  # [R, H, C, d]
        rows = F.scaled_dot_product_attention(
            r_q, torch.cat([p_k[group], r_k], dim=2), torch.cat([p_v[group], r_v], dim=2),
            attn_mask=rows_mask, dropout_p=dropout, scale=scaling,
            enable_gqa=gqa)  # [R, Hq, C, d]
        parts.append(rows.transpose(1, 2)[packing.row_valid])  # [Tc, Hq, d]
    return torch.cat(parts).unsqueeze(0), None  # [1, T, Hq, d]


def _take(x: Tensor, index: Tensor) -> Tensor:
    """``x`` [H, T, d] at the stream positions ``index`` [k, W]: [k, H, W, d]."""
    return x[:, index.flatten()].unflatten(1, index.shape).transpose(0, 1)


def register() -> None:
    """Make ``NAME`` a valid ``attn_implementation`` (idempotent). Its masks are not
    registered: transformers then builds none, and the Packing carries its own."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, packed_attention_forward)


# config fields that change attention beyond softmax over every earlier token
CHANGED_ATTENTION = ("attn_logit_softcapping", "attention_chunk_size", "sinks")


def refusal(config) -> str | None:
    """Why the packed layouts cannot compute attention for a model of ``config`` exactly,
    or None where they can (a transformers config; text sub-configs are checked too)."""
    if config is None:
        return "a model without a transformers config"
    config = getattr(config, "text_config", None) or config
    if getattr(config, "is_encoder_decoder", False):
        return "an encoder-decoder model"
    types = set(getattr(config, "layer_types", None) or [])
    if types - {"full_attention"}:
        return f"layers of type {', '.join(sorted(types - {'full_attention'}))}"
    window = getattr(config, "sliding_window", None)  # whatever layer_types says: Mistral,
    # Mixtral and Phi-3 pass it to every layer's attention, a layer_types list or not
    if window and getattr(config, "use_sliding_window", True):
        return f"sliding-window attention (sliding_window {window})"
    for name in CHANGED_ATTENTION:
        if getattr(config, name, None) not in (None, False, 0):
            return f"{name} {getattr(config, name)}"
    return None


def _configs(model) -> dict[int, object]:
    """Every transformers config the modules of ``model`` read their attention from."""
    from transformers import PreTrainedConfig

    found = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if isinstance(config, PreTrainedConfig):
            found[id(config)] = config
    return found


def switched(model) -> bool:
    """Whether every config of ``model`` has ``NAME`` as its attention now."""
    configs = _configs(model).values()
    return bool(configs) and all(c._attn_implementation == NAME for c in configs)


@contextmanager
def packed_attention(*models):
    """While open, the attention of ``models`` (None skipped) is ``NAME``: every forward
    pass must then carry a Packing (``pods_packing=``), and the backward of a packed
    forward must run inside too (gradient checkpointing recomputes the attention there:
    outside, it would be the model's own attention over the unmasked stream)."""
    register()
    configs = {k: c for m in models if m is not None for k, c in _configs(m).items()}
    saved = {k: c._attn_implementation for k, c in configs.items()}
    try:
        for config in configs.values():
            config._attn_implementation = NAME
        yield
    finally:
        for k, config in configs.items():
            config._attn_implementation = saved[k]
