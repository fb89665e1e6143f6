"""Rollout generation with transformers' generate (KV cache), batched over all P*n sequences.

Row p*n + j of every tensor is rollout j of prompt p.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Rollouts:
    prompt_ids: Tensor  # [B, Lp] left-padded
    prompt_mask: Tensor  # [B, Lp]
    completion_ids: Tensor  # [B, Lc] right-padded
    completion_mask: Tensor  # [B, Lc] 1 up to and including the first eos
    texts: list[str]  # [B] decoded completions, special tokens removed

    def select(self, rows: Tensor) -> Rollouts:
        """The rollouts at ``rows`` [K], trimmed to their longest completion."""
        mask = self.completion_mask[rows]
        width = max(int(mask.sum(1).max()), 1) if len(rows) else 1
        return Rollouts(self.prompt_ids[rows], self.prompt_mask[rows],
                        self.completion_ids[rows, :width], mask[:, :width],
                        [self.texts[i] for i in rows.tolist()])


def completion_mask(ids: Tensor, eos_id: int) -> Tensor:
    """[B, L] 1 for tokens up to and including the first eos, 0 after."""
    is_eos = (ids == eos_id).long()  # [B, L]
    return ((is_eos.cumsum(1) - is_eos) == 0).long()


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], n: int, temperature: float,
             max_new_tokens: int, chunk: int, add_special_tokens: bool = True) -> Rollouts:
    """n completions of each prompt; temperature 0 decodes greedily. ``add_special_tokens``
    is False for prompts rendered by a chat template (see pods.prompts)."""
    device = next(model.parameters()).device
    enc = tokenizer(prompts, return_tensors="pt", padding=True,
                    add_special_tokens=add_special_tokens)
    prompt_ids = enc["input_ids"].repeat_interleave(n, dim=0).to(device)  # [P*n, Lp]
    prompt_mask = enc["attention_mask"].repeat_interleave(n, dim=0).to(device)
    # Sample from the policy itself: override any top-k/top-p/repetition penalty that a
    # model's generation_config sets (Qwen2.5's does), or the log-probs would not match.
    sampling = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                    repetition_penalty=1.0) if temperature > 0 else dict(do_sample=False)
    pieces = []
    for start in range(0, prompt_ids.shape[0], chunk):
        out = model.generate(input_ids=prompt_ids[start : start + chunk],
                             attention_mask=prompt_mask[start : start + chunk],
                             max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id, **sampling)
        pieces.append(out[:, prompt_ids.shape[1] :])
    width = max(p.shape[1] for p in pieces)
    completion_ids = torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1]),
                                                        value=tokenizer.pad_token_id)
                                for p in pieces])  # [P*n, Lc]
    mask = completion_mask(completion_ids, tokenizer.eos_token_id)
    texts = tokenizer.batch_decode(completion_ids * mask + tokenizer.pad_token_id * (1 - mask),
                                   skip_special_tokens=True)
    return Rollouts(prompt_ids, prompt_mask, completion_ids, mask, texts)
