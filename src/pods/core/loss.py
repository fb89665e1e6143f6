"""The GRPO-PODS policy loss: a clipped ratio surrogate over the kept rollouts.

B sequences (the kept P*m rollouts, or a micro-batch of them) of T completion tokens:

    ratio_t = exp(logp_t - old_logp_t)
    l_t     = -min(ratio_t A, clip(ratio_t, 1 - eps, 1 + eps_high) A) + beta KL_t

then reduced by one of the normalisations in use (``NORMS``). With one update per
generation batch (the paper's setting) old_logp = logp.detach(), the ratio is 1 and the
gradient is REINFORCE's with advantage A.

``PolicyLoss`` holds the settings (eps, eps_high, beta, the normalisation) and is called on
the tensors, as torchtune's losses are; ``policy_loss`` is the one with the defaults.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

Norm = Literal["sequence", "token", "constant"]
NORMS: tuple[str, ...] = get_args(Norm)


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


@dataclass(frozen=True)
class PolicyLoss:
    """The clipped surrogate loss with its settings (checked when made); call it on a
    batch's tensors for ``(loss, LossStats)``:

        loss_fn = PolicyLoss(eps=0.2, eps_high=0.28, beta=0.04, norm="token")
        loss, stats = loss_fn(logp, old_logp, advantages, mask, ref_logp=ref_logp)

    ``policy_loss`` is the one with the defaults (GRPO's and the paper's)."""

    eps: float = 0.2  # the ratio is clipped to [1 - eps, 1 + eps_high]
    eps_high: float | None = None  # None: eps (DAPO's clip-higher, Yu et al. 2025, arXiv
    # 2503.14476, raises only eps_high)
    beta: float = 0.0  # weight of the per-token k3 KL estimate exp(q) - q - 1,
    # q = ref_logp - logp (Schulman's estimator, as in DeepSeekMath's GRPO); > 0 needs
    # ref_logp
    norm: Norm = "sequence"  # how token losses become one number:
    #   "sequence" - mean over each sequence's tokens, then sum / normalizer, normalizer =
    #                number of sequences (GRPO and the PODS paper);
    #   "token"    - sum over all tokens / normalizer, normalizer = number of completion
    #                tokens (DAPO);
    #   "constant" - sum over all tokens / normalizer, normalizer = sequences x the
    #                generation budget in tokens (Dr. GRPO, arXiv 2503.20783).

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise ValueError(f"unknown loss normalisation {self.norm!r}; use one of "
                             f"{', '.join(NORMS)}.")
        if self.eps <= 0 or (self.eps_high is not None and self.eps_high <= 0):
            raise ValueError(f"clip ranges must be positive, got eps={self.eps}, "
                             f"eps_high={self.eps_high}.")
        if self.beta < 0:
            raise ValueError(f"beta (KL weight) must be >= 0, got {self.beta}.")

    def __call__(self, logp: Tensor, old_logp: Tensor | None, advantages: Tensor,
                 mask: Tensor, ref_logp: Tensor | None = None,
                 normalizer: float | None = None) -> tuple[Tensor, LossStats]:
        """Clipped surrogate loss and its stats.

        logp: [B, T] log-probs of the sampled tokens under the current policy (with grad).
        old_logp: [B, T] the same under the policy that generated them; None means
            ``logp.detach()`` (one update per generation batch: ratio 1).
        advantages: [B] one advantage per sequence, or [B, T] one per token: an
            importance-sampling correction (pods.core.correction) passes A_i * w_it with
            w_it >= 0, which scales token t's clipped term by w_it.
        mask: [B, T] 1 for the tokens in the loss, 0 for padding (and for tokens an
            importance-sampling correction drops).
        ref_logp: [B, T] the reference policy's log-probs, for the KL term (beta > 0).
        normalizer: the divisor of ``norm`` (``loss_normalizer``). Defaults to this batch's
            own value (B, mask.sum(), B*T). Under gradient accumulation pass the value of
            the whole batch, so that the micro-batch losses add up to the full-batch loss.

        Returns (loss, stats): a scalar tensor and detached ``LossStats``.
        """
        _check_shapes(logp, old_logp, advantages, mask, ref_logp)
        if self.beta and ref_logp is None:
            raise ValueError("beta > 0 needs ref_logp, the reference policy's log-probs "
                             "[B, T]; pass them or set beta=0.")
        eps = self.eps
        eps_high = eps if self.eps_high is None else self.eps_high
        mask = mask.to(logp.dtype)  # [B, T]
        old_logp = logp.detach() if old_logp is None else old_logp
        adv = advantages.to(logp.dtype)
        adv = adv.unsqueeze(1) if adv.dim() == 1 else adv  # [B, 1] or [B, T]
        ratio = torch.exp(logp - old_logp)  # [B, T]
        clipped = ratio.clamp(1.0 - eps, 1.0 + eps_high)  # [B, T]
        token_loss = -torch.minimum(ratio * adv, clipped * adv)  # [B, T]
        kl = torch.zeros_like(logp)  # [B, T]
        if self.beta:
            q = ref_logp - logp  # [B, T]
            kl = torch.exp(q) - q - 1.0
            token_loss = token_loss + self.beta * kl
        loss = _reduce(token_loss, mask, self.norm, normalizer)
        stats = _stats(ratio.detach(), adv, mask, kl.detach(), eps, eps_high)
        return loss, stats


policy_loss = PolicyLoss()  # the loss with its defaults: policy_loss(logp, None, adv, mask)


def loss_normalizer(norm: str, sequences: float, tokens: float, budget: int) -> float:
    """The divisor of ``norm`` (see ``PolicyLoss``) for a batch of ``sequences`` sequences
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


def _check_shapes(logp: Tensor, old_logp: Tensor | None, advantages: Tensor, mask: Tensor,
                  ref_logp: Tensor | None) -> None:
    if logp.dim() != 2:
        raise ValueError(f"logp must have shape [B, T], got {tuple(logp.shape)}.")
    B, T = logp.shape
    for name, t in (("old_logp", old_logp), ("mask", mask), ("ref_logp", ref_logp)):
        if t is not None and tuple(t.shape) != (B, T):
            raise ValueError(f"{name} must have the shape of logp [B, T] = [{B}, {T}], "
                             f"got {tuple(t.shape)}.")
    if tuple(advantages.shape) not in ((B,), (B, T)):
        raise ValueError(f"advantages must have shape [B] = [{B}] (one per sequence) or "
                         f"[B, T] = [{B}, {T}] (one per token), got {tuple(advantages.shape)}.")
