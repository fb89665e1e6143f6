"""The update's micro-batch when ``--micro-batch-size`` is not set: on a CUDA GPU, as many
rows as free device memory holds by a documented estimate; elsewhere every row in one pass.

The estimate (``fitting_rows``), for a decoder of ``layers`` blocks of width ``hidden``
and MLP width ``intermediate``, computing in ``compute_bytes`` (2 for bf16):

    per token and layer   compute_bytes * (8 * hidden + 2 * intermediate)   kept for the
                          backward: the inputs of the norms, the four attention matmuls and
                          the three MLP ones, and the MLP's activations (Korthikanti et
                          al. 2022, "Reducing Activation Recomputation": 34 * hidden bytes
                          in 16 bits for an MLP of 4 * hidden, without the attention
                          scores, which SDPA's fused kernels do not keep)
                          gradient checkpointing: compute_bytes * hidden a layer, plus one
                          layer's whole set (its recompute)
    per row               that times the row's tokens (prompt and completion, padded)
    reserved              the gradients and AdamW's two moments of the trained weights
                          (12 bytes each, float32), the head's chunk of logits (float32,
                          its bf16 copy and its gradient: pods.models.logprobs.HEAD_CHUNK)
    rows                  (free * SAFETY - reserved) // per row, at least 1, at most all

It errs small: a micro-batch below the fitting one costs some speed, one above it an OOM.
"""

from __future__ import annotations

import torch

SAFETY = 0.8  # of the free memory: fragmentation, the attention's workspace, other buffers
STATE_BYTES = 12  # a trained weight's float32 gradient (4) and AdamW moments (8)


def token_bytes(layers: int, hidden: int, intermediate: int, compute_bytes: int,
                checkpointed: bool) -> int:
    """Activation bytes one token keeps for the backward pass (module docstring)."""
    per_layer = compute_bytes * (8 * hidden + 2 * intermediate)
    if checkpointed:
        return layers * compute_bytes * hidden + per_layer
    return layers * per_layer


def fitting_rows(free: int, trained: int, per_token: int, row_tokens: int, rows: int,
                 head_bytes: int) -> int:
    """Rows of ``row_tokens`` tokens each (``per_token`` bytes a token) that fit in
    ``free`` bytes beside the state of ``trained`` weights and the head's ``head_bytes``;
    between 1 and ``rows``."""
    room = free * SAFETY - trained * STATE_BYTES - head_bytes
    return max(1, min(rows, int(room // max(per_token * row_tokens, 1))))


def auto_micro_batch(model, rows: int, row_tokens: int, compute_bytes: int,
                     device: torch.device) -> int | None:
    """The micro-batch for ``rows`` rows of ``row_tokens`` tokens on ``device``: from the
    free memory of a CUDA GPU (``fitting_rows``); None elsewhere (every row in one pass)."""
    if device.type != "cuda":
        return None
    from pods.models.logprobs import HEAD_CHUNK
    from pods.models.weight_cast import checkpointed

    config = model.config
    hidden = config.hidden_size
    per_token = token_bytes(config.num_hidden_layers, hidden,
                            getattr(config, "intermediate_size", None) or 4 * hidden,
                            compute_bytes, checkpointed(model))
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    free, _ = torch.cuda.mem_get_info(device)  # what the driver has free, plus what torch's
    # allocator holds unused (freed activations, generation's buffers), which it reuses
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return fitting_rows(free, trained, per_token, row_tokens, rows, HEAD_CHUNK * (4 + 2 + 4))
