"""How the hf engine decodes one chunk of rows: transformers' ``generate`` with the keyed
sampler (``run_generate``: the dynamic cache, or a kept static one), or, at fixed shapes on
a static cache (``StaticDecoding``, ``--hf-compile``), pods's own loop (pods.rollout.decode,
``--hf-decode loop``) or ``generate`` on that cache (``--hf-decode generate``).

Fixed shapes: every chunk of a call has the rows of the call's first chunk (a last,
smaller chunk is filled with copies of its first row, dropped after), and its prompts are
left-padded to the call's longest prompt rounded up to a multiple of ``BUCKET`` columns
(never above the run's prompt limit): few shapes, and attention over few padded columns.
Each shape's static cache (and, for the loop, its buffers and compiled step) is built at
its first call and kept for the later ones, emptied in place between them, so that CUDA
graphs recorded once stay valid (a new cache at every call would mean new addresses). At
most ``MAX_KEPT`` shapes are kept (the least recently used goes), and before each update
``park`` drops those the step did not sample with (an evaluation's 512-row shape holds
gigabytes of cache), so the update's automatic micro-batch sees that memory free. Each
shape's compiled step has a code object of its own (pods.rollout.decode.own_code), so no
shape runs eagerly for want of dynamo's per-code cache; one that does anyway is warned and
counted (``fallbacks``).
"""

from __future__ import annotations

import warnings
from collections import OrderedDict

import torch
from torch import Tensor

from pods.config.fields import HF_DECODES
from pods.rollout.decode import (
    DecodeLoop,
    Decoding,
    cache_keyword,
    compile_cache,
    empty_static_cache,
)
from pods.rollout.sampling import KeyedSampler

BUCKET = 64  # prompt widths of the static path are multiples of it
MAX_KEPT = 8  # shapes kept at once (each a static cache, buffers and a compiled step)


def run_generate(model, ids: Tensor, mask: Tensor, keys: Tensor, how: Decoding,
                 cache=None) -> tuple[Tensor, Tensor | None]:
    """transformers' ``generate`` on prompts ids, mask [b, Lp] with row keys [b]: the
    completions [b, Lc] (padding after eos) and their log-probs [b, Lc] (None when greedy,
    as vLLM gives none). ``cache``: a static cache to decode on (emptied first); None: the
    dynamic cache."""
    # Greedy over the keyed sampler's scores is sampling from softmax(logits / T): no
    # top-k/top-p/repetition penalty (a model's generation_config may set them), or the
    # log-probs of the update would not be those of the sampling policy.
    sampler = KeyedSampler(keys, how.temperature) if how.temperature > 0 else None
    extra = {}
    if cache is not None:
        cache.reset()
        extra[cache_keyword()] = cache
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=how.new,
                         pad_token_id=how.pad_id, eos_token_id=how.eos_id, do_sample=False,
                         repetition_penalty=1.0, synced_gpus=how.synced,
                         logits_processor=[] if sampler is None else [sampler], **extra)
    completion = out[:, ids.shape[1]:]  # [b, Lc]
    return completion, None if sampler is None else \
        sampler.sampled_logprobs(completion.shape[1]).to(completion.device)


def bucket_width(longest: int, limit: int | None, bucket: int = BUCKET) -> int:
    """The prompt columns of a call whose longest prompt has ``longest`` tokens: rounded up
    to a multiple of ``bucket``, not above ``limit`` (the run's prompt limit) where set,
    never below ``longest``."""
    width = -(-longest // bucket) * bucket
    return width if limit is None else max(longest, min(width, limit))


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


class StaticDecoding:
    """The static path of one engine: its prompt ``limit`` (None: none), which decoder
    (``decode``: "loop", pods's loop; "generate", transformers' generate on the same
    cache), and what it keeps per shape (rows, columns, new tokens, dtype): a
    ``DecodeLoop`` or a static cache. The loop is compiled on a CUDA device only; on CUDA
    transformers compiles generate's forward pass itself."""

    def __init__(self, limit: int | None, decode: str = "loop", compiled: bool | dict = True):
        if decode not in HF_DECODES:
            raise ValueError(f"hf_decode={decode!r}: choose one of {', '.join(HF_DECODES)}.")
        self.limit, self.decode = limit, decode
        self.compiled = compiled  # the loop's torch.compile: True on CUDA; options (a
        # dict: the eager backend of the tests) on any device (pods.rollout.decode)
        self.kept: OrderedDict[tuple, object] = OrderedDict()  # shape -> DecodeLoop or
        # StaticCache, least recently used first, at most MAX_KEPT
        self.used: set[tuple] = set()  # the shapes used since the last ``park``
        self.fallbacks = 0  # shapes whose compiled step ran eagerly (or recompiled)

    def width(self, longest: int) -> int:
        """The prompt columns of a call whose longest prompt has ``longest`` tokens."""
        return bucket_width(longest, self.limit)

    def chunk(self, model, ids: Tensor, mask: Tensor, keys: Tensor,
              how: Decoding) -> tuple[Tensor, Tensor | None]:
        """As ``run_generate``, for prompts already at a fixed shape [rows, width]."""
        rows, width = ids.shape
        cuda = ids.device.type == "cuda"
        if cuda:  # where the loop or generate compiles: kernels kept in the pods cache
            compile_cache()
        shape = (self.decode, rows, width, how.new, next(model.parameters()).dtype)
        if self.decode == "generate":
            cache = self._kept(shape, lambda: empty_static_cache(model, width + how.new - 1))
            return run_generate(model, ids, mask, keys, how, cache=cache)
        compiled = self.compiled if cuda or isinstance(self.compiled, dict) else False
        loop = self._kept(shape, lambda: DecodeLoop(model, rows, width, how,
                                                    compiled=compiled))
        fresh = loop.graphs() is not None and not getattr(loop, "checked", False)
        completion, logprobs = loop.run(ids, mask, keys, how.temperature)
        if fresh:  # the first call of a compiled shape: did it get its one graph?
            loop.checked = True
            self._check_graphs(loop, shape)
        return completion, logprobs if how.temperature > 0 else None

    def _check_graphs(self, loop, shape: tuple) -> None:
        graphs = loop.graphs()
        if graphs != 1:
            self.fallbacks += 1
            what = "ran eagerly (no graph)" if graphs == 0 else f"made {graphs} graphs"
            warnings.warn(f"the hf engine's decode step at shape {shape[1:4]} {what}: "
                          f"decoding there is slower (hf/decode_fallbacks counts such "
                          f"shapes); --hf-decode generate avoids pods's loop.",
                          RuntimeWarning, stacklevel=3)

    def _kept(self, shape: tuple, build):
        self.used.add(shape)
        if shape in self.kept:
            self.kept.move_to_end(shape)
            return self.kept[shape]
        while len(self.kept) >= MAX_KEPT:  # the least recently used shape goes
            self.kept.popitem(last=False)
        self.kept[shape] = build()
        return self.kept[shape]

    def park(self) -> int:
        """Before an update: drop the kept shapes not used since the last park (an
        evaluation's, a dynamic-sampling round's), their static caches and buffers with
        them, so that the update has that memory; the shapes the step just sampled with
        stay (rebuilding them every step would recompile). The shapes dropped."""
        stale = [shape for shape in self.kept if shape not in self.used]
        for shape in stale:
            del self.kept[shape]
        self.used = set()
        return len(stale)

