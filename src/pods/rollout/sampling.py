"""Counter-based random streams: a rollout's randomness is a function of its key alone.

A prompt's key is a hash of (seed, step, prompt index); rollout j of that prompt gets the
key hash(prompt key, j). An engine draws every random number of a rollout from its key, so
a rollout never depends on which other rows share its batch, how generation is chunked, or
which rank of a data-parallel run made it: the same seed gives the same rollouts on 1
process or on 8. (Each engine has its own sampler, so hf and vllm give different, equally
distributed rollouts for the same key.)
"""

from __future__ import annotations

import torch
from torch import Tensor

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


def rollout_keys(keys: Tensor, n: int) -> Tensor:
    """[P] prompt keys -> [P*n] rollout keys, row p*n + j for rollout j of prompt p."""
    P = keys.shape[0]
    return mix32(keys.repeat_interleave(n) ^ mix32(torch.arange(n).repeat(P)))


def keyed_draw(scores: Tensor, row_keys: Tensor, position: Tensor,
               temperature: float | Tensor) -> tuple[Tensor, Tensor]:
    """The token drawn from softmax(scores / temperature) by inverse CDF, with a uniform
    that is a hash of the row's key and the ``position`` (a 0-d int64 tensor on the scores'
    device, so that a captured decoding step needs no host value), and its log-prob under
    that softmax in float32. scores [B, V], row_keys [B] int64 -> token [B], logprob [B]."""
    bits = mix32(row_keys ^ mix32(position)) >> 8  # [B] 24 bits
    probs = torch.softmax(scores.float() / temperature, dim=-1)  # [B, V]
    cdf = probs.cumsum(-1)  # [B, V]
    uniform = (bits.float() + 0.5) / 2**24 * cdf[:, -1]  # [B] in (0, total mass)
    token = torch.searchsorted(cdf, uniform.unsqueeze(1)).clamp(max=scores.shape[1] - 1)
    # the log of the float32 probability the draw used: within ~1e-6 of log_softmax, with
    # no second pass over the vocabulary (a drawn token's probability is > 0, its CDF step
    # holds the uniform; the clamp only guards against a rounding accident)
    drawn = probs.gather(1, token).squeeze(1)  # [B]
    return token.squeeze(1), drawn.clamp(min=torch.finfo(drawn.dtype).tiny).log()


class KeyedSampler:
    """A logits processor (for transformers' ``generate``) that samples the next token
    with ``keyed_draw`` at the position it counts from the calls' input widths; it
    returns scores that are 0 at the drawn token and -inf elsewhere, so that greedy
    decoding takes exactly that token. row_keys [B] int64; scores [B, V].

    ``logprobs`` keeps, per call, the drawn tokens' log-probs [B] under softmax(scores /
    T), the distribution sampled from: ``sampled_logprobs`` stacks them [B, steps]."""

    def __init__(self, row_keys: Tensor, temperature: float):
        self.row_keys, self.temperature = row_keys, temperature
        self.prompt_width: int | None = None  # padding differs by batch: count from here
        self.logprobs: list[Tensor] = []  # [B] float32 per generated position

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        if self.prompt_width is None:
            self.prompt_width = input_ids.shape[1]
        position = torch.tensor(input_ids.shape[1] - self.prompt_width, device=scores.device)
        token, logprob = keyed_draw(scores, self.row_keys.to(scores.device), position,
                                    self.temperature)  # [B] twice
        self.logprobs.append(logprob)
        return torch.full_like(scores, float("-inf")).scatter_(1, token.unsqueeze(1), 0.0)

    def sampled_logprobs(self, width: int) -> Tensor:
        """[B, width] the drawn tokens' log-probs, the first ``width`` positions (0 past
        the last call)."""
        B = self.row_keys.shape[0]
        steps = torch.stack(self.logprobs, 1) if self.logprobs else torch.zeros(B, 0)
        steps = steps[:, :width]  # [B, <= width]
        return torch.nn.functional.pad(steps, (0, width - steps.shape[1]))
