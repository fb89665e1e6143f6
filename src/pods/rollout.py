"""Rollout generation with transformers' generate (KV cache), batched over all P*n sequences.

Row p*n + j of every tensor is rollout j of prompt p.

Sampling is counter-based: rollout j of a prompt with key k draws its t-th token by inverse
CDF from softmax(logits / T), with a uniform number that is a hash of (k, j, t). A rollout
therefore depends only on its own key and its prompt, never on which other rows share its
batch, how generation is chunked, or which rank of a data-parallel run made it: the same
seed gives the same rollouts on 1 process or on 8. It costs what multinomial sampling costs
(one softmax and one cumulative sum per token).
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


# ---- counter-based sampling -----------------------------------------------------------
_M32 = 0xFFFFFFFF


def mix32(x: Tensor) -> Tensor:
    """A bijective 32-bit integer hash (Wellons' lowbias32) on int64 tensors holding
    uint32 values; products wrap in int64 and only their low 32 bits are kept."""
    x = x & _M32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


def sample_keys(*parts: int | Tensor) -> Tensor:
    """A key per element from integers (e.g. seed, step, prompt index): int64 [..]."""
    key = torch.zeros((), dtype=torch.long)
    for part in parts:
        key = mix32(key ^ mix32(torch.as_tensor(part, dtype=torch.long) + 0x9E3779B9))
    return key


class KeyedSampler:
    """A logits processor that samples the next token from softmax(scores / temperature)
    by inverse CDF, with a uniform that is a hash of the row's key and the position; it
    returns scores that are 0 at the drawn token and -inf elsewhere, so that greedy
    decoding takes exactly that token. row_keys [B] int64; scores [B, V]."""

    def __init__(self, row_keys: Tensor, temperature: float):
        self.row_keys, self.temperature = row_keys, temperature
        self.prompt_width: int | None = None  # padding differs by batch: count from here

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        if self.prompt_width is None:
            self.prompt_width = input_ids.shape[1]
        position = torch.tensor(input_ids.shape[1] - self.prompt_width, device=scores.device)
        bits = mix32(self.row_keys.to(scores.device) ^ mix32(position)) >> 8  # [B] 24 bits
        cdf = torch.softmax(scores.float() / self.temperature, dim=-1).cumsum(-1)  # [B, V]
        uniform = (bits.float() + 0.5) / 2**24 * cdf[:, -1]  # [B] in (0, total mass)
        token = torch.searchsorted(cdf, uniform.unsqueeze(1)).clamp(max=scores.shape[1] - 1)
        return torch.full_like(scores, float("-inf")).scatter_(1, token, 0.0)  # [B, V]


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], n: int, temperature: float,
             max_new_tokens: int, chunk: int, add_special_tokens: bool = True,
             keys: Tensor | None = None, synced: bool = False) -> Rollouts:
    """n completions of each prompt; temperature 0 decodes greedily. ``add_special_tokens``
    is False for prompts rendered by a chat template (see pods.prompts). ``keys`` [P] int64
    names each prompt's random stream (see ``sample_keys``); None draws them from torch's
    global RNG. ``synced``: under FSDP every forward pass is a collective, so all ranks keep
    stepping until the last one is done (all must pass as many rows)."""
    device = next(model.parameters()).device
    enc = tokenizer(prompts, return_tensors="pt", padding=True,
                    add_special_tokens=add_special_tokens)
    prompt_ids = enc["input_ids"].repeat_interleave(n, dim=0).to(device)  # [P*n, Lp]
    prompt_mask = enc["attention_mask"].repeat_interleave(n, dim=0).to(device)
    if keys is None:
        keys = torch.randint(0, 2**31, (len(prompts),))
    row_keys = mix32(keys.repeat_interleave(n) ^ mix32(torch.arange(n).repeat(len(prompts))))
    pieces = []
    for start in range(0, prompt_ids.shape[0], chunk):
        part = slice(start, start + chunk)
        # Greedy over the keyed sampler's scores is sampling from softmax(logits / T): no
        # top-k/top-p/repetition penalty (a model's generation_config may set them), or the
        # log-probs of the update would not be those of the sampling policy.
        processors = [KeyedSampler(row_keys[part], temperature)] if temperature > 0 else []
        out = model.generate(input_ids=prompt_ids[part], attention_mask=prompt_mask[part],
                             max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id, do_sample=False,
                             repetition_penalty=1.0, logits_processor=processors,
                             synced_gpus=synced)
        pieces.append(out[:, prompt_ids.shape[1] :])
    width = max(p.shape[1] for p in pieces)
    completion_ids = torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1]),
                                                        value=tokenizer.pad_token_id)
                                for p in pieces])  # [P*n, Lc]
    mask = completion_mask(completion_ids, tokenizer.eos_token_id)
    texts = tokenizer.batch_decode(completion_ids * mask + tokenizer.pad_token_id * (1 - mask),
                                   skip_special_tokens=True)
    return Rollouts(prompt_ids, prompt_mask, completion_ids, mask, texts)
