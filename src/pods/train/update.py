"""The policy update on the kept rollouts: micro-batches, gradient accumulation, iterations.

    policy_update(model, ref_model, optimizer, batch, spec, dist)
        batch  KeptBatch (pods.train.selection): this rank's kept rows, their advantages,
               and the kept count over the ranks
        spec   UpdateSpec: the optimizer and loss groups of the config, and the two rollout
               settings the loss needs
"""

from __future__ import annotations

import math
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
from torch import Tensor

from pods.config.step import LossConfig, OptimConfig
from pods.core.correction import drops_tokens, gap_sums, is_weights
from pods.core.loss import PolicyLoss, loss_normalizer
from pods.models.logprobs import completion_logprobs, packed_logprobs
from pods.models.packed_attention import packed_attention
from pods.models.weight_cast import WeightCast
from pods.rollout import Rollouts
from pods.runtime.distributed import Dist
from pods.train.layout import Part, positions
from pods.train.passes import parts as _parts
from pods.train.selection import KeptBatch
from pods.train.update_metrics import (
    GAP_KEYS,
    dropped_rows,
    engine_logprobs,
    gap_metrics,
    is_metrics,
    merge_gap,
    read_logged,
)


@dataclass(frozen=True)
class UpdateSpec:
    """How to update, besides on what: fixed for a run."""

    optim: OptimConfig  # iterations, micro-batches, gradient clipping
    loss: LossConfig  # clipping, KL, normalisation
    temperature: float  # the sampling temperature: log-probs are taken at it
    max_new_tokens: int  # the constant normaliser's budget
    cast: WeightCast | None = None  # --weight-cast step: the bf16 copy the passes run on
    # (autocast off inside the update); None: the model itself, under the caller's autocast
    layout: str = "padded"  # padded, packed or shared_prompt (pods.train.layout.choose)
    auto_checkpointing: bool = False  # --gradient-checkpointing auto: chosen when the
    # trainer is built (pods.train.passes.choose_checkpointing)
    budget: dict = field(default_factory=dict, compare=False)  # "tokens": the positions a
    # pass holds by free device memory, measured at the run's first update (``_parts``);
    # "checkpointing": auto's choice


def _logprobs(model, batch: Rollouts, part: Part, temperature: float) -> Tensor:
    """[b, Lc] log-probs of the part's rows, in its layout."""
    if part.packing is None:
        return completion_logprobs(model, batch.prompt_ids[part.rows],
                                   batch.prompt_mask[part.rows], batch.completion_ids[part.rows],
                                   batch.completion_mask[part.rows], temperature)
    return packed_logprobs(model, part.packing, batch.completion_ids[part.rows],
                           part.take(batch.completion_mask), temperature)


@torch.no_grad()
def _frozen_logprobs(model, batch: Rollouts, parts: list[Part], temperature: float) -> Tensor:
    out = torch.zeros(batch.completion_ids.shape, dtype=torch.float32,
                      device=batch.completion_ids.device)  # [B, Lc]
    for part in parts:
        logp = _logprobs(model, batch, part, temperature)  # every part runs (FSDP's passes)
        if part.live:
            out[part.rows] = logp
    return out


def _reference_logprobs(model, ref_model, batch: Rollouts, parts: list[Part],
                        temperature: float) -> Tensor:
    """The reference policy's log-probs: a frozen copy, or with LoRA the base model itself
    (adapter disabled), so that no second copy of the weights is held in memory."""
    if ref_model is not None:
        return _frozen_logprobs(ref_model, batch, parts, temperature)
    with model.disable_adapter():
        return _frozen_logprobs(model, batch, parts, temperature)


def _step(optimizer, norm: float, iteration: int) -> bool:
    """The optimizer's step, skipped where the gradients' global norm ``norm`` is not
    finite (the same decision on every rank: the norm is over all of them): one NaN or
    inf gradient would make every weight it reaches NaN. Whether it stepped."""
    if math.isfinite(norm):
        optimizer.step()
        return True
    warnings.warn(f"optimizer step skipped (iteration {iteration}): the gradient norm is "
                  f"{norm}; a non-finite gradient would make the weights NaN "
                  f"(optim/nonfinite_grad counts the skipped steps).", RuntimeWarning,
                  stacklevel=3)
    optimizer.zero_grad(set_to_none=True)
    return False


