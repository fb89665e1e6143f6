"""Per-token log-probs of completions under the policy: what the loss, the ratio and the
engine/trainer log-prob gap are computed from."""

from __future__ import annotations

import torch
from torch import Tensor


def completion_logprobs(model, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                        completion_mask: Tensor, temperature: float) -> Tensor:
    """log pi(token) of each completion token under the sampling distribution
    softmax(logits / temperature). Prompts left-padded [B, Lp], completions right-padded
    [B, Lc]; returns [B, Lc] (values at padding are meaningless: mask them).

    Memory: logits are computed only for the completion positions (``logits_to_keep``), and
    the float32 log-softmax is taken a few sequences at a time (at most ``LOGSOFTMAX_CHUNK``
    floats), so the [B, Lc, V] float32 tensor of a large vocabulary never exists at once.

    Precision: the result is float32 whatever the weights' dtype. bf16 logits are upcast
    before the log-softmax: a bf16 log-softmax rounds each log-prob by up to ~4e-3 relative,
    which would bias the ratio, the KL term and ``rollout/logprob_gap`` (tests/train/test_bf16)."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [B, Lp+Lc]
    attention = torch.cat([prompt_mask, completion_mask], dim=1)  # [B, Lp+Lc]
    positions = (attention.cumsum(1) - 1).clamp(min=0)  # as generate() numbers them
    width = completion_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=attention, position_ids=positions,
                   logits_to_keep=width + 1).logits[:, :-1]  # [B, Lc, V] predicting Lc tokens
    step = max(1, LOGSOFTMAX_CHUNK // max(logits.shape[1] * logits.shape[2], 1))
    parts = []
    for start in range(0, logits.shape[0], step):
        chunk = logits[start : start + step].float() / temperature  # [b, Lc, V]
        ids_chunk = completion_ids[start : start + step].unsqueeze(-1)  # [b, Lc, 1]
        parts.append(chunk.gather(-1, ids_chunk).squeeze(-1) - chunk.logsumexp(-1))
    return torch.cat(parts)  # [B, Lc]


LOGSOFTMAX_CHUNK = 2**27  # floats (512 MB) of float32 logits per log-softmax chunk
