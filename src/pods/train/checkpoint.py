"""What a checkpoint holds of the trainer, and how it is written and read back: the model
(``model/``: save_pretrained, weights and tokenizer), ``state.pt`` (optimizer, step count,
clock, random streams, and what the run adds of its schedule) and, under FSDP2, every rank's
shards (``shards/``, pods.runtime.fsdp). ``Trainer.save`` / ``Trainer.load`` call these;
where a checkpoint folder sits in a run folder, and how it is published and found, is the
run folder's format (pods.runs.checkpoints).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

STATE = "state.pt"


def write_model(folder: Path, model, tokenizer, weights: dict | None = None) -> None:
    """``model`` and ``tokenizer`` into ``folder/model`` (``weights``: the full state dict
    where the module holds only a shard)."""
    model.save_pretrained(folder / "model", state_dict=weights)
    tokenizer.save_pretrained(folder / "model")


def write_state(folder: Path, state: dict[str, Any]) -> None:
    torch.save(state, folder / STATE)


def read_state(folder: Path) -> dict[str, Any]:
    return torch.load(folder / STATE, weights_only=False)


def rng_states(prompt_rng, select_gen: torch.Generator) -> dict[str, Any]:
    """The trainer's random streams: torch's, the prompt sampler's, the selection's."""
    states = {"torch": torch.get_rng_state(), "prompts": prompt_rng.bit_generator.state,
              "select": select_gen.get_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any], prompt_rng, select_gen: torch.Generator) -> None:
    torch.set_rng_state(states["torch"])
    prompt_rng.bit_generator.state = states["prompts"]
    select_gen.set_state(states["select"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def load_weights(model, checkpoint: Path, cfg, device) -> None:
    """The weights of ``checkpoint`` into ``model`` (of model config ``cfg``); a checkpoint
    of another model is refused."""
    from pods.models.policy import load_saved_policy

    saved = load_saved_policy(checkpoint / "model", cfg.name, device, cfg)[0]
    missing = model.load_state_dict(saved.state_dict(), strict=False).missing_keys
    if any(p.requires_grad for n, p in model.named_parameters() if n in missing):
        raise ValueError(f"{checkpoint} does not match this run's model; resume it with "
                         f"the config it was trained with.")
