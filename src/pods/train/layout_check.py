"""The check a run makes once, before its first update, that its packed layout gives the
padded layout's log-probs on its own model, data and compute (as Unsloth checks its
shared-prefix forward at first use): a model whose attention does not go through
transformers' attention interface, or that computes something the packed attention does
not, shows here, and the run falls back to padded with a warning instead of training on
wrong log-probs."""

from __future__ import annotations

import warnings
from dataclasses import replace

import torch

from pods.models.logprobs import completion_logprobs, packed_logprobs
from pods.models.packed_attention import packed_attention
from pods.models.packing import pack
from pods.runtime.distributed import Dist
from pods.train.layout import SHARES
from pods.train.selection import KeptBatch
from pods.train.update import UpdateSpec, _compute, _compute_bytes, _passes_through

ROWS = 16  # rows of the batch the check compares (the first groups' kept rows)
# the largest mean |difference| of a token's log-prob between the layouts that is float
# rounding: float32 sums in another order differ by ~1e-7; bfloat16 activations by ~1e-2
TOLERANCE = {4: 1e-4, 2: 5e-2}


@torch.no_grad()
def layout_difference(model, ref_model, kept: KeptBatch, spec: UpdateSpec) -> float:
    """The mean |log-prob difference| between ``spec.layout`` and padded over the first
    ``ROWS`` kept rows' completion tokens, in the update's compute."""
    if spec.cast is not None:
        spec.cast.refresh()
    trained = model if spec.cast is None else spec.cast.module
    batch = kept.rows
    rows = torch.arange(min(ROWS, batch.completion_ids.shape[0]))
    ids, mask = batch.completion_ids[rows], batch.completion_mask[rows]  # [r, Lc]
    packing = pack(batch.prompt_ids[rows], batch.prompt_mask[rows], ids, mask,
                   SHARES[spec.layout])
    with _compute(spec):
        want = completion_logprobs(trained, batch.prompt_ids[rows], batch.prompt_mask[rows],
                                   ids, mask, spec.temperature)  # [r, Lc]
        with packed_attention(*_passes_through(trained, ref_model, spec)):
            got = packed_logprobs(trained, packing, ids, mask, spec.temperature)  # [r, Lc]
    where = mask.bool()
    return float((got - want).abs()[where].mean()) if where.any() else 0.0


def checked_layout(model, ref_model, kept: KeptBatch, spec: UpdateSpec, dist: Dist,
                   log) -> UpdateSpec:
    """``spec`` where its layout matches padded on this batch (the same answer on every
    rank: the largest difference over them), else ``spec`` with the padded layout and a
    warning that says by how much they differed."""
    if spec.layout == "padded":
        return spec
    trained = dist.unwrap(model) if spec.cast is None else spec.cast.module
    difference = dist.reduce({"d": layout_difference(trained, ref_model, kept, spec)},
                             "max")["d"]
    tolerance = TOLERANCE[_compute_bytes(trained)]
    if difference <= tolerance:
        log(f"update layout: {spec.layout} gives padded's log-probs on the first rows "
            f"(mean |difference| {difference:.1e}, at most {tolerance:.0e})")
        return spec
    warnings.warn(f"update layout {spec.layout} differs from padded on this model by "
                  f"{difference:.2e} nats a token on average (more than float rounding, "
                  f"{tolerance:.0e}): the update falls back to --update-layout padded. "
                  f"Please report the model.", RuntimeWarning, stacklevel=2)
    return replace(spec, layout="padded")
