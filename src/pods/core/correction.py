"""The engine/trainer gap: how far the engine's sampling log-probs are from the trainer's,
and the importance-sampling correction of the policy gradient for it.

The engine that samples (vLLM's kernels, transformers ``generate`` from a bf16 copy) and
the trainer that scores are different programs, so a rollout is drawn from pi_engine while
the loss treats it as drawn from pi_old, the trainer's policy at the same weights. Per
sampled token t of a completion (shapes [B, T]: B kept sequences, T completion tokens):

    d_t     = logp_old_t - logp_engine_t      (trainer minus engine)
    ratio_t = exp(d_t) = pi_old(token) / pi_engine(token)

``gap_sums``: the tail of d (max |d|, a k3 KL estimate, the share of ratios outside
[1/2, 2]) as sums, so that micro-batches and ranks add up exactly.

``is_weights``: a weight per token [B, T] that multiplies its policy-gradient term, and
which tokens stay in the loss (and in its normaliser). The modes (``CORRECTIONS``):

    none               weight 1, every token kept (the loss is unchanged)
    token_truncate     w_t = min(ratio_t, cap)                       (TIS)
    token_mask         w_t = ratio_t, tokens with ratio_t outside [1/cap, cap] dropped
    sequence_truncate  w_t = min(ratio_seq, cap) for every token of the sequence
    sequence_mask      w_t = ratio_seq, sequences with ratio_seq outside [1/cap, cap]
                       dropped

with ratio_seq = prod_t ratio_t = exp(sum_t d_t) over the sequence's completion tokens: the
product, the importance weight of the whole sequence, as TRL (``vllm_importance_sampling_
mode``) and verl's sequence-level rollout correction define it (not the geometric mean).
Truncated IS (TIS) and masked IS (MIS) are Yao et al. 2025, "Your efficient RL framework
secretly brings you off-policy RL training"; NeMo-RL's ICE-POP masks both sides as here.
TRL's mask modes drop only ratios above the cap and keep the dropped tokens in the
normaliser; here a dropped token leaves the loss (its policy-gradient and KL terms) and the
normaliser, as a rejected sample does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

Correction = Literal["none", "token_truncate", "token_mask", "sequence_truncate",
                     "sequence_mask"]
CORRECTIONS: tuple[str, ...] = get_args(Correction)
TAIL_BAND = 2.0  # rollout/ratio_outside_frac counts ratios outside [1/2, 2]


def drops_tokens(mode: str) -> bool:
    """Whether ``mode`` removes tokens from the loss (so its normaliser depends on them)."""
    return mode.endswith("_mask")


@dataclass(frozen=True)
class ISWeights:
    """What ``is_weights`` returns; all [B, T], detached, 0 on padding."""

    weight: Tensor  # multiplies each token's policy-gradient term (0 where dropped)
    keep: Tensor  # the completion mask less the dropped tokens: the loss's mask
    capped: Tensor  # 1 where a truncate mode cut the weight down to the cap

    def sums(self, mask: Tensor) -> dict[str, Tensor]:
        """Sums for the ``loss/is_*`` metrics (``mask``: the completion mask [B, T]):
        weight over kept tokens, kept, dropped and capped tokens; 0-dim tensors, read by
        the caller when it can wait for them."""
        return {"weight": (self.weight * self.keep).sum(),
                "kept": self.keep.sum(), "dropped": (mask - self.keep).sum(),
                "capped": self.capped.sum()}


def is_weights(logp_old: Tensor, logp_engine: Tensor, mask: Tensor, mode: str,
               cap: float) -> ISWeights:
    """The importance-sampling correction of ``mode`` (see the module docstring).

    logp_old:    [B, T] the trainer's log-probs of the sampled tokens at the weights that
                 sampled them (no gradient flows: the weight is a constant)
    logp_engine: [B, T] the engine's log-probs of the same tokens
    mask:        [B, T] 1 for completion tokens, 0 for padding
    cap:         > 1: the truncation level, and the mask band [1/cap, cap]
    """
    if mode not in CORRECTIONS:
        raise ValueError(f"unknown importance-sampling correction {mode!r}; use one of "
                         f"{', '.join(CORRECTIONS)}.")
    mask = mask.to(logp_old.device, logp_old.dtype)  # [B, T]
    zeros = torch.zeros_like(mask)
    if mode == "none":
        return ISWeights(weight=mask.clone(), keep=mask, capped=zeros)
    if cap <= 1:
        raise ValueError(f"the importance-sampling cap must be > 1, got {cap}; 2 is TRL's "
                         f"default.")
    d = (logp_old.detach() - logp_engine.to(logp_old.device)) * mask  # [B, T], 0 on padding
    if mode.startswith("sequence"):
        d = d.sum(1, keepdim=True).expand_as(mask)  # [B, T] log ratio_seq on every token
    ratio = torch.exp(d)  # [B, T] may be inf or 0 for a long sequence: both handled below
    if mode.endswith("truncate"):
        capped = (ratio > cap).to(mask.dtype) * mask  # [B, T]
        return ISWeights(weight=ratio.clamp(max=cap) * mask, keep=mask, capped=capped)
    inside = (ratio >= 1.0 / cap) & (ratio <= cap)  # [B, T]
    keep = inside.to(mask.dtype) * mask  # [B, T]
    weight = torch.where(inside, ratio, zeros) * mask  # never inf * 0
    return ISWeights(weight=weight, keep=keep, capped=zeros)


def gap_sums(logp: Tensor, logp_engine: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """The engine/trainer gap of one micro-batch, as sums over its completion tokens
    (``mask`` [B, T]), to be added over micro-batches and ranks (``max`` by maximum); 0-dim
    tensors, so that a caller on a GPU reads them once, not after every micro-batch:

        abs      sum |d_t|, d_t = logp_t - logp_engine_t (trainer minus engine)
        max      max |d_t| (0 without tokens)
        k3       sum exp(d_t) - d_t - 1
        outside  count of tokens with exp(d_t) outside [1/2, 2]
        tokens   count of tokens

    The k3 term: with r = exp(d) = pi_trainer / pi_engine on tokens sampled from
    pi_engine, E[r - 1 - log r] = KL(pi_engine || pi_trainer); it is >= 0 token by token
    (Schulman's k3 estimator, the one the loss's KL term uses)."""
    mask = mask.to(logp.device, logp.dtype)  # [B, T]
    d = (logp.detach() - logp_engine.to(logp.device)) * mask  # [B, T], 0 on padding
    ratio = torch.exp(d)  # [B, T]
    outside = ((ratio < 1.0 / TAIL_BAND) | (ratio > TAIL_BAND)).to(mask.dtype) * mask
    # exp(d) - 1 - d ~ d^2 / 2: in float32 "ratio - d - 1" would be rounding noise (~1e-7,
    # even negative) for the float32 gap of ~1e-6; expm1 in float64 keeps it exact
    d64 = d.double()
    k3 = (torch.expm1(d64) - d64) * mask  # [B, T] float64
    top = d.abs().max() if d.numel() else d.new_zeros(())
    return {"abs": d.abs().sum(), "max": top, "k3": k3.sum(), "outside": outside.sum(),
            "tokens": mask.sum()}
