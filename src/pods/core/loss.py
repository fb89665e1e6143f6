"""The GRPO-PODS policy loss: a clipped ratio surrogate over the kept rollouts.

B sequences (the kept P*m rollouts, or a micro-batch of them) of T completion tokens:

    ratio_t = exp(logp_t - old_logp_t)
    l_t     = -min(ratio_t A, clip(ratio_t, 1 - eps, 1 + eps_high) A) + beta KL_t

then reduced by one of the normalisations in use (``NORMS``). With one update per
generation batch (the paper's setting) old_logp = logp.detach(), the ratio is 1 and the
gradient is REINFORCE's with advantage A.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import Tensor

Norm = Literal["sequence", "token", "constant"]
NORMS: tuple[str, ...] = ("sequence", "token", "constant")


@dataclass(frozen=True)
class LossStats:
    """Detached scalar tensors (call ``as_floats`` to log them); token means over the mask."""

    clip_frac: Tensor  # fraction of tokens whose clipped branch is active
    clip_low: Tensor  # ... with ratio < 1 - eps and A < 0
    clip_high: Tensor  # ... with ratio > 1 + eps_high and A > 0
    ratio_mean: Tensor  # mean ratio pi / pi_old
    kl: Tensor  # mean k3 estimate of KL(pi || pi_ref); 0 without a reference

    def as_floats(self, prefix: str = "loss/") -> dict[str, float]:
        return {prefix + k: float(v) for k, v in asdict(self).items()}


def policy_loss(
    logp: Tensor,
    old_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps: float = 0.2,
    eps_high: float | None = None,
    beta: float = 0.0,
    ref_logp: Tensor | None = None,
    norm: Norm = "sequence",
    normalizer: float | None = None,
) -> tuple[Tensor, LossStats]:
    """Clipped surrogate loss and its stats.

    logp: [B, T] log-probs of the sampled tokens under the current policy (with grad).
    old_logp: [B, T] the same under the policy that generated them; None means
        ``logp.detach()`` (one update per generation batch: ratio 1).
    advantages: [B] one advantage per sequence.
    mask: [B, T] 1 for completion tokens, 0 for padding.
    eps, eps_high: the ratio is clipped to [1 - eps, 1 + eps_high]; eps_high defaults to eps
        (DAPO's clip-higher, Yu et al. 2025, arXiv 2503.14476, raises only eps_high).
    beta: weight of the per-token k3 KL estimate exp(q) - q - 1, q = ref_logp - logp
        (Schulman's estimator, as in DeepSeekMath's GRPO); needs ``ref_logp`` [B, T].
    norm: how token losses become one number:
        "sequence" - mean over each sequence's tokens, then sum / normalizer, normalizer =
                     number of sequences (GRPO and the PODS paper);
        "token"    - sum over all tokens / normalizer, normalizer = number of completion
                     tokens (DAPO);
        "constant" - sum over all tokens / normalizer, normalizer = sequences x the
                     generation budget in tokens (Dr. GRPO, arXiv 2503.20783).
    normalizer: the divisor above (``loss_normalizer``). Defaults to this batch's own value
        (B, mask.sum(), B*T).
        Under gradient accumulation pass the value of the whole batch, so that the
        micro-batch losses add up to the full-batch loss.

    Returns (loss, stats): a scalar tensor and detached ``LossStats``.
    """
    _check_args(logp, old_logp, advantages, mask, eps, eps_high, beta, ref_logp, norm)
    eps_high = eps if eps_high is None else eps_high
    mask = mask.to(logp.dtype)  # [B, T]
    old_logp = logp.detach() if old_logp is None else old_logp
    adv = advantages.to(logp.dtype).unsqueeze(1)  # [B, 1]
    ratio = torch.exp(logp - old_logp)  # [B, T]
    clipped = ratio.clamp(1.0 - eps, 1.0 + eps_high)  # [B, T]
    token_loss = -torch.minimum(ratio * adv, clipped * adv)  # [B, T]
    kl = torch.zeros_like(logp)  # [B, T]
    if beta:
        q = ref_logp - logp  # [B, T]
        kl = torch.exp(q) - q - 1.0
        token_loss = token_loss + beta * kl
    loss = _reduce(token_loss, mask, norm, normalizer)
    stats = _stats(ratio.detach(), adv, mask, kl.detach(), eps, eps_high)
    return loss, stats


def loss_normalizer(norm: str, sequences: float, tokens: float, budget: int) -> float:
    """The divisor of ``norm`` (see ``policy_loss``) for a batch of ``sequences`` sequences
    holding ``tokens`` completion tokens, generated with a budget of ``budget`` tokens each:
    sequence -> sequences; token -> tokens (at least 1); constant -> sequences * budget."""
    if norm == "sequence":
        return sequences
    if norm == "token":
        return max(tokens, 1.0)
    return sequences * budget


def _reduce(token_loss: Tensor, mask: Tensor, norm: str, normalizer: float | None) -> Tensor:
    B, T = mask.shape  # the default constant budget is the padded width T
    if normalizer is None:
        normalizer = loss_normalizer(norm, B, mask.sum().item(), T)
    if norm == "sequence":
        per_seq = (token_loss * mask).sum(1) / mask.sum(1).clamp(min=1)  # [B]
        return per_seq.sum() / normalizer
    return (token_loss * mask).sum() / normalizer


def _stats(ratio: Tensor, adv: Tensor, mask: Tensor, kl: Tensor, eps: float,
           eps_high: float) -> LossStats:
    tokens = mask.sum().clamp(min=1)

    def mean(x: Tensor) -> Tensor:  # token mean over the mask
        return (x.to(mask.dtype) * mask).sum() / tokens

    low = (ratio < 1.0 - eps) & (adv < 0)  # [B, T] clipped from below
    high = (ratio > 1.0 + eps_high) & (adv > 0)  # [B, T] clipped from above
    return LossStats(clip_frac=mean(low | high), clip_low=mean(low), clip_high=mean(high),
                     ratio_mean=mean(ratio), kl=mean(kl))


def _check_args(logp, old_logp, advantages, mask, eps, eps_high, beta, ref_logp, norm):
    if logp.dim() != 2:
        raise ValueError(f"logp must have shape [B, T], got {tuple(logp.shape)}.")
    B, T = logp.shape
    for name, t in (("old_logp", old_logp), ("mask", mask), ("ref_logp", ref_logp)):
        if t is not None and tuple(t.shape) != (B, T):
            raise ValueError(f"{name} must have the shape of logp [B, T] = [{B}, {T}], "
                             f"got {tuple(t.shape)}.")
    if tuple(advantages.shape) != (B,):
        raise ValueError(f"advantages must have shape [B] = [{B}] (one per sequence), "
                         f"got {tuple(advantages.shape)}.")
    if norm not in NORMS:
        raise ValueError(f"unknown loss normalisation {norm!r}; use one of {', '.join(NORMS)}.")
    if eps <= 0 or (eps_high is not None and eps_high <= 0):
        raise ValueError(f"clip ranges must be positive, got eps={eps}, eps_high={eps_high}.")
    if beta < 0:
        raise ValueError(f"beta (KL weight) must be >= 0, got {beta}.")
    if beta and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp, the reference policy's log-probs [B, T]; "
                         "pass them or set beta=0.")
