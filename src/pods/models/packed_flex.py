"""The packed layouts' GPU kernel: one FlexAttention call over the whole stream of a
``Packing``, its mask a ``BlockMask`` built once a micro-batch.

The SDPA path of ``pods.models.packed_attention`` solves two dense problems (prompts over
themselves, each completion over its prompt and itself): on a CPU that is the fused kernel
and the fastest path, but on CUDA it copies each group's prompt keys once a row and, with
an explicit mask, cannot use the flash kernel. Here every token of the stream attends in
one call (Dong et al. 2024, "Flex Attention", ``torch.nn.attention.flex_attention``), with

    mask(q, k) = same group  and  k <= q  and  (k is a prompt token or k is in q's row)

over the stream ``[prompts | completions]`` padded to a multiple of ``BLOCK`` (the
padding its own group, so no query is left without a key). The mask is given as a
``BlockMask`` whose blocks are computed from each block's range of groups and rows (a
superset of the blocks the mask touches, so ``mask_mod`` decides inside them; blocks of one
group's prompt before a block of that group are "full" and skip it): no [T, T] mask is
ever made, and grouped-query attention is native (``enable_gqa``).

``kernel_for`` chooses: FlexAttention on CUDA (compiled once, ``torch.compile``; if
compiling fails, a warning and the SDPA path), the SDPA path elsewhere. torch's
FlexAttention has no backward on a CPU, so there the SDPA path is the kernel and the
oracle this one is tested against (tests/models/test_packed_flex.py);
``PODS_PACKED_KERNEL=flex`` forces it (a CPU runs its forward uncompiled).
"""

from __future__ import annotations

import os
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor

from pods.models.cache import compile_cache

BLOCK = 128  # FlexAttention's block: the stream is padded to a multiple of it
ENV = "PODS_PACKED_KERNEL"  # "flex" or "sdpa": overrides the device's choice
KERNELS = ("flex", "sdpa")
COMPILED_ON = ("cuda",)  # devices where FlexAttention runs compiled (a CPU: as it comes)
_compiled = {}  # "flex": torch.compile(flex_attention), made at the first call
_failed: list[str] = []  # why compiling failed (then the SDPA path, warned once)


def kernel_for(device: torch.device) -> str:
    """The packed attention's kernel on ``device``: "flex" on CUDA where torch has
    FlexAttention and it has compiled, else "sdpa"; ``PODS_PACKED_KERNEL`` overrides."""
    forced = os.environ.get(ENV)
    if forced:
        if forced not in KERNELS:
            raise ValueError(f"{ENV}={forced!r}: use one of {', '.join(KERNELS)} (or unset "
                             f"it: flex on CUDA, sdpa elsewhere).")
        return forced
    return "flex" if device.type == "cuda" and flex_available() and not _failed else "sdpa"


def flex_available() -> bool:
    try:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def stream_labels(packing, length: int) -> tuple[Tensor, Tensor]:
    """[length] the group of each stream position and its row (-1: a prompt token), the
    positions past the stream (padding) a group of their own, G, and row -1. Scattered
    from the Packing's indices: no host synchronisation."""
    G, P = packing.prompt_index.shape
    R, C = packing.row_index.shape
    device = packing.prompt_index.device
    group = torch.full((length + 1,), G, dtype=torch.long, device=device)  # [length + 1]
    row = torch.full((length + 1,), -1, dtype=torch.long, device=device)  # the last: a sink
    slots = torch.where(packing.prompt_valid, packing.prompt_index, length)  # [G, P]
    group.scatter_(0, slots.flatten(),
                   torch.arange(G, device=device).repeat_interleave(P, output_size=G * P))
    slots = torch.where(packing.row_valid, packing.row_index, length).flatten()  # [R C]
    group.scatter_(0, slots, packing.row_group.repeat_interleave(C, output_size=R * C))
    row.scatter_(0, slots, torch.arange(R, device=device).repeat_interleave(
        C, output_size=R * C))
    return group[:length], row[:length]


def mask_mod_of(group: Tensor, row: Tensor):
    """The layout's mask as FlexAttention's ``mask_mod`` over stream positions."""
    def mask_mod(b, h, q, k):
        return (group[q] == group[k]) & (k <= q) & ((row[k] < 0) | (row[k] == row[q]))
    return mask_mod


