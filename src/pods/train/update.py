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

from pods.config.groups import LossConfig, OptimConfig
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
    Returns the mean loss stats, and ``rollout/logprob_gap`` where the engine returned its
    sampled log-probs: the mean absolute difference per kept token between them and the
    trainer's recomputation (the engine/trainer mismatch; taken from the first pass, before
    any optimizer step).

    With ``dist`` (data parallel, W ranks), ``kept.rows`` is this rank's share of the kept
    rollouts and the engine averages the W gradients; each rank's loss is normalised by
    the whole batch's normaliser / W, so the average is exactly the one-process loss.
    ``kept.kept`` is the whole batch's number of kept rollouts over the ranks; rows beyond
    it are padding with a zero completion mask (``pods.train.selection.rank_batch``)."""
    dist = dist or Dist(world=1)
    batch, advantages = kept.rows, kept.advantages
    optim, loss_cfg, temperature = spec.optim, spec.loss, spec.temperature
    loss_fn = PolicyLoss(loss_cfg.clip_eps, loss_cfg.clip_eps_high, loss_cfg.beta, loss_cfg.norm)
    base = dist.unwrap(model)  # no-grad passes and the LoRA switch skip the engine wrapper
    B = advantages.shape[0]
    parts = _micro_batches(B, optim.micro_batch_size)
    mask = batch.completion_mask.float()  # [B, Lc]
    tokens = dist.reduce({"tokens": mask.sum().item()}, "sum")["tokens"]  # over the ranks
    normalizer = loss_normalizer(loss_cfg.norm, kept.kept, tokens,
                                 spec.max_new_tokens) / dist.world
    old = _frozen_logprobs(base, batch, parts, temperature) \
        if optim.num_iterations > 1 else None  # [B, Lc] the sampling policy, kept fixed
    ref = _reference_logprobs(base, ref_model, batch, parts, temperature) \
        if loss_cfg.beta > 0 else None  # [B, Lc]
    totals: dict[str, float] = {}
    gap = 0.0  # summed |engine log-prob - recomputed log-prob| over the kept tokens
    for iteration in range(optim.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        for i, part in enumerate(parts):
            with dist.no_sync(model, last=i == len(parts) - 1):
                logp = _logprobs(model, batch, part, temperature)  # [b, Lc]
                if iteration == 0 and batch.logprobs is not None:  # still the sampling policy
                    gap += ((logp.detach() - batch.logprobs[part].to(logp.device)).abs()
                            * mask[part]).sum().item()
                loss, stats = loss_fn(
                    logp, None if old is None else old[part], advantages[part], mask[part],
                    ref_logp=None if ref is None else ref[part], normalizer=normalizer)
                dist.backward(loss)
            _add(totals, {"loss/loss": loss.item()}, 1.0)  # parts add up to the batch loss
            share = mask[part].sum().item() / max(mask.sum().item(), 1)  # token share
            _add(totals, stats.as_floats(), share)
        if optim.max_grad_norm > 0:
            norm = dist.clip_grad_norm(model, optim.max_grad_norm)
            _add(totals, {"loss/grad_norm": norm.item()}, 1.0)
        optimizer.step()
    stats = dist.reduce({k: v / optim.num_iterations for k, v in totals.items()}, "mean")
    if batch.logprobs is not None:
        gap = dist.reduce({"gap": gap}, "sum")["gap"]  # over the kept tokens of all ranks
        stats["rollout/logprob_gap"] = gap / max(tokens, 1.0)
    return stats


def _add(totals: dict[str, float], values: dict[str, float], weight: float) -> None:
    for k, v in values.items():
        totals[k] = totals.get(k, 0.0) + weight * v
