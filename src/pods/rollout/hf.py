"""The hf engine: transformers' ``generate`` (KV cache) on the trainer's own module, all
P*n sequences batched and chunked by ``gen_batch_size``. Runs wherever the trainer runs;
the sampler is ``KeyedSampler`` (pods.rollout.sampling).

Each sampled token's log-prob comes back (``Rollouts.logprobs``, temperature > 0), as the
vllm engine's does: under softmax(logits / T), the distribution it was drawn from (vLLM's
``processed_logprobs``: at the temperature, not of the raw logits), in float32, from the
sampler's own softmax (no extra pass). Against the trainer's recomputation they give
``rollout/logprob_gap`` and the importance-sampling correction (``is_correction``); with
float32 weights they agree to ~1e-6, from a bf16 sampling copy they do not.

With ``static_width`` (``--hf-compile``, on by default on a CUDA GPU) the calls of a run
have fixed shapes: as many rows as the first chunk (``chunk``, or fewer where the call has
fewer; a last, smaller chunk is filled with copies of its first row, dropped after) and
prompts left-padded to ``static_width`` columns, on transformers' static KV cache. On CUDA
transformers then compiles the decoding step (torch.compile, mode reduce-overhead: CUDA
graphs) at the first call of each shape (a training step's P*n rows, an evaluation's test
set: two in a run) and replays it at every later one; a bf16 sampling copy keeps its
tensors' addresses when refreshed, so the graphs stay valid. The returned prompts keep
their own padding. The same keys give the same completions as the dynamic cache
(tests/rollout/test_hf_static.py), up to the rounding of attention over the extra padded
columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pods.rollout.base import EngineSpec, ModelOwnedEngine, Rollouts, encode_prompts, finish
from pods.rollout.sampling import KeyedSampler, rollout_keys

SAMPLED_LOGPROBS = True  # generate returns Rollouts.logprobs when it samples (pods.rollout)


@dataclass(frozen=True)
class SamplingRequest:
    """What ``generate`` is asked for: n completions of each of the P prompts."""

    prompts: list[str]  # [P]
    n: int  # completions per prompt
    temperature: float  # sampled from softmax(logits / T); 0 decodes greedily
    max_new_tokens: int  # the completion length limit
    keys: Tensor | None = None  # [P] int64: each prompt's random stream (``sample_keys``);
    # None draws them from torch's global RNG
    add_special_tokens: bool = True  # False for prompts rendered by a chat template
    # (pods.rollout.prompts), which hold their special tokens already


class HFEngine(ModelOwnedEngine):
    """Samples from ``model`` itself (in eval mode), so it never needs a weight sync; or,
    with a ``dtype`` other than the weights' (mixed precision), from a copy in that dtype
    (pods.models.precision.SamplingCopy) that ``sync_weights`` refreshes.
    ``synced``: under FSDP every forward pass is a collective (see ``generate``)."""

    name = "hf"

    def __init__(self, model, tokenizer, chunk: int, synced: bool = False,
                 dtype: torch.dtype | None = None, static_width: int | None = None):
        self.model, self.tokenizer, self.chunk, self.synced = model, tokenizer, chunk, synced
        self.static_width = static_width  # prompts padded to it on a static cache; None
        self.copy = None
        if dtype is not None and dtype != next(model.parameters()).dtype:
            from pods.models.precision import SamplingCopy

            self.copy = SamplingCopy(model, dtype)

    def generate(self, prompts: list[str], n: int, temperature: float, max_new_tokens: int,
                 keys: Tensor, add_special_tokens: bool = True) -> Rollouts:
        model = self.model if self.copy is None else self.copy.module
        was_training = model.training
        model.eval()
        try:
            request = SamplingRequest(prompts, n, temperature, max_new_tokens, keys,
                                      add_special_tokens)
            return generate(model, self.tokenizer, request, self.chunk, self.synced,
                            self.static_width)
        finally:
            model.train(was_training)

    def sync_weights(self, model) -> None:
        if self.copy is not None:
            self.copy.refresh(model)


@torch.no_grad()
def generate(model, tokenizer, request: SamplingRequest, chunk: int, synced: bool = False,
             static_width: int | None = None) -> Rollouts:
    """``request.n`` completions of each of ``request.prompts``, ``chunk`` sequences per
    ``model.generate`` call. ``synced``: under FSDP every forward pass is a collective, so
    all ranks keep stepping until the last one is done (all must pass as many rows).
    ``static_width``: every call on a static cache at ``chunk`` rows and prompts of that
    many columns (the module docstring says why)."""
    device = next(model.parameters()).device
    r = request
    prompt_ids, prompt_mask = encode_prompts(tokenizer, r.prompts, r.n, r.add_special_tokens,
                                             device)  # [P*n, Lp] each
    keys = torch.randint(0, 2**31, (len(r.prompts),)) if r.keys is None else r.keys  # [P]
    row_keys = rollout_keys(keys, r.n)  # [P*n]
    pieces, samplers = [], []
    for start in range(0, prompt_ids.shape[0], chunk):
        part = slice(start, start + chunk)
        ids, mask, part_keys = prompt_ids[part], prompt_mask[part], row_keys[part]
        rows, extra = ids.shape[0], {}
        if static_width is not None:  # every chunk of this call as wide as the first
            ids, mask, part_keys = fixed_shape(ids, mask, part_keys,
                                               min(chunk, prompt_ids.shape[0]), static_width,
                                               tokenizer.pad_token_id)
            extra = {"cache_implementation": "static"}
        # Greedy over the keyed sampler's scores is sampling from softmax(logits / T): no
        # top-k/top-p/repetition penalty (a model's generation_config may set them), or the
        # log-probs of the update would not be those of the sampling policy.
        processors = [KeyedSampler(part_keys, r.temperature)] if r.temperature > 0 else []
        out = model.generate(input_ids=ids, attention_mask=mask,
                             max_new_tokens=r.max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id, do_sample=False,
                             repetition_penalty=1.0, logits_processor=processors,
                             synced_gpus=synced, **extra)
        pieces.append(out[:rows, ids.shape[1] :])
        samplers += [(s, rows) for s in processors]  # the keyed sampler, which kept the
        # log-probs it drew with (its first ``rows`` rows are real)
    width = max(p.shape[1] for p in pieces)
    completion_ids = torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1]),
                                                        value=tokenizer.pad_token_id)
                                for p in pieces])  # [P*n, Lc]
    logprobs = torch.cat([s.sampled_logprobs(width)[:rows].to(device) for s, rows in samplers]) \
        if samplers else None  # [P*n, Lc]; greedy: None, as vLLM gives none
    return finish(tokenizer, prompt_ids, prompt_mask, completion_ids, logprobs)


def fixed_shape(ids: Tensor, mask: Tensor, keys: Tensor, rows: int, width: int,
                pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """[b, Lp] prompt ids and mask and [b] keys as [rows, max(width, Lp)]: left-padded
    (masked) columns, and rows beyond b filled with copies of the first (dropped after)."""
    b, Lp = ids.shape
    left = max(width - Lp, 0)
    ids = torch.nn.functional.pad(ids, (left, 0), value=pad_id)
    mask = torch.nn.functional.pad(mask, (left, 0), value=0)
    fill = rows - b
    if fill > 0:
        ids = torch.cat([ids, ids[:1].expand(fill, -1)])
        mask = torch.cat([mask, mask[:1].expand(fill, -1)])
        keys = torch.cat([keys, keys[:1].expand(fill)])
    return ids, mask, keys


def build(spec: EngineSpec, model, tokenizer) -> HFEngine:
    """The hf engine for ``pods.rollout.make_engine``: ``gen_batch_size`` sequences at a
    time, synced under FSDP, sampling in ``spec.dtype``, at fixed shapes on a static cache
    where ``hf_compile`` resolves on (``static_cache``)."""
    width = spec.max_model_len - spec.rollout.max_new_tokens  # the run's prompt limit
    return HFEngine(model, tokenizer, spec.rollout.gen_batch_size, synced=spec.sharded,
                    dtype=spec.dtype,
                    static_width=width if static_cache(spec.rollout.hf_compile, spec.device,
                                                       spec.sharded) else None)


def static_cache(hf_compile: str, device: torch.device, sharded: bool) -> bool:
    """Whether the hf engine runs on a static cache: "on"; or "auto" on a CUDA GPU, not under
    FSDP (where every forward pass is a collective, kept on the dynamic path)."""
    return hf_compile == "on" or (hf_compile == "auto" and device.type == "cuda"
                                  and not sharded)
