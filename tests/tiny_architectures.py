"""Tiny random models of the architectures the update layouts are tested on, built from
their configs and saved locally with the arithmetic character tokenizer (no hub)."""

import torch
from transformers import (
    AutoModelForCausalLM,
    FalconConfig,
    GPT2Config,
    MistralConfig,
    MptConfig,
    StableLmConfig,
)

from pods.models.tiny import build_tokenizer
from pods.tasks.arithmetic import Arithmetic

SMALL = dict(num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=64)
ARCHITECTURES = {  # name: (config or None: the tiny Qwen2 with LoRA, the announced layout)
    "stablelm": (lambda: StableLmConfig(hidden_size=32, intermediate_size=64,
                                        num_key_value_heads=2, **SMALL), "padded"),
    "falcon": (lambda: FalconConfig(hidden_size=32, **SMALL), "padded"),
    "mpt": (lambda: MptConfig(d_model=32, n_layers=1, n_heads=2, max_seq_len=64), "padded"),
    "windowed mistral": (lambda: MistralConfig(
        hidden_size=32, intermediate_size=64, num_key_value_heads=2, sliding_window=4,
        layer_types=["full_attention"], **SMALL), "padded"),
    "gpt2 with dropout": (lambda: GPT2Config(n_embd=32, n_layer=1, n_head=2, n_positions=64),
                          "shared_prompt"),  # resid, embd and attn dropout 0.1
    "lora with dropout": (None, "shared_prompt"),
}


def save_tiny(name: str, folder) -> str:
    """The folder of a tiny random ``name`` model (an ``ARCHITECTURES`` key with a config)."""
    tokenizer = build_tokenizer(Arithmetic.alphabet)
    ids = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
               eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model_config = ARCHITECTURES[name][0]()
    for key, value in ids.items():
        setattr(model_config, key, value)
    AutoModelForCausalLM.from_config(model_config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