def policy_update(model, ref_model, optimizer, kept: KeptBatch, spec: UpdateSpec,
                  dist: Dist | None = None) -> dict[str, float]:
    """``optim.num_iterations`` optimizer steps on ``kept`` (B rollouts, advantages [B]),
    each accumulating gradients over micro-batches. Log-probs are taken at the sampling
    temperature; ``max_new_tokens`` is the constant normaliser's budget.
    Returns the mean loss stats and, where the engine returned its sampled log-probs, the
    engine/trainer gap over the kept tokens (``gap_metrics``: ``rollout/logprob_gap`` and
    its tail; taken from the first pass, before any optimizer step).

    With ``loss.is_correction`` the policy-gradient term of each token is weighted by
    ``pods.core.correction.is_weights`` against the engine's log-probs (``loss/is_*``
    metrics); the mask modes drop tokens from the loss and its normaliser, which must be
    known before the first backward, so they take the trainer's log-probs in a no-grad
    pass first (as ``num_iterations`` > 1 does anyway).

    With ``dist`` (data parallel, W ranks), ``kept.rows`` is this rank's share of the kept
    rollouts and the engine averages the W gradients; each rank's loss is normalised by
    the whole batch's normaliser / W, so the average is exactly the one-process loss.
    ``kept.kept`` is the whole batch's number of kept rollouts over the ranks; rows beyond
    it are padding with a zero completion mask (``pods.train.selection.rank_batch``)."""
    dist = dist or Dist(world=1)
    cast = spec.cast
    if cast is not None:
        cast.refresh()  # the bf16 copy of the weights this step starts from
    with _compute(spec), packed_attention(*_passes_through(model, ref_model, spec)) \
            if spec.layout != "padded" else nullcontext():
        return _update(model, ref_model, optimizer, kept, spec, dist)


def _compute(spec: UpdateSpec):
    """The update's compute: autocast off where it runs on the bf16 working copy."""
    cast = spec.cast
    return nullcontext() if cast is None else torch.autocast(
        next(cast.module.parameters()).device.type, enabled=False)


def _passes_through(model, ref_model, spec: UpdateSpec) -> tuple:
    """The modules the update's passes run through: the trained one (the bf16 copy, or the
    model: LoRA's reference is its base, the same module) and the frozen reference."""
    return (model if spec.cast is None else spec.cast.module), ref_model


