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

``--gradient-checkpointing auto`` (``checkpointing_pays``) weighs the two ways to fit:
checkpointing costs one more forward of every layer, about a third of a pass's compute
(``RECOMPUTE``); a pass more costs reading every weight again, launching every kernel again
and smaller matmuls: ``PASS_TOKENS`` tokens' compute. Where the micro-batch follows free
memory (a CUDA GPU, no micro-batch flag), checkpointing is on where the passes it saves cost
more than its recompute; where a pass's size is fixed (a flag's, or every row in one pass
off CUDA, whose free memory is the machine's available memory), where the pass would not
fit without it.
"""

from __future__ import annotations

import os

import torch

SAFETY = 0.8  # of the free memory: fragmentation, the attention's workspace, other buffers
STATE_BYTES = 12  # a trained weight's float32 gradient (4) and AdamW moments (8)
RECOMPUTE = 1 / 3  # checkpointing's recompute: a forward (1) against forward and backward (3)
PASS_TOKENS = 1024  # a pass's fixed cost in tokens' compute. One H200 (2026-11-28, bare
# fwd+bwd+AdamW, Qwen2.5-1.5B's architecture in bf16) took 0.123 s for 16 rows of 288
# tokens and 0.432 s for 64: 22.4 us a token and 19.6 ms beside, the optimizer step
# included, so a pass's own fixed cost is at most 875 tokens' worth there


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


def host_available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """What this machine's memory has available (Linux's MemAvailable), an even share for
    each process of a multi-process run on it (``LOCAL_WORLD_SIZE``); None where unknown."""
    try:
        with open(meminfo) as lines:
            kib = next(int(line.split()[1]) for line in lines
                       if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return kib * 1024 // max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)


def free_bytes(device: torch.device) -> int | None:
    """Memory the update may take on ``device``: a CUDA GPU's free memory plus what torch's
    allocator holds unused; a CPU's available memory; None elsewhere."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)  # what the driver has free, plus what
        return free + reusable_bytes(device)  # torch's allocator holds unused (freed
        # activations, ...)
    return host_available_bytes() if device.type == "cpu" else None


def fitting_tokens(model, compute_bytes: int, device: torch.device,
                   optimizer=None) -> dict[bool, int] | None:
    """The token positions one pass of ``model`` holds in ``device``'s free memory
    (``fitting_rows`` of one-token rows) beside what ``optimizer`` will still allocate
    (None: the whole gradient and AdamW state of the trained weights), without and with
    gradient checkpointing (``{False: ..., True: ...}``, from one reading of free memory);
    None where free memory is unknown."""
    from pods.models.logprobs import HEAD_CHUNK

    free = free_bytes(device)
    if free is None:
        return None
    config = model.config
    layers, hidden = config.num_hidden_layers, config.hidden_size
    mlp = getattr(config, "intermediate_size", None) or 4 * hidden
    residual = max(next(model.parameters()).element_size(), compute_bytes)  # the weights'
    # dtype carries the residual stream (float32 under autocast)
    reserved = pending_state_bytes(optimizer) if optimizer is not None else \
        STATE_BYTES * sum(local_numel(p) for p in model.parameters() if p.requires_grad)
    head = HEAD_CHUNK * (4 + 2 + 4)
    return {on: fitting_rows(free, reserved, token_bytes(layers, hidden, mlp, compute_bytes,
                                                         on, residual), 1, 2**62, head)
            for on in (False, True)}


def auto_micro_batch(model, rows: int, row_tokens: int, compute_bytes: int,
                     device: torch.device, optimizer=None) -> int | None:
    """The micro-batch for ``rows`` rows of ``row_tokens`` tokens on ``device``: from the
    free memory of a CUDA GPU (``fitting_tokens``, as ``model`` is checkpointed or not);
    None elsewhere (every row in one pass)."""
    if device.type != "cuda":
        return None
    from pods.models.checkpointing import checkpointed

    fit = fitting_tokens(model, compute_bytes, device, optimizer)[checkpointed(model)]
    return max(1, min(rows, fit // row_tokens))


def checkpointing_pays(tokens: int, fit_off: int, fit_on: int, fixed: bool) -> bool:
    """Whether gradient checkpointing should be on for an update of ``tokens`` positions,
    where a pass holds ``fit_off`` positions without it and ``fit_on`` with it (module
    docstring). ``fixed``: ``tokens`` is one pass's size, whatever memory holds (a
    micro-batch flag's, or the one pass off CUDA): on where it does not fit without.
    Else the passes follow memory: on where the passes it saves cost more than the
    recompute (``PASS_TOKENS`` a pass against ``RECOMPUTE`` of every token)."""
    if fixed or tokens <= fit_off:
        return tokens > fit_off
    saved = -(-tokens // fit_off) - -(-tokens // fit_on)  # passes without it, less with
    return saved * PASS_TOKENS > RECOMPUTE * tokens
