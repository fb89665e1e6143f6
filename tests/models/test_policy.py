"""Loading the policy: dtype, LoRA, errors that say what to do, saved folders."""

import pytest
import torch

from pods.config import ModelConfig
from pods.models.policy import is_adapter, load_policy, load_saved_policy
from pods.models.precision import weights_dtype


def test_auto_dtype_is_float32_on_a_cpu():
    assert weights_dtype(ModelConfig(), torch.device("cpu")) == torch.float32
    assert weights_dtype(ModelConfig(dtype="bfloat16"), torch.device("cpu")) == torch.bfloat16


def test_a_missing_model_says_what_to_pass(tmp_path):
    with pytest.raises(ValueError, match="the model path .*nothing does not exist"):
        load_policy(str(tmp_path / "nothing"), torch.device("cpu"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="could not load the model .*Pass a local folder"):
        load_policy(str(tmp_path / "empty"), torch.device("cpu"))


def test_lora_trains_only_the_adapter(tiny_model_dir):
    options = ModelConfig(lora_rank=4, lora_target_modules="q_proj,v_proj")
    model, tokenizer = load_policy(tiny_model_dir, torch.device("cpu"), options)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None


def test_saved_full_weights_and_adapters_load_back(tiny_model_dir, tmp_path):
    cpu = torch.device("cpu")
    lora = ModelConfig(lora_rank=4, lora_target_modules="q_proj,v_proj")
    model, tokenizer = load_policy(tiny_model_dir, cpu, lora)
    with torch.no_grad():
        next(p for n, p in model.named_parameters() if "lora_B" in n).fill_(0.5)
    model.save_pretrained(tmp_path / "adapter")
    assert is_adapter(tmp_path / "adapter") and not is_adapter(tiny_model_dir)
    loaded, _ = load_saved_policy(tmp_path / "adapter", tiny_model_dir, cpu, lora)
    ids = tokenizer(["12+34="], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
    full, _ = load_saved_policy(tiny_model_dir, "unused", cpu, ModelConfig())
    assert not any("lora_" in n for n, _ in full.named_parameters())