def _update(model, ref_model, optimizer, kept: KeptBatch, spec: UpdateSpec,
            dist: Dist) -> dict[str, float]:
    """``policy_update``'s passes and steps, in the compute it set up."""
    batch, advantages = kept.rows, kept.advantages
    optim, loss_cfg, temperature = spec.optim, spec.loss, spec.temperature
    loss_fn = PolicyLoss(loss_cfg.clip_eps, loss_cfg.clip_eps_high, loss_cfg.beta, loss_cfg.norm)
    mode, cap, cast = loss_cfg.is_correction, loss_cfg.is_cap, spec.cast
    base = dist.unwrap(model)  # no-grad passes and the LoRA switch skip the engine wrapper
    trained = base if cast is None else cast.module  # the module the passes run through
    forward = model if cast is None else cast.module  # with DDP's wrapper where it has one
    parts, chosen = _parts(trained, batch, spec, dist, optimizer)
    mask = batch.completion_mask.float()  # [B, Lc]
    engine = engine_logprobs(batch, mode)  # [B, Lc] or None
    frozen = _frozen_logprobs(trained, batch, parts, temperature) \
        if optim.num_iterations > 1 or drops_tokens(mode) else None  # [B, Lc] the
    # trainer's log-probs at the sampling weights, before any step
    old = frozen if optim.num_iterations > 1 else None  # None: logp.detach(), ratio 1
    keep = is_weights(frozen, engine, mask, mode, cap).keep if drops_tokens(mode) \
        else mask  # [B, Lc] the tokens in the loss
    normalizer = _normalizer(mask, keep, kept.kept, spec, dist)
    ref = _reference_logprobs(base, ref_model, batch, parts, temperature) \
        if loss_cfg.beta > 0 else None  # [B, Lc]
    passes = optim.num_iterations + (frozen is not None) + (ref is not None)
    done, padded = positions(parts, batch)  # one pass's positions, and padded's
    totals: dict[str, float] = {}
    gap, is_sums = dict.fromkeys(GAP_KEYS, 0.0), {}  # summed over the first pass's parts
    skipped = 0  # optimizer steps skipped for a non-finite gradient norm
    for iteration in range(optim.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        if cast is not None and iteration > 0:
            cast.refresh()  # the weights the last iteration's step made
        logged = []  # each part's metrics as tensors: read after the last backward, so no
        # micro-batch waits for the one before it (a host sync per part on a GPU)
        for i, part in enumerate(parts):
            with dist.no_sync(model, last=i == len(parts) - 1):
                logp = _logprobs(forward, batch, part, temperature)  # [b, Lc]
                adv, kept_part, mask_part = (part.take(t) for t in (advantages, keep, mask))
                take = part.take  # [b] advantages, [b, Lc] the rest
                first = {}  # the first pass's gap and correction sums of this part
                if iteration == 0 and engine is not None:  # still the sampling policy
                    first["gap"] = gap_sums(logp, take(engine), mask_part)
                if mode != "none":
                    w = is_weights(logp if frozen is None else take(frozen), take(engine),
                                   mask_part, mode, cap)
                    adv = adv.unsqueeze(1) * w.weight  # [b, Lc] A_i * w_it
                    if iteration == 0:
                        first["is"] = w.sums(mask_part)
                loss, stats = loss_fn(
                    logp, None if old is None else take(old), adv, kept_part,
                    ref_logp=None if ref is None else take(ref), normalizer=normalizer)
                if cast is not None and dist.world > 1 and i == len(parts) - 1:
                    cast.arm_reduce(dist.world)  # its gradients averaged as they come
                dist.backward(loss)
            logged.append((loss.detach(), stats, kept_part.sum(), first))
        kept_tokens, logged = read_logged(keep.sum(), logged)  # one host read
        kept_tokens = max(kept_tokens, 1)
        for loss, stats, tokens, first in logged:  # in order: the same sums as part by part
            if "gap" in first:
                merge_gap(gap, first["gap"])
            if "is" in first:
                _add(is_sums, first["is"], 1.0)
            _add(totals, {"loss/loss": loss}, 1.0)  # parts add up to the batch loss
            _add(totals, {f"loss/{k}": v for k, v in stats.items()},
                 tokens / kept_tokens)  # token share
        if cast is not None and dist.world > 1:
            cast.all_reduce(dist.world)  # DDP averages the gradients of its own passes only
        # the global norm (clipping's, or unclipped: max inf) decides whether to step
        norm = dist.clip_grad_norm(model, optim.max_grad_norm or math.inf).item()
        if optim.max_grad_norm > 0:
            _add(totals, {"loss/grad_norm": norm}, 1.0)
        skipped += not _step(optimizer, norm, iteration)
    stats = dist.reduce({k: v / optim.num_iterations for k, v in totals.items()}, "mean")
    stats.update(chosen)
    stats.update(dist.reduce({"update/positions": float(passes * done),
                              "update/padded_positions": float(passes * padded)}, "sum"))
    stats["update/micro_batches"] = float(len(parts))  # a rank's passes an iteration
    if skipped:  # only on the steps that skipped, so the usual records keep their fields
        stats["optim/nonfinite_grad"] = float(skipped)
    if engine is not None:
        stats.update(gap_metrics(gap, dist))
    if is_sums:
        stats.update(is_metrics(is_sums, dist))
    return stats


def _normalizer(mask: Tensor, keep: Tensor, kept: int, spec: UpdateSpec, dist: Dist) -> float:
    """This rank's share of the loss's normaliser (``loss_normalizer`` / W) over the tokens
    left in the loss (``keep`` [B, Lc]) on all ranks: a row whose every completion token
    (``mask`` [B, Lc]) a correction dropped leaves the sequence count; ``kept`` counts the
    kept rows over the ranks."""
    counts = dist.reduce({"tokens": keep.sum().item(),
                          "dropped": dropped_rows(mask, keep)}, "sum")  # over the ranks
    sequences = max(kept - int(counts["dropped"]), 1)  # rows with a token in the loss
    return loss_normalizer(spec.loss.norm, sequences, counts["tokens"],
                           spec.max_new_tokens) / dist.world


def _add(totals: dict[str, float], values: dict[str, float], weight: float) -> None:
    for k, v in values.items():
        totals[k] = totals.get(k, 0.0) + weight * v
