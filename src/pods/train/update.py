"""The policy update on the kept rollouts: micro-batches, gradient accumulation, iterations.

    policy_update(model, ref_model, optimizer, batch, spec, dist)
        batch  KeptBatch (pods.train.selection): this rank's kept rows, their advantages,
               and the kept count over the ranks
        spec   UpdateSpec: the optimizer and loss groups of the config, and the two rollout
               settings the loss needs
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pods.config.step import LossConfig, OptimConfig
from pods.core.correction import drops_tokens, gap_sums, is_weights
from pods.core.loss import PolicyLoss, loss_normalizer
from pods.models.logprobs import completion_logprobs
from pods.rollout import Rollouts
from pods.runtime.distributed import Dist
from pods.train.selection import KeptBatch


@dataclass(frozen=True)
class UpdateSpec:
    """How to update, besides on what: fixed for a run."""

    optim: OptimConfig  # iterations, micro-batches, gradient clipping
    loss: LossConfig  # clipping, KL, normalisation
    temperature: float  # the sampling temperature: log-probs are taken at it
    max_new_tokens: int  # the constant normaliser's budget


def _micro_batches(batch_size: int, micro: int | None) -> list[slice]:
    micro = micro or batch_size
    return [slice(i, i + micro) for i in range(0, batch_size, micro)]


def _logprobs(model, batch: Rollouts, part: slice, temperature: float) -> Tensor:
    return completion_logprobs(model, batch.prompt_ids[part], batch.prompt_mask[part],
                               batch.completion_ids[part], batch.completion_mask[part],
                               temperature)  # [b, Lc]


@torch.no_grad()
def _frozen_logprobs(model, batch: Rollouts, parts: list[slice], temperature: float) -> Tensor:
    return torch.cat([_logprobs(model, batch, part, temperature) for part in parts])


def _reference_logprobs(model, ref_model, batch: Rollouts, parts: list[slice],
                        temperature: float) -> Tensor:
    """The reference policy's log-probs: a frozen copy, or with LoRA the base model itself
    (adapter disabled), so that no second copy of the weights is held in memory."""
    if ref_model is not None:
        return _frozen_logprobs(ref_model, batch, parts, temperature)
    with model.disable_adapter():
        return _frozen_logprobs(model, batch, parts, temperature)


def policy_update(model, ref_model, optimizer, kept: KeptBatch, spec: UpdateSpec,
                  dist: Dist | None = None) -> dict[str, float]:
    """``optim.num_iterations`` optimizer steps on ``kept`` (B rollouts, advantages [B]),
    each accumulating gradients over micro-batches. Log-probs are taken at the sampling
    temperature; ``max_new_tokens`` is the constant normaliser's budget.
    Returns the mean loss stats and, where the engine returned its sampled log-probs, the
    engine/trainer gap over the kept tokens (``_gap_metrics``: ``rollout/logprob_gap`` and
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
    batch, advantages = kept.rows, kept.advantages
    optim, loss_cfg, temperature = spec.optim, spec.loss, spec.temperature
    loss_fn = PolicyLoss(loss_cfg.clip_eps, loss_cfg.clip_eps_high, loss_cfg.beta, loss_cfg.norm)
    mode, cap = loss_cfg.is_correction, loss_cfg.is_cap
    base = dist.unwrap(model)  # no-grad passes and the LoRA switch skip the engine wrapper
    B = advantages.shape[0]
    parts = _micro_batches(B, optim.micro_batch_size)
    mask = batch.completion_mask.float()  # [B, Lc]
    engine = _engine_logprobs(batch, mode)  # [B, Lc] or None
    frozen = _frozen_logprobs(base, batch, parts, temperature) \
        if optim.num_iterations > 1 or drops_tokens(mode) else None  # [B, Lc] the
    # trainer's log-probs at the sampling weights, before any step
    old = frozen if optim.num_iterations > 1 else None  # None: logp.detach(), ratio 1
    keep = is_weights(frozen, engine, mask, mode, cap).keep if drops_tokens(mode) \
        else mask  # [B, Lc] the tokens in the loss
    normalizer = _normalizer(mask, keep, kept.kept, spec, dist)
    ref = _reference_logprobs(base, ref_model, batch, parts, temperature) \
        if loss_cfg.beta > 0 else None  # [B, Lc]
    totals: dict[str, float] = {}
    gap, is_sums = dict.fromkeys(GAP_KEYS, 0.0), {}  # summed over the first pass's parts
    for iteration in range(optim.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        logged = []  # each part's metrics as tensors: read after the last backward, so no
        # micro-batch waits for the one before it (a host sync per part on a GPU)
        for i, part in enumerate(parts):
            with dist.no_sync(model, last=i == len(parts) - 1):
                logp = _logprobs(model, batch, part, temperature)  # [b, Lc]
                adv = advantages[part]  # [b]
                first = {}  # the first pass's gap and correction sums of this part
                if iteration == 0 and engine is not None:  # still the sampling policy
                    first["gap"] = gap_sums(logp, engine[part], mask[part])
                if mode != "none":
                    w = is_weights(logp if frozen is None else frozen[part], engine[part],
                                   mask[part], mode, cap)
                    adv = adv.unsqueeze(1) * w.weight  # [b, Lc] A_i * w_it
                    if iteration == 0:
                        first["is"] = w.sums(mask[part])
                loss, stats = loss_fn(
                    logp, None if old is None else old[part], adv, keep[part],
                    ref_logp=None if ref is None else ref[part], normalizer=normalizer)
                dist.backward(loss)
            logged.append((loss.detach(), stats, keep[part].sum(), first))
        kept_tokens = max(keep.sum().item(), 1)
        for loss, stats, tokens, first in logged:  # in order: the same sums as part by part
            if "gap" in first:
                _merge_gap(gap, {k: float(v) for k, v in first["gap"].items()})
            if "is" in first:
                _add(is_sums, {k: float(v) for k, v in first["is"].items()}, 1.0)
            _add(totals, {"loss/loss": loss.item()}, 1.0)  # parts add up to the batch loss
            share = tokens.item() / kept_tokens  # token share
            _add(totals, stats.as_floats(), share)
        if optim.max_grad_norm > 0:
            norm = dist.clip_grad_norm(model, optim.max_grad_norm)
            _add(totals, {"loss/grad_norm": norm.item()}, 1.0)
        optimizer.step()
    stats = dist.reduce({k: v / optim.num_iterations for k, v in totals.items()}, "mean")
    if engine is not None:
        stats.update(_gap_metrics(gap, dist))
    if is_sums:
        stats.update(_is_metrics(is_sums, dist))
    return stats


def _normalizer(mask: Tensor, keep: Tensor, kept: int, spec: UpdateSpec, dist: Dist) -> float:
    """This rank's share of the loss's normaliser (``loss_normalizer`` / W) over the tokens
    left in the loss (``keep`` [B, Lc]) on all ranks: a row whose every completion token
    (``mask`` [B, Lc]) a correction dropped leaves the sequence count; ``kept`` counts the
    kept rows over the ranks."""
    counts = dist.reduce({"tokens": keep.sum().item(),
                          "dropped": _dropped_rows(mask, keep)}, "sum")  # over the ranks
    sequences = max(kept - int(counts["dropped"]), 1)  # rows with a token in the loss
    return loss_normalizer(spec.loss.norm, sequences, counts["tokens"],
                           spec.max_new_tokens) / dist.world


def _engine_logprobs(batch: Rollouts, mode: str) -> Tensor | None:
    """The engine's log-probs of the sampled tokens [B, Lc], or None where it gave none; a
    correction without them is refused (``pods.train.checks`` refuses it before anything
    loads for an engine that says it returns none)."""
    if batch.logprobs is None and mode != "none":
        raise ValueError(f"is_correction {mode} needs the engine's log-probs of the sampled "
                         f"tokens, and these rollouts carry none (Rollouts.logprobs); use an "
                         f"engine that returns them (hf, vllm) or --is-correction none.")
    return batch.logprobs


def _dropped_rows(mask: Tensor, keep: Tensor) -> int:
    """Rows with completion tokens of which a correction dropped every one."""
    return int(((mask.sum(1).to(keep.device) > 0) & (keep.sum(1) == 0)).sum())


GAP_KEYS = ("abs", "max", "k3", "outside", "tokens")  # pods.core.correction.gap_sums


def _merge_gap(totals: dict[str, float], part: dict[str, float]) -> None:
    for k, v in part.items():
        totals[k] = max(totals[k], v) if k == "max" else totals[k] + v


def _gap_metrics(gap: dict[str, float], dist: Dist) -> dict[str, float]:
    """The engine/trainer gap over the kept completion tokens of all ranks, with d = trainer
    minus engine log-prob of each sampled token: ``rollout/logprob_gap`` mean |d|,
    ``rollout/logprob_gap_max`` max |d|, ``rollout/logprob_kl_k3`` mean exp(d) - d - 1 (an
    estimate of KL(pi_engine || pi_trainer)), ``rollout/ratio_outside_frac`` the share of
    tokens whose ratio exp(d) is outside [1/2, 2]."""
    sums = dist.reduce({k: v for k, v in gap.items() if k != "max"}, "sum")
    top = dist.reduce({"max": gap["max"]}, "max")["max"]
    tokens = max(sums["tokens"], 1.0)
    return {"rollout/logprob_gap": sums["abs"] / tokens, "rollout/logprob_gap_max": top,
            "rollout/logprob_kl_k3": sums["k3"] / tokens,
            "rollout/ratio_outside_frac": sums["outside"] / tokens}


def _is_metrics(sums: dict[str, float], dist: Dist) -> dict[str, float]:
    """What the correction did, over the kept completion tokens of all ranks:
    ``loss/is_weight_mean`` the mean weight of the tokens left in the loss,
    ``loss/is_masked_frac`` the share of tokens dropped (mask modes) and
    ``loss/is_capped_frac`` the share whose weight was cut to the cap (truncate modes)."""
    s = dist.reduce(sums, "sum")
    tokens = max(s["kept"] + s["dropped"], 1.0)
    return {"loss/is_weight_mean": s["weight"] / max(s["kept"], 1.0),
            "loss/is_masked_frac": s["dropped"] / tokens,
            "loss/is_capped_frac": s["capped"] / tokens}


def _add(totals: dict[str, float], values: dict[str, float], weight: float) -> None:
    for k, v in values.items():
        totals[k] = totals.get(k, 0.0) + weight * v
