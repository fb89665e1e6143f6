"""What a run checks and says before it loads anything: that its P prompts split over the
launched processes, and the settings it resolved (the recipe's, the device ``auto`` chose,
the precision plan), one line each, so that a run shows what it is about to do."""

from __future__ import annotations

import torch

from pods.config import TrainConfig
from pods.config.recipes import describe as describe_recipe
from pods.models.precision import Precision
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
