"""The update's passes over the kept rows: how a step's batch is cut into micro-batches
(pods.train.layout.micro_batches) by --micro-batch-size, --micro-batch-tokens or, on a CUDA
GPU, the device's free memory (pods.train.micro_batch), with as many passes on every rank.

    parts(model, batch, spec, dist, optimizer)   the micro-batches and what was chosen
    compute_bytes(model)                         bytes of an activation in the passes

``spec`` is the update's UpdateSpec (pods.train.update): its optim group, layout and the
``budget`` measured at the run's first update; gradient checkpointing's ``auto`` is chosen
when the trainer is built (``choose_checkpointing``).
"""

from __future__ import annotations

import torch

from pods.models.checkpointing import set_checkpointing
from pods.rollout import Rollouts
from pods.runtime.distributed import Dist
from pods.train.layout import Part, idle_part, micro_batches
from pods.train.micro_batch import auto_micro_batch, checkpointing_pays, fitting_tokens


def compute_bytes(model) -> int:
    """Bytes of an activation in the update's passes: 2 in bf16 or float16, else 4."""
    p = next(model.parameters())
    return 2 if p.dtype in (torch.bfloat16, torch.float16) or \
        torch.is_autocast_enabled(p.device.type) else 4


def parts(model, batch: Rollouts, spec, dist: Dist,
          optimizer=None) -> tuple[list[Part], dict]:
    """The micro-batches of ``batch`` in ``spec.layout`` and what cut them, on every device
    and in every layout: ``optim/micro_batch_tokens``, the token positions a pass may hold
    (--micro-batch-tokens; padded rows of --micro-batch-size times the batch's width; the
    one pass's positions where neither cuts), and ``optim/micro_batch_size``, the rows of
    the largest pass; chosen from free device memory where neither flag is set on a CUDA
    GPU (the same on every rank: the smallest rank's choice). Every rank runs as many parts
    as the busiest (``idle_part``; FSDP2 gathers the weights in every pass): padded parts of
    --micro-batch-tokens hold the rows of the widest rank's width, the packed layouts'
    whole groups."""
    optim, layout = spec.optim, spec.layout
    rows, tokens = optim.micro_batch_size, optim.micro_batch_tokens
    B, width = batch.completion_ids.shape[0], \
        batch.prompt_ids.shape[1] + batch.completion_ids.shape[1]
    if rows is None and tokens is None:
        budget = token_budget(model, spec, dist, optimizer)  # positions a pass, or None
        if budget is not None:
            padded = layout == "padded"
            fit = max(1, min(B, budget // width)) if padded else min(B * width, budget)
            rows, tokens = (fit, None) if padded else (None, fit)
    most = None  # passes of the busiest rank, where already known
    if layout == "padded" and tokens is not None:
        rows, most = padded_rows(batch, tokens, dist)
    pieces = micro_batches(batch, layout, rows, tokens)
    chosen = {}  # asked, chosen or one pass: the same keys in every layout, on every device
    if pieces:
        largest = max(p.count(batch) for p in pieces)
        cut = float(tokens) if tokens is not None else float(rows * width) if rows else \
            float(max(p.tokens(batch) for p in pieces))
        chosen = {"optim/micro_batch_tokens": cut, "optim/micro_batch_size": float(largest)}
    if spec.auto_checkpointing:
        chosen["optim/gradient_checkpointing"] = float(spec.budget["checkpointing"])
    if dist.world > 1:
        if most is None:
            most = int(dist.reduce({"parts": len(pieces)}, "max")["parts"])
        pieces += [idle_part(batch, layout) for _ in range(most - len(pieces))]
    return pieces, chosen


def padded_rows(batch: Rollouts, tokens: int, dist: Dist) -> tuple[int, int]:
    """Rows a padded part of ``tokens`` positions holds, at the widest rank's width
    (Lp + Lc: each rank trims its rows to its own longest, and the ranks' parts must hold
    the same rows to be as many), and the parts of the rank with the most rows: one
    reduction over the ranks."""
    width = batch.prompt_ids.shape[1] + batch.completion_ids.shape[1]
    most = dist.reduce({"width": width, "rows": batch.completion_ids.shape[0]}, "max")
    rows = max(1, tokens // int(most["width"]))
    return rows, -(-int(most["rows"]) // rows)


def token_budget(model, spec, dist: Dist, optimizer) -> int | None:
    """The positions one pass holds by the device's free memory (pods.train.micro_batch;
    the same on every rank: the smallest rank's), measured at the run's first update and
    kept in ``spec.budget``: not read again at every update (the allocator's snapshot, the
    driver's free memory and a reduction over the ranks are host reads). None off CUDA."""
    if "tokens" not in spec.budget:
        p = next(model.parameters())
        fit = auto_micro_batch(model, 2**62, 1, compute_bytes(model), p.device, optimizer)
        if fit is not None:
            fit = int(-dist.reduce({"fit": -fit}, "max")["fit"])  # the smallest over ranks
        spec.budget["tokens"] = fit
    return spec.budget["tokens"]


def choose_checkpointing(model, rows: int, width: int, spec, dist: Dist) -> str:
    """--gradient-checkpointing auto, when the trainer is built (before any generation: a
    compiled sampler sharing ``model`` sees it as it will stay): whether ``model`` (the
    module the passes run through) recomputes its activations, switched so and kept in
    ``spec.budget``, the same on every rank (FSDP2 gathers the weights again in a
    recompute): from the token positions a pass holds in free memory with and without it
    (pods.train.micro_batch: ``checkpointing_pays``, beside the whole optimizer state still
    to come) for this rank's ``rows`` kept rows at their widest, ``width`` tokens (the
    longest prompt and ``max_new_tokens``). On where free memory is unknown. Returns the
    line that says why."""
    p = next(model.parameters())
    fits = fitting_tokens(model, compute_bytes(model), p.device)  # or None
    fit_off, fit_on = (None, None) if fits is None else (fits[False], fits[True])
    fixed = fixed_pass(spec.optim, rows, width, p.device.type)
    tokens = fixed or rows * width
    on = fits is None or checkpointing_pays(tokens, fit_off, fit_on, fixed is not None)
    on = bool(dist.reduce({"on": float(on)}, "max")["on"])
    if on:
        set_checkpointing(model, True)
    spec.budget["checkpointing"] = on
    return f"gradient checkpointing (auto): {'on' if on else 'off'}: " + (
        "this device's free memory is unknown" if fits is None else
        f"a pass holds {fit_off:,} token positions without it, {fit_on:,} with it; "
        f"{'a pass' if fixed else 'the update'} takes {tokens:,} at most")


def fixed_pass(optim, rows: int, width: int, device_type: str) -> int | None:
    """The token positions a pass of ``rows`` rows of ``width`` holds whatever free memory
    says (--micro-batch-tokens, --micro-batch-size, or every row in one pass off CUDA);
    None where free memory cuts the passes (a CUDA GPU, neither flag)."""
    if optim.micro_batch_tokens is not None:
        return optim.micro_batch_tokens
    if optim.micro_batch_size is not None:
        return min(optim.micro_batch_size, rows) * width
    return None if device_type == "cuda" else rows * width
