"""On a CUDA GPU (make test-gpu): a dropped Trainer gives its device memory back, in the
precisions and layouts a GPU run uses (the bf16 working copy, autocast, LoRA, a KL
reference, the static cache), after an evaluation: ``memory_allocated`` returns to where it
was before the trainer was built."""

import gc

import pytest
import torch

from pods.train.trainer import Trainer
from runs import config

pytestmark = pytest.mark.gpu

SETUPS = {
    "bf16 working copy": dict(weight_cast="step"),
    "autocast": dict(weight_cast="matmul"),
    "lora": dict(lora_rank=4),
    "kl reference": dict(beta=0.1),
    "static cache loop": dict(hf_compile="on", hf_decode="loop"),
    "shared prompts": dict(update_layout="shared_prompt"),
}


@pytest.mark.parametrize("setup", SETUPS)
def test_a_dropped_trainer_gives_its_gpu_memory_back(tiny_model_dir, tmp_path, setup):
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    trainer = Trainer(config(tiny_model_dir, tmp_path, device="cuda", **SETUPS[setup]),
                      log=lambda line: None)
    trainer.step()
    trainer.evaluate()
    assert torch.cuda.memory_allocated() > before
    del trainer
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - before < 1 << 20  # under 1 MiB left
