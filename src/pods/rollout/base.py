"""What every engine is built from (``EngineSpec``), what it returns (``Rollouts``), and the
interface the trainer and evaluation call (``Engine``).

Row p*n + j of every tensor is rollout j of prompt p (P prompts, n rollouts each).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from pods.config.step import RolloutConfig


@dataclass(frozen=True)
class EngineSpec:
    """Everything an engine is built from besides the model and tokenizer, fixed for a run:
    ``pods.rollout.make_engine(spec, model, tokenizer)`` and each engine module's
    ``build(spec, model, tokenizer)`` take it."""

    rollout: RolloutConfig  # which engine (engine: hf, vllm, auto) and its settings
    # (gen_batch_size, vllm_gpu_memory_utilization, vllm_sleep, vllm_seeded)
    device: torch.device  # where the trainer's model sits (auto takes vllm on a GPU only)
    max_model_len: int = 1024  # prompt + completion tokens one sequence may hold (vLLM)
    seed: int = 0  # the run's seed (vLLM's own generator, used when vllm_seeded is off)
    world: int = 1  # processes under data parallelism (vLLM joins their process group)
    sharded: bool = False  # FSDP: every forward pass is a collective (hf: synced_gpus)
    dtype: torch.dtype | None = None  # to sample in, where not the weights' own (mixed
    # precision); None: the weights' dtype


@dataclass
class Rollouts:
    prompt_ids: Tensor  # [B, Lp] left-padded
    prompt_mask: Tensor  # [B, Lp]
    completion_ids: Tensor  # [B, Lc] right-padded
    completion_mask: Tensor  # [B, Lc] 1 up to and including the first eos
    texts: list[str]  # [B] decoded completions, special tokens removed
    logprobs: Tensor | None = None  # [B, Lc] the engine's log-probs of the sampled tokens
    finished: Tensor | None = None  # [B] bool: ended with eos (False: cut at the length limit)

    def sources(self) -> dict[str, Tensor]:
        """What the rules' per-rollout inputs are computed from (pods.core.rollout_inputs)."""
        return {"completion_ids": self.completion_ids, "completion_mask": self.completion_mask}

    @staticmethod
    def cat(parts: list[Rollouts]) -> Rollouts:
        """The rows of ``parts``, in order: prompts left-padded and completions right-padded
        to the widest (padding masked out; log-probs 0 there). One part is returned as is."""
        if len(parts) == 1:
            return parts[0]
        def pad(tensors: list[Tensor], left: bool = False) -> Tensor:
            width = max(t.shape[1] for t in tensors)
            return torch.cat([torch.nn.functional.pad(
                t, (width - t.shape[1], 0) if left else (0, width - t.shape[1]))
                for t in tensors])

        logprobs = None if any(p.logprobs is None for p in parts) else \
            pad([p.logprobs for p in parts])
        finished = None if any(p.finished is None for p in parts) else \
            torch.cat([p.finished for p in parts])
        # a left-padded prompt pads with 0s: its mask says which tokens are real
        return Rollouts(pad([p.prompt_ids for p in parts], left=True),
                        pad([p.prompt_mask for p in parts], left=True),
                        pad([p.completion_ids for p in parts]),
                        pad([p.completion_mask for p in parts]),
                        [t for p in parts for t in p.texts], logprobs, finished)

    def select(self, rows: Tensor) -> Rollouts:
        """The rollouts at ``rows`` [K], trimmed to their longest completion."""
        mask = self.completion_mask[rows]
        width = max(int(mask.sum(1).max()), 1) if len(rows) else 1
        logprobs = None if self.logprobs is None else self.logprobs[rows, :width]
        finished = None if self.finished is None else self.finished[rows]
        return Rollouts(self.prompt_ids[rows], self.prompt_mask[rows],
                        self.completion_ids[rows, :width], mask[:, :width],
                        [self.texts[i] for i in rows.tolist()], logprobs, finished)


def completion_mask(ids: Tensor, eos_id: int) -> Tensor:
    """[B, L] 1 for tokens up to and including the first eos, 0 after."""
    is_eos = (ids == eos_id).long()  # [B, L]
    return ((is_eos.cumsum(1) - is_eos) == 0).long()


def encode_prompts(tokenizer, prompts: list[str], n: int, add_special_tokens: bool,
                   device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Left-padded prompt ids and mask, each prompt repeated n times: [P*n, Lp] twice."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True,
                    add_special_tokens=add_special_tokens)
    return (enc["input_ids"].repeat_interleave(n, dim=0).to(device),
            enc["attention_mask"].repeat_interleave(n, dim=0).to(device))


def finish(tokenizer, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
           logprobs: Tensor | None = None) -> Rollouts:
    """Rollouts from right-padded completions [B, Lc]: eos mask, decoded texts, and which
    ended with eos (a row without one was cut at the limit: the engines stop only on eos,
    and a cut row is as long as the longest, so holds no padding)."""
    mask = completion_mask(completion_ids, tokenizer.eos_token_id)
    texts = tokenizer.batch_decode(completion_ids * mask + tokenizer.pad_token_id * (1 - mask),
                                   skip_special_tokens=True)
    if logprobs is not None:
        logprobs = logprobs * mask
    finished = (completion_ids == tokenizer.eos_token_id).any(1)  # [B]
    return Rollouts(prompt_ids, prompt_mask, completion_ids, mask, texts, logprobs, finished)


class Engine(Protocol):
    """Generates rollouts for the trainer and evaluation; ``pods.rollout.make_engine``."""

    name: str
    tokenizer: object

    def generate(self, prompts: list[str], n: int, temperature: float, max_new_tokens: int,
                 keys: Tensor, add_special_tokens: bool = True) -> Rollouts:
        """n rollouts of each of the P ``prompts``, sampled from softmax(logits / T)
        (temperature 0: greedy); ``keys`` [P] int64 name each prompt's random stream
        (``pods.rollout.sample_keys``)."""

    def sync_weights(self, model) -> None:
        """Take the trainer's current weights (after an optimizer step or a restore)."""

    def asleep(self):
        """A context around the update in which the engine holds no accelerator memory."""


class ModelOwnedEngine:
    """Base of engines that sample from the trainer's own module: nothing to sync."""

    def sync_weights(self, model) -> None:
        pass

    def asleep(self):
        return nullcontext()
