"""The policy update on the kept rollouts: micro-batches, gradient accumulation, iterations."""

from __future__ import annotations

import resource
import sys

import torch
from torch import Tensor

from pods.loss import policy_loss
from pods.policy import completion_logprobs
from pods.rollout import Rollouts


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


def policy_update(model, ref_model, optimizer, batch: Rollouts, advantages: Tensor,
                  cfg) -> dict[str, float]:
    """``cfg.num_iterations`` optimizer steps on ``batch`` (B kept rollouts, advantages [B]),
    each accumulating gradients over micro-batches. Returns the mean loss stats."""
    B = advantages.shape[0]
    parts = _micro_batches(B, cfg.micro_batch_size)
    mask = batch.completion_mask.float()  # [B, Lc]
    normalizer = {"sequence": B, "token": mask.sum().clamp(min=1).item(),
                  "constant": B * cfg.max_new_tokens}[cfg.loss_norm]
    old = _frozen_logprobs(model, batch, parts, cfg.temperature) \
        if cfg.num_iterations > 1 else None  # [B, Lc] the sampling policy, kept fixed
    ref = _reference_logprobs(model, ref_model, batch, parts, cfg.temperature) \
        if cfg.beta > 0 else None  # [B, Lc]
    totals: dict[str, float] = {}
    for _ in range(cfg.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        for part in parts:
            logp = _logprobs(model, batch, part, cfg.temperature)  # [b, Lc]
            loss, stats = policy_loss(
                logp, None if old is None else old[part], advantages[part], mask[part],
                eps=cfg.clip_eps, eps_high=cfg.clip_eps_high, beta=cfg.beta,
                ref_logp=None if ref is None else ref[part], norm=cfg.loss_norm,
                normalizer=normalizer)
            loss.backward()
            _add(totals, {"loss/loss": loss.item()}, 1.0)  # parts add up to the batch loss
            share = mask[part].sum().item() / max(mask.sum().item(), 1)  # token share
            _add(totals, stats.as_floats(), share)
        if cfg.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            _add(totals, {"loss/grad_norm": norm.item()}, 1.0)
        optimizer.step()
    return {k: v / cfg.num_iterations for k, v in totals.items()}


def _add(totals: dict[str, float], values: dict[str, float], weight: float) -> None:
    for k, v in values.items():
        totals[k] = totals.get(k, 0.0) + weight * v


def peak_memory_mb(device: torch.device) -> dict[str, float]:
    """Peak resident memory of this process (and peak GPU memory on CUDA), in MB."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux, bytes on macOS
    out = {"mem/peak_rss_mb": rss / (2**20 if sys.platform == "darwin" else 2**10)}
    if device.type == "cuda":
        out["mem/peak_gpu_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out
