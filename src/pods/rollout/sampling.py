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


UNIFORM_BITS = 23  # (bits + 0.5) / 2**23 is exact in float32 and lies in (0, 1), never 1


def keyed_uniforms(row_keys: Tensor, position: Tensor, vocab: int) -> Tensor:
    """[B, V] float32 uniforms in (0, 1), each a hash of the row's key, the ``position``
    and the token's index: a rollout's randomness, independent of its batch."""
    base = mix32(row_keys ^ mix32(position)).unsqueeze(1)  # [B, 1]
    tokens = torch.arange(vocab, device=row_keys.device)  # [V]
    bits = mix32(base ^ mix32(tokens + 0x2545F491)) >> (32 - UNIFORM_BITS)  # [B, V]
    return (bits.float() + 0.5) / 2**UNIFORM_BITS


def keyed_draw(scores: Tensor, row_keys: Tensor, position: Tensor,
               temperature: float | Tensor) -> tuple[Tensor, Tensor]:
    """The token drawn from softmax(scores / temperature) by the Gumbel-max race, with a
    uniform per token that is a hash of the row's key, the ``position`` (a 0-d int64 tensor
    on the scores' device, so that a captured decoding step needs no host value) and the
    token (``keyed_uniforms``), and its log-prob under that softmax in float32.
    scores [B, V], row_keys [B] int64 -> token [B], logprob [B].

    argmax_v(log p_v - log(-log u_v)) is v with probability p_v exactly (the Gumbel-max
    trick: -log u_v are independent exponentials, and the smallest E_v / p_v is v's with
    probability p_v). Only elementwise ops and reductions (argmax, log_softmax), no scan,
    sort or search over the vocabulary: a compiler fuses the whole draw into one pass
    over the logits (inductor cannot generate a cumulative sum over 49k tokens fused with
    an argmax on torch 2.11). With 23-bit uniforms, a token whose probability is below
    about 1e-7 of the likeliest one's is drawn a little less often than its probability."""
    logp = torch.log_softmax(scores.float() / temperature, dim=-1)  # [B, V]
    uniforms = keyed_uniforms(row_keys, position, scores.shape[1])  # [B, V]
    token = (logp - (-uniforms.log()).log()).argmax(-1)  # [B]
    return token, logp.gather(1, token.unsqueeze(1)).squeeze(1)


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
