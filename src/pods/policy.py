"""Loading the policy, and the per-token log-probs the loss needs."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_policy(model: str, task, device: torch.device, log=print):
    """(model, tokenizer) from a hub id, a local folder, or 'tiny' (the embedded model)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if model == "tiny":
        from pods.models.tiny import tiny_model_path

        model = str(tiny_model_path(task, log=log))
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.padding_side = "left"  # generation continues every prompt at the same column
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    policy = AutoModelForCausalLM.from_pretrained(model).to(device)
    return policy, tokenizer


def load_checkpoint_policy(path: str | Path, device: torch.device):
    """(model, tokenizer) saved in a checkpoint's ``model`` folder."""
    return load_policy(str(Path(path)), None, device)


def completion_logprobs(model, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                        completion_mask: Tensor, temperature: float) -> Tensor:
    """log pi(token) of each completion token under the sampling distribution
    softmax(logits / temperature). Prompts left-padded [B, Lp], completions right-padded
    [B, Lc]; returns [B, Lc] (values at padding are meaningless: mask them)."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [B, Lp+Lc]
    attention = torch.cat([prompt_mask, completion_mask], dim=1)  # [B, Lp+Lc]
    positions = (attention.cumsum(1) - 1).clamp(min=0)  # as generate() numbers them
    logits = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits
    logits = logits[:, prompt_ids.shape[1] - 1 : -1].float() / temperature  # [B, Lc, V]
    picked = logits.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)  # [B, Lc]
    return picked - logits.logsumexp(-1)  # [B, Lc]
