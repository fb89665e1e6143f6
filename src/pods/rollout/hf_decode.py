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

A failure to compile costs speed, never the run: a shape whose compiled step fails to
compile or to be captured as a CUDA graph (``COMPILE_ERRORS``) decodes with ``generate``
on the static cache from then on, and one whose ``generate`` on the static cache fails so
(transformers compiles its forward pass on CUDA) with ``generate`` on the dynamic cache;
each decoder's failure is warned once with its error and every such shape counted in
``fallbacks`` (``hf/decode_fallbacks`` in the step records).
"""

from __future__ import annotations

import warnings
from collections import OrderedDict

import torch
from torch import Tensor

from pods.config.fields import HF_DECODES
from pods.models.cache import compile_cache
from pods.rollout.decode import DecodeLoop, Decoding, cache_keyword, empty_static_cache
from pods.rollout.sampling import KeyedSampler

BUCKET = 64  # prompt widths of the static path are multiples of it
MAX_KEPT = 8  # shapes kept at once (each a static cache, buffers and a compiled step)
# the decoders of a shape, each the fallback of the one before where it fails to compile
DECODERS = ("loop", "generate", "dynamic")


def compile_errors() -> tuple[type[BaseException], ...]:
    """What a failed compile or graph capture raises: dynamo's errors (a backend's failure
    is BackendCompilerFailed), inductor's (InductorError, on torch versions where it is not
    one of dynamo's), and CUDA graph capture errors (``CudaGraphError``, below)."""
    from torch._dynamo.exc import TorchDynamoException

    errors: list[type[BaseException]] = [TorchDynamoException, CudaGraphError]
    try:
        from torch._inductor.exc import InductorError

        errors.append(InductorError)
    except ImportError:  # older torch: inductor's errors reach here as dynamo's
        pass
    return tuple(errors)


class CudaGraphError(RuntimeError):
    """A CUDA graph capture that failed (torch raises a plain RuntimeError naming it)."""


COMPILE_ERRORS = compile_errors()


def describe(error: BaseException) -> str:
    """``error`` in one line: its type, and the first line of what caused it (dynamo wraps
    a backend's own error, e.g. inductor's NotImplementedError, in BackendCompilerFailed)."""
    cause = error
    while cause.__cause__ is not None and cause.__cause__ is not cause:
        cause = cause.__cause__
    cause = getattr(error, "inner_exception", None) or cause
    text = next((line for line in str(cause).splitlines() if line.strip()), "")[:300]
    inner = "" if cause is error else f"{type(cause).__name__}: "
    return f"{type(error).__name__}: {inner}{text}"


def capture_failed(error: RuntimeError) -> bool:
    """Whether ``error`` is a CUDA graph capture's failure (by torch's and CUDA's wording:
    "...during graph capture", "...when stream is capturing", cudaErrorStreamCapture*)."""
    text = str(error).lower()
    return "captur" in text and ("graph" in text or "stream" in text)


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
        self.fallbacks = 0  # shapes whose compiled step ran eagerly, recompiled or failed
        self.broken: set[tuple] = set()  # (decoder, shape)s that failed to compile
        self.warned: set[str] = set()  # the decoders whose failure was warned

    def width(self, longest: int) -> int:
        """The prompt columns of a call whose longest prompt has ``longest`` tokens."""
        return bucket_width(longest, self.limit)

    def chunk(self, model, ids: Tensor, mask: Tensor, keys: Tensor,
              how: Decoding) -> tuple[Tensor, Tensor | None]:
        """As ``run_generate``, for prompts already at a fixed shape [rows, width]. A shape
        whose compiled step fails to compile or to be captured (``COMPILE_ERRORS``) decodes
        with ``generate`` on the static cache from then on, and one whose ``generate`` on the
        static cache fails so (transformers compiles its forward pass on CUDA) with
        ``generate`` on the dynamic cache: the run goes on, slower, warned once a decoder."""
        rows, width = ids.shape
        if ids.device.type == "cuda":  # where the loop or generate compiles: kernels kept
            compile_cache()  # in the pods cache
        shape = (rows, width, how.new, next(model.parameters()).dtype)
        for decode in DECODERS[DECODERS.index(self.decode):]:
            if (decode, *shape) in self.broken:
                continue
            try:
                return self._decode(decode, shape, model, (ids, mask, keys), how)
            except COMPILE_ERRORS as error:
                self._broke((decode, *shape), error)
        raise AssertionError("the dynamic cache never breaks")  # "dynamic" is not caught

    def _decode(self, decode: str, shape: tuple, model, inputs: tuple,
                how: Decoding) -> tuple[Tensor, Tensor | None]:
        ids, mask, keys = inputs
        rows, width, new, _ = shape
        if decode == "dynamic":
            return run_generate(model, ids, mask, keys, how)
        if decode == "generate":
            cache = self._kept((decode, *shape),
                               lambda: empty_static_cache(model, width + new - 1))
            return run_generate(model, ids, mask, keys, how, cache=cache)
        compiled = self.compiled if ids.device.type == "cuda" or \
            isinstance(self.compiled, dict) else False
        loop = self._kept((decode, *shape), lambda: DecodeLoop(model, rows, width, how,
                                                               compiled=compiled))
        fresh = loop.graphs() is not None and not getattr(loop, "checked", False)
        try:
            completion, logprobs = loop.run(ids, mask, keys, how.temperature)
        except RuntimeError as error:
            if capture_failed(error):
                raise CudaGraphError(str(error)) from error
            raise
        if fresh:  # the first call of a compiled shape: did it get its one graph?
            loop.checked = True
            self._check_graphs(loop, (decode, *shape))
        return completion, logprobs if how.temperature > 0 else None

    def _broke(self, shape: tuple, error: Exception) -> None:
        """``shape`` (its decoder first) failed to compile or capture: dropped, never tried
        again, counted in ``fallbacks``, warned once per decoder with the error."""
        self.broken.add(shape)
        self.kept.pop(shape, None)
        self.fallbacks += 1
        decode = shape[0]
        if decode in self.warned:
            return
        self.warned.add(decode)
        then = "generate on the static cache" if decode == "loop" else \
            "generate on the dynamic cache"
        warnings.warn(f"the hf engine's {decode!r} decoding failed to compile at shape "
                      f"{shape[1:4]} ({describe(error)}); that shape decodes "
                      f"with {then} from now on (slower; hf/decode_fallbacks counts such "
                      f"shapes). The run goes on.", RuntimeWarning, stacklevel=4)

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