def block_mask(packing, length: int):
    """The ``BlockMask`` of ``packing`` over a stream padded to ``length`` (a multiple of
    ``BLOCK``), its blocks from ``blocks``."""
    from torch.nn.attention.flex_attention import BlockMask

    group, row = stream_labels(packing, length)  # [L], [L]
    partial, full = blocks(group, row)
    return BlockMask.from_kv_blocks(
        *_ordered(partial), *_ordered(full), BLOCK_SIZE=BLOCK,
        mask_mod=mask_mod_of(group, row), seq_lengths=(length, length))


def blocks(group: Tensor, row: Tensor) -> tuple[Tensor, Tensor]:
    """[nb, nb] the (query, key) block pairs FlexAttention computes with ``mask_mod``
    (partial), and those it computes without (full), from the stream's labels [L]: a
    pair is computed where the blocks' ranges of groups and rows could meet (a superset
    of the pairs the mask allows anywhere), and full where the key block is one group's
    prompt tokens only, strictly before a query block of that group alone."""
    g, r = group.view(-1, BLOCK), row.view(-1, BLOCK)  # [nb, BLOCK]
    gmin, gmax = g.amin(1), g.amax(1)  # [nb]
    rmin = torch.where(r >= 0, r, len(group)).amin(1)  # [nb] (L: no completion token)
    rmax = r.amax(1)  # [nb] (-1: no completion token)
    prompt_any, prompt_all = (r < 0).any(1), (r < 0).all(1)  # [nb]
    q, k = (slice(None), None), (None, slice(None))  # [nb, 1] queries, [1, nb] keys
    causal = torch.ones(len(gmin), len(gmin), dtype=torch.bool, device=g.device).tril()
    groups_meet = (gmin[k] <= gmax[q]) & (gmin[q] <= gmax[k])  # [nb, nb]
    rows_meet = (rmin[k] <= rmax[q]) & (rmin[q] <= rmax[k])
    touched = causal & groups_meet & (prompt_any[k] | rows_meet)  # [nb, nb]
    one = gmin == gmax  # [nb] a block of one group
    full = causal.tril(-1) & one[q] & one[k] & (gmin[q] == gmin[k]) & prompt_all[k]
    return touched & ~full, full


def _ordered(blocks: Tensor) -> tuple[Tensor, Tensor]:
    """[1, 1, nb] the key blocks each query block takes, [1, 1, nb, nb] which (first)."""
    dense = blocks.to(torch.int32)[None, None]  # [1, 1, nb, nb]
    order = torch.argsort(dense, dim=-1, descending=True, stable=True)
    return dense.sum(-1).to(torch.int32), order.to(torch.int32)


def flex_packed(query: Tensor, key: Tensor, value: Tensor, packing,
                scaling: float | None) -> Tensor | None:
    """[1, T, Hq, d]: attention over the stream (query [1, Hq, T, d], key and value
    [1, Hkv, T, d]) under the layout's mask, or None where the compiled kernel failed
    to build (warned once: the caller takes the SDPA path)."""
    if _failed:  # it failed to compile once: not tried again at every layer
        return None
    T = query.shape[2]
    length = -(-T // BLOCK) * BLOCK
    mask = packing.cached(f"block{length}", lambda: block_mask(packing, length))
    q, k, v = (F.pad(x, (0, 0, 0, length - T)) for x in (query, key, value))
    try:
        out = _flex(query.device)(q, k, v, block_mask=mask, scale=scaling,
                                  enable_gqa=q.shape[1] != k.shape[1])  # [1, Hq, L, d]
    except Exception as error:  # dynamo's and inductor's errors, Triton's
        if query.device.type not in COMPILED_ON or isinstance(error, torch.OutOfMemoryError):
            raise
        _failed.append(f"{type(error).__name__}: {error}")
        warnings.warn(f"FlexAttention did not compile ({_failed[0][:300]}); the packed "
                      f"layouts compute with SDPA on this device from now on.",
                      RuntimeWarning, stacklevel=2)
        return None
    return out[:, :, :T].transpose(1, 2)  # [1, T, Hq, d]


def flex_attention_fn():
    """torch's ``flex_attention``, uncompiled."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention


def _flex(device: torch.device):
    """FlexAttention compiled once (CUDA: dynamo makes the stream's length symbolic at the
    second length it sees, so micro-batches of other lengths take the same kernel), or as
    it comes (a CPU: forward only)."""
    if device.type not in COMPILED_ON:
        return flex_attention_fn()
    if "flex" not in _compiled:
        compile_cache()  # its kernels in the pods cache, built once a machine
        _compiled["flex"] = torch.compile(flex_attention_fn())
    return _compiled["flex"]
