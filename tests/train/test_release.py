"""A dropped Trainer lets go of everything it built: its model, the bf16 working copy and
sampling copy, the reference model, the optimizer's state and the engine's caches, in every
precision and layout, with LoRA, after an evaluation and after a resume. Sweeps, notebooks
and ``pods check`` build several trainers in one process: what one leaves alive, the next
one cannot have (14 GiB for a 1.5B model's float32 masters, gradients and copy)."""

import gc
import weakref

import pytest
import torch

from pods.train.trainer import Trainer
from runs import config

SETUPS = {
    "float32": {},
    "bf16 working copy": dict(mixed_precision="bf16", weight_cast="step"),
    "bf16 autocast": dict(mixed_precision="bf16", weight_cast="matmul"),
    "lora": dict(lora_rank=4),
    "kl reference": dict(beta=0.1, mixed_precision="bf16"),
    "padded": dict(update_layout="padded"),
    "static cache": dict(hf_compile="on", mixed_precision="bf16"),
}


def held(trainer: Trainer) -> dict[str, weakref.ref]:
    """Weak references to what a trainer holds that costs memory."""
    things = {"trainer": trainer, "model": trainer.model, "optimizer": trainer.optimizer,
              "engine": trainer.engine}
    if trainer.update_spec.cast is not None:
        things["working copy"] = trainer.update_spec.cast.module
    if getattr(trainer.engine, "copy", None) is not None:
        things["sampling copy"] = trainer.engine.copy.module
    if trainer.ref_model is not None:
        things["reference"] = trainer.ref_model
    state = [t for s in trainer.optimizer.state.values() for t in s.values()
             if isinstance(t, torch.Tensor)]
    assert state, "the trainer took no optimizer step"
    things["optimizer state"] = state[0]
    return {name: weakref.ref(thing) for name, thing in things.items()}


def alive(refs: dict[str, weakref.ref]) -> list[str]:
    gc.collect()
    return [name for name, ref in refs.items() if ref() is not None]


@pytest.mark.parametrize("setup", SETUPS)
def test_a_dropped_trainer_is_freed(tiny_model_dir, tmp_path, setup):
    trainer = Trainer(config(tiny_model_dir, tmp_path, device="cpu", **SETUPS[setup]),
                      log=lambda line: None)
    trainer.step()
    trainer.evaluate()
    refs = held(trainer)
    assert len(refs) >= 5
    del trainer
    assert alive(refs) == []


def test_a_trainer_resumed_from_a_checkpoint_is_freed(tiny_model_dir, tmp_path):
    """Written by one trainer, read by a second (as a resume does): both let go."""
    cfg = config(tiny_model_dir, tmp_path, device="cpu", mixed_precision="bf16")
    first = Trainer(cfg, log=lambda line: None)
    first.step()
    first.save(tmp_path / "checkpoint", {})
    refs = held(first)
    del first
    second = Trainer(cfg, log=lambda line: None)
    second.load(tmp_path / "checkpoint")
    second.step()
    refs |= {f"resumed {name}": ref for name, ref in held(second).items()}
    del second
    assert alive(refs) == []
