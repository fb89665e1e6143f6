"""What the update reads of the engine's log-probs and reports of the engine/trainer gap and
of the importance-sampling correction, summed over micro-batches and ranks
(``pods.train.update``), and the reading of its per-part metrics in one transfer."""

from __future__ import annotations

from dataclasses import asdict

import torch
from torch import Tensor

from pods.rollout import Rollouts
from pods.runtime.distributed import Dist

GAP_KEYS = ("abs", "max", "k3", "outside", "tokens")  # pods.core.correction.gap_sums


def merge_gap(totals: dict[str, float], part: dict[str, float]) -> None:
    for k, v in part.items():
        totals[k] = max(totals[k], v) if k == "max" else totals[k] + v


def gap_metrics(gap: dict[str, float], dist: Dist) -> dict[str, float]:
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


def is_metrics(sums: dict[str, float], dist: Dist) -> dict[str, float]:
    """What the correction did, over the kept completion tokens of all ranks:
    ``loss/is_weight_mean`` the mean weight of the tokens left in the loss,
    ``loss/is_masked_frac`` the share of tokens dropped (mask modes) and
    ``loss/is_capped_frac`` the share whose weight was cut to the cap (truncate modes)."""
    s = dist.reduce(sums, "sum")
    tokens = max(s["kept"] + s["dropped"], 1.0)
    return {"loss/is_weight_mean": s["weight"] / max(s["kept"], 1.0),
            "loss/is_masked_frac": s["dropped"] / tokens,
            "loss/is_capped_frac": s["capped"] / tokens}


def engine_logprobs(batch: Rollouts, mode: str) -> Tensor | None:
    """The engine's log-probs of the sampled tokens [B, Lc], or None where it gave none; a
    correction without them is refused (``pods.train.checks`` refuses it before anything
    loads for an engine that says it returns none)."""
    if batch.logprobs is None and mode != "none":
        raise ValueError(f"is_correction {mode} needs the engine's log-probs of the sampled "
                         f"tokens, and these rollouts carry none (Rollouts.logprobs); use an "
                         f"engine that returns them (hf, vllm) or --is-correction none.")
    return batch.logprobs


def dropped_rows(mask: Tensor, keep: Tensor) -> int:
    """Rows with completion tokens of which a correction dropped every one."""
    return int(((mask.sum(1).to(keep.device) > 0) & (keep.sum(1) == 0)).sum())


def read_logged(kept: Tensor, logged: list) -> tuple[float, list]:
    """``kept`` and each part's (loss, LossStats, kept tokens, first-pass sums) as floats,
    read from the device in one transfer: one host synchronisation an iteration, not one
    a value and part."""
    flat = [kept] + [t for loss, stats, tokens, first in logged
                     for t in (loss, *asdict(stats).values(), tokens,
                               *(v for sums in first.values() for v in sums.values()))]
    values = iter(torch.stack([t.detach().double().reshape(()) for t in flat]).tolist())
    kept_value, out = next(values), []
    for _, stats, _, first in logged:  # in the order of ``flat``
        loss = next(values)
        fields = {k: next(values) for k in asdict(stats)}
        tokens = next(values)
        out.append((loss, fields, tokens,
                    {name: {k: next(values) for k in sums} for name, sums in first.items()}))
    return kept_value, out
