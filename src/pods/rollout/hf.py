"""The hf engine: transformers' ``generate`` (KV cache) on the trainer's own module, all
P*n sequences batched and chunked by ``gen_batch_size``. Runs wherever the trainer runs;
the sampler is ``KeyedSampler`` (pods.rollout.sampling).

Each sampled token's log-prob comes back (``Rollouts.logprobs``, temperature > 0), as the
vllm engine's does: under softmax(logits / T), the distribution it was drawn from (vLLM's
``processed_logprobs``: at the temperature, not of the raw logits), in float32, from the
sampler's own softmax (no extra pass). Against the trainer's recomputation they give
``rollout/logprob_gap`` and the importance-sampling correction (``is_correction``); with
float32 weights they agree to ~1e-6, from a bf16 sampling copy they do not.

On a static cache (``--hf-compile``: auto, on a CUDA GPU, not under FSDP2; on, everywhere
but under FSDP2) the calls of a run have fixed shapes (pods.rollout.hf_decode: the rows of
the first chunk, prompts left-padded to a multiple of 64 columns), and each shape's cache is
kept across calls. ``--hf-decode generate`` (the default) runs transformers' ``generate``
on the kept cache (it compiles the forward pass alone and runs the sampler and bookkeeping
eagerly around it). ``--hf-decode loop`` (opt-in until it has passed ``make test-gpu``)
decodes with pods's own loop (pods.rollout.decode): a decoding step (forward pass, keyed
sampler, log-prob, end-of-sequence bookkeeping) is one function, compiled on CUDA
(torch.compile, mode reduce-overhead) so that a step is one CUDA graph replay, and the host
looks at the device every few steps only; a shape whose step fails to compile decodes with
``generate`` instead (pods.rollout.hf_decode). A bf16 sampling copy keeps its tensors'
addresses when refreshed, so recorded graphs stay valid. The returned prompts keep their
own padding. The same keys give the same completions and log-probs as the dynamic cache
(tests/rollout/test_hf_static.py), up to the rounding of attention over the extra padded
columns. The dynamic cache (``--hf-compile off``, and the default on a CPU) is plain
``generate``.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from pods.rollout.base import EngineSpec, ModelOwnedEngine, Rollouts, encode_prompts, finish
from pods.rollout.decode import Decoding
from pods.rollout.hf_decode import StaticDecoding, fixed_shape, run_generate
from pods.rollout.sampling import rollout_keys

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
                 dtype: torch.dtype | None = None, static: StaticDecoding | None = None):
        self.model, self.tokenizer, self.chunk, self.synced = model, tokenizer, chunk, synced
        self.static = static  # fixed shapes on a static cache, kept across calls; None
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
                            self.static)
        finally:
            model.train(was_training)

    def sync_weights(self, model) -> None:
        if self.copy is not None:
            self.copy.refresh(model)

    @property
    def metrics(self) -> dict[str, float]:
        """``hf/decode_fallbacks``: static shapes whose compiled decode step ran eagerly or
        recompiled (where the engine decodes on a static cache)."""
        return {} if self.static is None else \
            {"hf/decode_fallbacks": float(self.static.fallbacks)}

    @contextmanager
    def asleep(self):
        """Around the update: the static shapes the step did not sample with are dropped
        (pods.rollout.hf_decode.StaticDecoding.park), so the update has their memory."""
        if self.static is not None:
            self.static.park()
        yield


@torch.no_grad()
def generate(model, tokenizer, request: SamplingRequest, chunk: int, synced: bool = False,
             static: StaticDecoding | None = None) -> Rollouts:
    """``request.n`` completions of each of ``request.prompts``, ``chunk`` sequences at a
    time. ``synced``: under FSDP every forward pass is a collective, so all ranks keep
    stepping until the last one is done (all must pass as many rows). ``static``: at
    fixed shapes on a static cache (pods.rollout.hf_decode); None: the dynamic cache."""
    device = next(model.parameters()).device
    r, pad_id, eos_id = request, tokenizer.pad_token_id, tokenizer.eos_token_id
    prompt_ids, prompt_mask = encode_prompts(tokenizer, r.prompts, r.n, r.add_special_tokens,
                                             device)  # [P*n, Lp] each
    keys = torch.randint(0, 2**31, (len(r.prompts),)) if r.keys is None else r.keys  # [P]
    row_keys = rollout_keys(keys, r.n).to(device)  # [P*n]
    how = Decoding(r.max_new_tokens, pad_id, eos_id, r.temperature, synced)
    total = prompt_ids.shape[0]
    pieces = []  # (completions [b, Lc], log-probs [b, Lc] or None) per chunk
    for start in range(0, total, chunk):
        part = slice(start, start + chunk)
        ids, mask, part_keys = prompt_ids[part], prompt_mask[part], row_keys[part]
        rows = ids.shape[0]
        if static is None:
            completion, logprobs = run_generate(model, ids, mask, part_keys, how)
        else:  # every chunk of this call at the shape of the first
            ids, mask, part_keys = fixed_shape(ids, mask, part_keys, min(chunk, total),
                                               static.width(prompt_ids.shape[1]), pad_id)
            completion, logprobs = static.chunk(model, ids, mask, part_keys, how)
        pieces.append((completion[:rows], None if logprobs is None else logprobs[:rows]))
    width = max(c.shape[1] for c, _ in pieces)

    def widen(t: Tensor, value: float) -> Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)

    completion_ids = torch.cat([widen(c, pad_id) for c, _ in pieces])  # [P*n, Lc]
    logprobs = None if r.temperature == 0 else \
        torch.cat([widen(lp, 0.0) for _, lp in pieces])  # [P*n, Lc]; greedy: None (vLLM)
    return finish(tokenizer, prompt_ids, prompt_mask, completion_ids, logprobs)


def build(spec: EngineSpec, model, tokenizer) -> HFEngine:
    """The hf engine for ``pods.rollout.make_engine``: ``gen_batch_size`` sequences at a
    time, synced under FSDP, sampling in ``spec.dtype``, at fixed shapes on a static cache
    where ``hf_compile`` resolves on (``static_cache``), decoded by ``hf_decode``."""
    r = spec.rollout
    static = None
    sliding = sliding_layers(model)
    if static_cache(r.hf_compile, spec.device, spec.sharded) and sliding:
        warnings.warn(f"the hf engine decodes this model with transformers' generate on the "
                      f"dynamic cache: its {sliding} would recompile a static cache's decode "
                      f"step at every token (the sliding cache's length is a guarded "
                      f"Python int).", RuntimeWarning, stacklevel=2)
    elif static_cache(r.hf_compile, spec.device, spec.sharded):
        static = StaticDecoding(spec.max_model_len - r.max_new_tokens, r.hf_decode)
    return HFEngine(model, tokenizer, r.gen_batch_size, synced=spec.sharded, dtype=spec.dtype,
                    static=static)


def sliding_layers(model) -> str | None:
    """What of ``model``'s attention keeps a sliding window (transformers' static cache
    then holds a StaticSlidingWindowLayer), or None."""
    config = getattr(model, "config", None)
    get = getattr(config, "get_text_config", None)
    config = get(decoder=True) if callable(get) else config
    types = set(getattr(config, "layer_types", None) or [])
    if "sliding_attention" in types:
        return "sliding-window layers"
    if getattr(config, "sliding_window", None) and not types and \
            getattr(config, "use_sliding_window", True):
        return f"sliding window of {config.sliding_window} tokens"
    return None


def check(options, device: torch.device, sharded: bool) -> None:
    """Refuse, before any model loads, what the hf engine cannot run (``options``: a
    RolloutConfig): the static cache under FSDP2, where every forward pass gathers the
    shards (a collective), which a CUDA graph replay cannot hold."""
    if sharded and options.hf_compile == "on":
        raise ValueError("hf_compile on runs the hf engine on a static cache compiled to CUDA "
                         "graphs, which FSDP2 cannot run (every forward pass gathers the "
                         "shards); use --hf-compile auto (off under FSDP2) or off.")


def static_cache(hf_compile: str, device: torch.device, sharded: bool) -> bool:
    """Whether the hf engine runs on a static cache: "on" (refused under FSDP, ``check``);
    or "auto" on a CUDA GPU, not under FSDP (where every forward pass is a collective, kept
    on the dynamic path)."""
    if sharded:
        return False
    return hf_compile == "on" or (hf_compile == "auto" and device.type == "cuda")
