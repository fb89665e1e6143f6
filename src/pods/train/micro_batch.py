"""The update's micro-batch when ``--micro-batch-size`` is not set: on a CUDA GPU, as many
rows as free device memory holds by a documented estimate; elsewhere every row in one pass.

The estimate (``fitting_rows``), for a decoder of ``layers`` blocks of width ``hidden``
and MLP width ``intermediate``, computing in ``compute_bytes`` (c: 2 for bf16) with its
residual stream in ``residual_bytes`` (r: the weights' dtype, 4 under autocast over float32
weights, else c):

    per token and layer   (8 + 2r + 4c + k*c) * hidden + 4c * intermediate   what
                          autograd keeps for the backward: each of the two RMSNorms its
                          float32 input and its normalised output in the residual dtype
                          (2 x (4 + r) * hidden), and the compute-dtype input of each
                          projection reading it (k*c * hidden: one tensor shared, k = 2,
                          where r = c; under autocast one cast a projection, k = 5: q, k, v,
                          gate, up); attention's queries, keys, values and output (at most
                          4c * hidden; no [tokens, tokens] scores: SDPA's fused kernels keep
                          none); a gated MLP's gate, up, activated gate and product
                          (4c * intermediate; a plain MLP keeps two, so it errs high there).
                          Checked against the tensors autograd saves on a CPU
                          (tests/train/test_micro_batch.py); for Qwen2.5-1.5B under bf16
                          autocast 3.31 MiB a token, where one H200 measured 2.94 (2026-11-28:
                          64 rows x 288 tokens in one pass; its keys and values were
                          grouped-query, smaller than the bound)
                          gradient checkpointing: r * hidden a layer (its input), plus one
                          layer's whole set (its recompute)
    per row               that times the row's tokens (prompt and completion, padded)
    reserved              what the optimizer step will still allocate: the float32
                          gradient (4 bytes) of each trained weight that has none yet and
                          AdamW's two moments (8 bytes) of each that the optimizer holds no
                          state for (the first step; from the second on both are allocated
                          already, and so already missing from free memory); under FSDP2
                          each rank's own shard of them; plus the head's chunk of logits
                          (float32, its bf16 copy and its gradient:
                          pods.models.logprobs.HEAD_CHUNK)
    free                  what the driver has free, plus what torch's allocator holds unused
                          in its own pool (it reuses it); blocks of CUDA-graph private pools
                          (the hf engine's captured decode steps) are not counted: the update
                          cannot allocate from them
    rows                  (free * SAFETY - reserved) // per row, at least 1, at most all

It errs small: a micro-batch below the fitting one costs some speed, one above it an OOM.
"""

from __future__ import annotations

import torch

SAFETY = 0.8  # of the free memory: fragmentation, the attention's workspace, other buffers
STATE_BYTES = 12  # a trained weight's float32 gradient (4) and AdamW moments (8)


def token_bytes(layers: int, hidden: int, intermediate: int, compute_bytes: int,
                checkpointed: bool, residual_bytes: int | None = None) -> int:
    """Activation bytes one token keeps for the backward pass (module docstring);
    ``residual_bytes`` None: the compute dtype's."""
    c, r = compute_bytes, residual_bytes or compute_bytes
    inputs = 2 if r == c else 5  # projections' inputs: shared, or autocast's cast for each
    per_layer = (8 + 2 * r + 4 * c + inputs * c) * hidden + 4 * c * intermediate
    if checkpointed:
        return layers * r * hidden + per_layer
    return layers * per_layer


def fitting_rows(free: int, reserved: int, per_token: int, row_tokens: int, rows: int,
                 head_bytes: int) -> int:
    """Rows of ``row_tokens`` tokens each (``per_token`` bytes a token) that fit in
    ``free`` bytes beside ``reserved`` bytes the optimizer step will still allocate and
    the head's ``head_bytes``; between 1 and ``rows``."""
    room = free * SAFETY - reserved - head_bytes
    return max(1, min(rows, int(room // max(per_token * row_tokens, 1))))


def local_numel(p) -> int:
    """Elements of ``p`` on this rank: an FSDP2 DTensor's own shard, not the global count."""
    return p.to_local().numel() if hasattr(p, "to_local") else p.numel()


def pending_state_bytes(optimizer) -> int:
    """Bytes the optimizer step will still allocate for its parameters: a float32 gradient
    where a parameter has none, AdamW's two moments where the optimizer holds no state."""
    state = getattr(optimizer, "state", {})
    total = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            n = local_numel(p)
            total += 4 * n * (p.grad is None) + 8 * n * (not state.get(p))
    return total


def reusable_bytes(device: torch.device) -> int:
    """What torch's allocator holds unused in its default pool (the update reuses it); the
    free blocks of CUDA-graph private pools are left out (``torch.cuda.memory._snapshot``
    names each segment's pool; where it cannot, reserved minus allocated)."""
    try:
        segments = torch.cuda.memory._snapshot(device)["segments"]
        return sum(s["total_size"] - s["allocated_size"] for s in segments
                   if tuple(s.get("segment_pool_id", (0, 0))) == (0, 0))
    except (AttributeError, KeyError, RuntimeError, TypeError):
        return torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def auto_micro_batch(model, rows: int, row_tokens: int, compute_bytes: int,
                     device: torch.device, optimizer=None) -> int | None:
    """The micro-batch for ``rows`` rows of ``row_tokens`` tokens on ``device``: from the
    free memory of a CUDA GPU (``fitting_rows``) beside what ``optimizer`` will still
    allocate (None: the whole gradient and AdamW state of the trained weights); None
    elsewhere (every row in one pass)."""
    if device.type != "cuda":
        return None
    from pods.models.checkpointing import checkpointed
    from pods.models.logprobs import HEAD_CHUNK

    config = model.config
    hidden = config.hidden_size
    residual = max(next(model.parameters()).element_size(), compute_bytes)  # the weights'
    # dtype carries the residual stream (float32 under autocast)
    per_token = token_bytes(config.num_hidden_layers, hidden,
                            getattr(config, "intermediate_size", None) or 4 * hidden,
                            compute_bytes, checkpointed(model), residual)
    reserved = pending_state_bytes(optimizer) if optimizer is not None else \
        STATE_BYTES * sum(local_numel(p) for p in model.parameters() if p.requires_grad)
    free, _ = torch.cuda.mem_get_info(device)  # what the driver has free, plus what torch's
    free += reusable_bytes(device)  # allocator holds unused (freed activations, ...)
    return fitting_rows(free, reserved, per_token, row_tokens, rows, HEAD_CHUNK * (4 + 2 + 4))
