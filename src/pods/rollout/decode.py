"""pods's own decode loop on transformers' static KV cache (``--hf-decode loop``): prefill
once, then every decoding step is one function, compiled on CUDA so that a step is one
CUDA graph replay.

One step = the model's forward pass for one token per row + the keyed sampler
(pods.rollout.sampling.keyed_draw, position given as a device tensor) + the sampled
token's log-prob under softmax(logits / T) in float32 + the end-of-sequence bookkeeping
(which rows ended, their lengths, padding after eos). Everything a step reads or writes
lives in buffers of fixed addresses (``Buffers``), updated in place, so the step takes no
argument and no host value: torch.compile (mode reduce-overhead, static shapes) records it
once as a CUDA graph and replays it. transformers' ``generate`` instead runs its logits
processors, stopping criteria and bookkeeping eagerly around a compiled forward, with
host round trips at every step. The host looks at the device every ``CHECK_EVERY`` steps
only, to stop soon after every row has ended (at most ``CHECK_EVERY - 1`` steps late;
the extra steps write padding).

The temperature is a device tensor too (0: greedy, the argmax of the logits), so that
training's sampling and a greedy evaluation at the same shape share one compiled step.
The compile happens at the first call of each shape (rows, prompt columns, new tokens):
its kernels are kept by torch's inductor caches (FX graph and AOTAutograd caches, on by
default) in the pods cache (``compile_cache``), so later processes on the same machine
skip that work (tracing the step and recording its graph remain, once per process).

The same keys give the same tokens and log-probs as ``generate`` on the same cache: the
same forward passes, position ids, masks and sampler, in the same order (bit for bit
without the compile, tests/rollout/test_hf_decode.py; compiled, up to the rounding of
the fused kernels).
"""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass, fields
from functools import cache

import torch
from torch import Tensor

from pods.models.cache import compile_cache
from pods.rollout.sampling import keyed_draw

CHECK_EVERY = 8  # decoding steps between two looks of the host at the device (one sync)


@cache
def cache_keyword() -> str:
    """The keyword under which this transformers passes a cache (``cache`` since it was
    renamed from ``past_key_values``, which it still accepts with a warning)."""
    from transformers import GenerationMixin

    params = inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
    return "cache" if "cache" in params else "past_key_values"


def empty_static_cache(model, columns: int):
    """An empty static cache of ``columns`` columns for ``model``, as ``generate`` builds
    one (its rows, dtype and device are taken at the first forward pass)."""
    from transformers import StaticCache

    return StaticCache(config=model.config.get_text_config(decoder=True), max_cache_len=columns)


@dataclass(frozen=True)
class Decoding:
    """What a call decodes: at most ``new`` tokens a row, sampled at ``temperature`` (0:
    greedy), padded with ``pad_id`` after ``eos_id``; ``synced``: under FSDP every forward
    pass is a collective, so all ranks keep stepping until the last one is done (read by
    ``generate`` alone: the static path never runs under FSDP). A ``DecodeLoop`` is kept
    per shape and takes its new tokens, pad and eos from here, its temperature at each
    ``run``."""

    new: int
    pad_id: int
    eos_id: int
    temperature: float = 0.0
    synced: bool = False


@dataclass
class Buffers:
    """What one shape's step reads and writes, allocated once (rows B, cache columns L =
    prompt width + new tokens - 1, new tokens T) and refilled in place for every chunk."""

    tokens: Tensor  # [B, 1] int64: the token each row feeds next
    positions: Tensor  # [B, 1] int64: its position id (the row's real tokens before it)
    index: Tensor  # [] int64: the completion column the step writes
    keys: Tensor  # [B] int64: each row's random stream
    temperature: Tensor  # [] float32: 0 greedy
    mask: Tensor  # [B, L] int64: the prompt's mask, then 1s
    done: Tensor  # [B] bool: ended with eos
    lengths: Tensor  # [B] int64: tokens up to and including eos
    completion: Tensor  # [B, T] int64: the drawn tokens, padding after eos
    logprobs: Tensor  # [B, T] float32: their log-probs under softmax(logits / T)

    @staticmethod
    def allocate(rows: int, columns: int, new: int, device: torch.device) -> Buffers:
        def zeros(*shape, dtype=torch.long):
            return torch.zeros(shape, dtype=dtype, device=device)

        return Buffers(zeros(rows, 1), zeros(rows, 1), zeros(), zeros(rows),
                       zeros(dtype=torch.float32), zeros(rows, columns),
                       zeros(rows, dtype=torch.bool), zeros(rows), zeros(rows, new),
                       zeros(rows, new, dtype=torch.float32))


COMPILE = {"mode": "reduce-overhead"}  # the step's torch.compile options on CUDA (graphs)


def own_code(function):
    """``function`` with a code object of its own. dynamo keeps its compiled entries per
    code object, at most ``recompile_limit`` (8) of them: with one code object shared by
    every shape, the 9th shape would decode eagerly, silently, for the rest of the process.
    A copy per shape gives each its own cache (and the kept shapes are bounded:
    pods.rollout.hf_decode.MAX_KEPT)."""
    code = function.__code__.replace()  # a new code object, the same code
    return types.FunctionType(code, function.__globals__, function.__name__,
                              function.__defaults__, function.__closure__)


