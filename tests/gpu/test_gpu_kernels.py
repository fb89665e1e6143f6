"""On a CUDA GPU (make test-gpu): liger-kernel's modules on one model leave every model
built after it, on the GPU or the CPU, with transformers' own (liger's patch rebound the
modeling module's names: the next CPU model failed with "Pointer argument (at 0) cannot
be accessed from Triton"). liger against torch's kernels: tests/models/test_kernels.py."""

import importlib.util

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from pods.models.kernels import use_kernels

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    importlib.util.find_spec("liger_kernel") is None,
    reason="needs liger-kernel: pip install -e '.[gpu]'")]

CONFIG = Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


def liger_forwards(model) -> int:
    return sum("Liger" in getattr(m.forward, "__qualname__", "") for m in model.modules())


def test_liger_on_one_model_leaves_later_models_on_any_device_alone():
    liger = Qwen2ForCausalLM(CONFIG).to("cuda", torch.bfloat16)
    assert use_kernels(liger, "liger") == "liger" and liger_forwards(liger) > 0
    ids = torch.randint(0, 256, (4, 12))
    assert liger(input_ids=ids.cuda()).logits.shape == (4, 12, 256)  # its Triton kernels
    cpu = Qwen2ForCausalLM(CONFIG)  # built after it: torch's modules, runs on the CPU
    assert liger_forwards(cpu) == 0 and cpu(input_ids=ids).logits.shape == (4, 12, 256)
    gpu = Qwen2ForCausalLM(CONFIG).cuda()
    assert liger_forwards(gpu) == 0 and gpu(input_ids=ids.cuda()).logits.shape == (4, 12, 256)
