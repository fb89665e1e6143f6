"""Supervised warm-up: teacher-forced cross-entropy on prompt -> answer, answer tokens only.

Used to give the embedded model a starting policy that solves some problems (as an
instruct model does before RL). Deterministic for a given seed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from pods.runtime.speed import adamw
from pods.tasks import Problem


def answer_batch(tokenizer, problems: list[Problem]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [B, L] of bos+prompt+answer+eos and labels [B, L] (-100 except on
    the answer and eos)."""
    rows, labels = [], []
    for p in problems:
        prompt = tokenizer(p.prompt)["input_ids"]  # starts with bos
        answer = tokenizer(p.answer, add_special_tokens=False)["input_ids"]
        answer = answer + [tokenizer.eos_token_id]
        rows.append(prompt + answer)
        labels.append([-100] * len(prompt) + answer)
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    lab = torch.full((len(rows), width), -100)
    for i, (r, lb) in enumerate(zip(rows, labels, strict=True)):
        ids[i, : len(r)] = torch.tensor(r)
        lab[i, : len(lb)] = torch.tensor(lb)
    return ids, lab


@dataclass(frozen=True)
class WarmupPlan:
    """How long and how fast the warm-up trains."""

    steps: int  # AdamW steps
    batch_size: int  # problems per step, drawn at random (with replacement)
    lr: float  # AdamW learning rate (constant; no weight decay)
    seed: int = 0  # the draws of the batches


def supervised_warmup(model, tokenizer, problems: list[Problem], plan: WarmupPlan,
                      log=print) -> None:
    """``plan.steps`` AdamW steps on random batches of ``problems`` (in place)."""
    rng = np.random.default_rng(plan.seed)
    optimizer = adamw(model.parameters(), lr=plan.lr, betas=(0.9, 0.999), weight_decay=0.0)
    device = next(model.parameters()).device
    model.train()
    start = time.perf_counter()
    steps = plan.steps
    for step in range(1, steps + 1):
        batch = [problems[i] for i in rng.integers(0, len(problems), size=plan.batch_size)]
        ids, labels = (t.to(device) for t in answer_batch(tokenizer, batch))
        mask = (ids != tokenizer.pad_token_id).long()
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == steps:
            log(f"  sft step {step}/{steps} loss {loss.item():.3f} "
                f"({time.perf_counter() - start:.0f}s)")
    model.eval()