class DecodeLoop:
    """Decoding at one shape: ``rows`` rows, prompts of ``width`` columns (left-padded),
    ``decoding.new`` tokens at most, on a static cache of ``width + new - 1`` columns, kept
    (with its buffers and its compiled step) across calls at any temperature (given to
    ``run``). ``compiled``: the step compiled by torch.compile (True: mode reduce-overhead,
    CUDA graphs, as on a CUDA GPU; a dict: those options, e.g. the eager backend of the
    tests), into a code object of its own (``own_code``)."""

    def __init__(self, model, rows: int, width: int, decoding: Decoding,
                 compiled: bool | dict = False):
        new = decoding.new
        self.model, self.width = model, width
        self.pad_id, self.eos_id = decoding.pad_id, decoding.eos_id
        self.cache_keyword = cache_keyword()
        device = next(model.parameters()).device
        self.cache = empty_static_cache(model, width + new - 1)
        self.buffers = Buffers.allocate(rows, width + new - 1, new, device)
        for field in fields(Buffers):  # fixed addresses: a captured step reads them in place
            torch._dynamo.mark_static_address(getattr(self.buffers, field.name))
        self.step = self._step
        self.code = None  # the compiled step's own code object (its dynamo cache)
        if compiled:
            compile_cache()  # before the first compile reads it
            own = own_code(DecodeLoop._step)
            self.code = own.__code__
            self.step = torch.compile(types.MethodType(own, self), dynamic=False,
                                      **(COMPILE if compiled is True else compiled))

    def graphs(self) -> int | None:
        """The graphs dynamo holds for this shape's step: 1 once compiled, 0 where it ran
        eagerly (a fallback), more where it recompiled; None where not compiled."""
        if self.code is None:
            return None
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        return len(_debug_get_cache_entry_list(self.code))

    def run(self, ids: Tensor, mask: Tensor, keys: Tensor,
            temperature: float) -> tuple[Tensor, Tensor]:
        """ids, mask [rows, width] left-padded prompts; keys [rows] -> the completions
        [rows, Lc] (padding after eos) and their log-probs [rows, Lc], Lc the longest
        completion (as ``generate`` returns)."""
        b, new = self.buffers, self.buffers.completion.shape[1]
        self.reset(ids, mask, keys, temperature)
        positions = (mask.cumsum(1) - 1).clamp(min=0)  # [rows, width]: padding at 0
        logits = self.forward(ids, positions)  # the cache tracks its own columns
        b.positions.copy_(mask.sum(1, keepdim=True))  # the first drawn token's position
        self.select(logits)
        for step in range(1, new):
            self.step()
            if step % CHECK_EVERY == 0 and bool(b.done.all()):  # the one host sync
                break
        width = int(b.lengths.max())
        return b.completion[:, :width].clone(), b.logprobs[:, :width].clone()

    def reset(self, ids: Tensor, mask: Tensor, keys: Tensor, temperature: float) -> None:
        """The cache emptied and the buffers refilled for new prompts, in place."""
        b = self.buffers
        self.cache.reset()
        b.mask.fill_(1)
        b.mask[:, : self.width].copy_(mask)
        b.keys.copy_(keys)
        b.temperature.fill_(temperature)
        b.index.zero_()
        b.done.zero_()
        b.lengths.zero_()
        b.completion.fill_(self.pad_id)
        b.logprobs.zero_()

    def forward(self, ids: Tensor, positions: Tensor) -> Tensor:
        """The last position's logits [rows, V] in float32, for ids [rows, q] written to
        the cache's next q columns (the cache counts them itself, on the device)."""
        out = self.model(input_ids=ids, attention_mask=self.buffers.mask,
                         position_ids=positions, use_cache=True, logits_to_keep=1,
                         **{self.cache_keyword: self.cache})
        return out.logits[:, -1].float()

    def _step(self) -> None:
        """One decoding step, in place: feed each row's last token, draw the next."""
        b = self.buffers
        logits = self.forward(b.tokens, b.positions)  # [rows, V]
        b.positions.add_(1)
        self.select(logits)

    def select(self, logits: Tensor) -> None:
        """Draw each row's next token from ``logits`` [rows, V] and book it: written at
        column ``index`` (padding where the row had ended), with its log-prob."""
        b = self.buffers
        greedy = b.temperature == 0
        token, logprob = keyed_draw(logits, b.keys, b.index,
                                    torch.where(greedy, 1.0, b.temperature))  # [rows] x2
        token = torch.where(greedy, logits.argmax(-1), token)
        token = torch.where(b.done, self.pad_id, token)  # [rows]
        column = b.index.view(1)
        b.completion.index_copy_(1, column, token.unsqueeze(1))
        b.logprobs.index_copy_(1, column, logprob.unsqueeze(1))
        b.lengths.add_((~b.done).long())
        b.done.logical_or_(token == self.eos_id)
        b.tokens.copy_(token.unsqueeze(1))
        b.index.add_(1)
