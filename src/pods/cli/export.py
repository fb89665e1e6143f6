"""`pods export`: a checkpoint as a standalone model folder (LoRA adapters merged in)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from pods.models.policy import is_adapter, load_saved_policy
from pods.runs.checkpoints import checkpoints_and_config, first_readable


def export_checkpoint(path: str | Path, out_dir: str | Path, log=None,
                      dtype: str = "auto") -> Path:
    """Write the newest readable checkpoint of a run (or a checkpoint folder) to ``out_dir``
    as a model that ``AutoModelForCausalLM.from_pretrained(out_dir)`` loads without pods or
    peft: a LoRA adapter is merged into its base model. An unreadable newest checkpoint is
    passed over for the one before, as resume does, and ``log`` (stderr) says so.

    ``dtype``: of the written weights; "auto" is the dtype the run's base model was saved in
    (bfloat16 for SmolLM2, Qwen and most hub models; float32 for the embedded model), as a
    user loading the export expects, where the run trained float32 weights."""
    log = log or (lambda line: print(line, file=sys.stderr))
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ValueError(f"{out_dir} is not empty; export into a new folder.")
    checkpoints, cfg = checkpoints_and_config(path)
    checkpoint, (model, tokenizer) = first_readable(
        checkpoints, lambda c: load_saved_policy(c / "model", cfg.model.name,
                                                 torch.device("cpu"), cfg.model),
        log)
    if is_adapter(checkpoint / "model"):
        model = model.merge_and_unload()
    dtype = source_dtype(cfg.model.name, cfg.model.gguf_file) if dtype == "auto" else dtype
    model.to(getattr(torch, dtype)).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def source_dtype(name: str, gguf_file: str | None) -> str:
    """The dtype a model source's config.json names (``dtype``, formerly ``torch_dtype``);
    float32 where it names none or cannot be read (a hub id offline)."""
    from transformers import AutoConfig

    from pods.models.source import resolve

    try:
        config = AutoConfig.from_pretrained(resolve(name, gguf_file, log=lambda *a: None))
    except (OSError, ValueError):
        return "float32"
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    found = str(dtype or "float32").removeprefix("torch.")
    return found if found in ("float32", "bfloat16", "float16") else "float32"
