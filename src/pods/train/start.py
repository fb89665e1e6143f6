"""What a run checks and says before it trains: that its P prompts split over the launched
processes, the settings it resolved (the recipe's, the device ``auto`` chose, the precision
plan), and, once its data is read, the prompts dropped and the update's micro-batch (a token
budget too small for the longest prompt refused), one line each, so that a run shows what
it is about to do."""

from __future__ import annotations

import torch

from pods.config import TrainConfig
from pods.config.recipes import describe as describe_recipe
from pods.models.precision import Precision
from pods.rollout.prompts import encoded_prompts
from pods.runtime.device import device_notes
from pods.runtime.threads import choose_threads


def check_world(prompts_per_step: int, world: int) -> None:
    """Each rank takes whole groups of n: P must be a multiple of the process count."""
    if prompts_per_step % world:
        raise ValueError(f"prompts_per_step={prompts_per_step} does not split over {world} "
                         f"processes (each rank takes whole groups of n); use a multiple of "
                         f"{world}.")


def start_notes(config: TrainConfig, device: torch.device, precision: Precision) -> list[str]:
    """The recipe's key settings, the device (why ``auto`` chose it; a GPU recipe on a CPU
    warned), what the weights are stored and computed in, and why; on a CPU whose cores
    other work keeps busy, the threads torch runs instead (pods.runtime.threads)."""
    notes = [describe_recipe(config),
             *device_notes(config.run.device, device, config.run.written_for_gpu),
             *precision.report(config.model, config.optim.bf16_updates, device)]
    if device.type == "cpu":  # other work on the cores: fewer threads, said
        choose_threads(notes.append)
    return notes


def data_notes(config: TrainConfig, dropped: dict[str, int], device: torch.device,
               train: tuple) -> list[str]:
    """The prompts dropped as too long, and how the update cuts its passes: the rows or
    the token budget asked, or how they will be chosen. ``train``: (tokenizer, task, the
    training problems), tokenized only for a token budget, whose longest prompt it must hold
    it and a token of its completion: below that every pass holds a single row, over the
    budget, and the budget does nothing it says)."""
    notes = []
    if any(dropped.values()):
        notes.append(f"dropped prompts over {config.task.max_prompt_tokens} tokens: "
                     f"{dropped['data/dropped_train']} train, {dropped['data/dropped_test']} test")
    rows, tokens = config.optim.micro_batch_size, config.optim.micro_batch_tokens
    if tokens is not None:
        longest = max(len(ids) for ids in encoded_prompts(*train))
        if tokens < longest + 1:
            raise ValueError(f"micro_batch_tokens={tokens} is below the longest training prompt "
                             f"+ 1 = {longest + 1} tokens: a pass holds a prompt and at least one "
                             f"token of its completion; raise it to {longest + 1} or more (or "
                             f"use --micro-batch-size, rows a pass).")
        notes.append(f"micro-batch: at most {tokens} token positions a pass "
                     f"(--micro-batch-tokens; the longest prompt is {longest})")
    elif rows is not None:
        notes.append(f"micro-batch: {rows} rows a pass (--micro-batch-size) of the "
                     f"{config.kept_per_step} kept a step")
    elif device.type == "cuda":
        notes.append("micro-batch: chosen from the GPU's free memory at the first update "
                     "(optim/micro_batch_size, or optim/micro_batch_tokens under a packed "
                     "layout, in the step records)")
    else:
        notes.append(f"micro-batch: all {config.kept_per_step} kept rows a step in one pass "
                     f"(--micro-batch-size or --micro-batch-tokens cut it)")
    return notes
