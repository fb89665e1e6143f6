"""`pods export`: a checkpoint as a standalone model folder (LoRA adapters merged in)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from pods.models.policy import is_adapter, load_saved_policy
from pods.runs.checkpoints import checkpoints_and_config, first_readable


def export_checkpoint(path: str | Path, out_dir: str | Path, log=None) -> Path:
    """Write the newest readable checkpoint of a run (or a checkpoint folder) to ``out_dir``
    as a model that ``AutoModelForCausalLM.from_pretrained(out_dir)`` loads without pods or
    peft: a LoRA adapter is merged into its base model. An unreadable newest checkpoint is
    passed over for the one before, as resume does, and ``log`` (stderr) says so."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ValueError(f"{out_dir} is not empty; export into a new folder.")
    checkpoints, cfg = checkpoints_and_config(path)
    checkpoint, (model, tokenizer) = first_readable(
        checkpoints, lambda c: load_saved_policy(c / "model", cfg.model.name,
                                                 torch.device("cpu"), cfg.model),
        log or (lambda line: print(line, file=sys.stderr)))
    if is_adapter(checkpoint / "model"):
        model = model.merge_and_unload()
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
