"""On a CUDA GPU (make test-gpu): the update's activation estimate (pods.train.micro_batch)
against the memory the GPU holds for a forward pass, and ``--gradient-checkpointing auto``
choosing from the GPU's free memory."""

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config

from pods.train.micro_batch import token_bytes
from pods.train.trainer import Trainer
from runs import config

pytestmark = pytest.mark.gpu


def held_bytes(model, tokens: int, autocast: bool) -> int:
    """What the GPU holds after a forward of ``tokens`` tokens through ``model``'s decoder,
    beside its output, while the graph is alive (what the backward will read)."""
    ids = torch.randint(0, 100, (2, tokens // 2), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(0))
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        out = model.model(input_ids=ids).last_hidden_state
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before - out.untyped_storage().nbytes()
    del out
    return held


@pytest.mark.parametrize("weights,autocast", [(torch.bfloat16, False), (torch.float32, True)])
def test_the_estimate_covers_what_the_gpu_holds_a_token_and_layer(weights, autocast):
    """A Qwen2 decoder on the GPU's kernels: bytes a token and a layer, from two lengths and
    two depths (the weights and their casts cancel), within the estimate (2% for the
    attention's log-sum-exp) and above 0.85 of it. An estimate below what the GPU holds
    would size micro-batches that do not fit."""
    hidden, mlp = 512, 2048

    def per_token(layers: int) -> float:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(Qwen2Config(
            vocab_size=128, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
            num_attention_heads=8, num_key_value_heads=2), dtype=weights).cuda().train()
        held_bytes(model, 2048, autocast)  # cuBLAS's workspace and the like, allocated once
        held = (held_bytes(model, 4096, autocast) - held_bytes(model, 2048, autocast)) / 2048
        del model
        torch.cuda.empty_cache()
        return held

    measured = (per_token(4) - per_token(2)) / 2  # a layer's bytes a token
    estimate = token_bytes(1, hidden, mlp, 2, False, weights.itemsize)
    assert 0.85 * estimate < measured <= 1.02 * estimate, (measured, estimate)


def test_auto_checkpointing_reads_the_gpus_free_memory(tiny_model_dir, tmp_path):
    """A small model's pass fits in a GPU many times over: auto leaves checkpointing off,
    on the module the update runs through, and says how many positions a pass holds."""
    from pods.models.checkpointing import checkpointed

    lines = []
    trainer = Trainer(config(tiny_model_dir, tmp_path, device="cuda",
                             gradient_checkpointing="auto"),
                      log=lambda line, **_: lines.append(line))
    for _ in range(6):  # a step whose kept rewards all tie has no update: the next one
        record = trainer.step()
        if not record["optim/skipped"]:
            break
    assert record["optim/gradient_checkpointing"] == 0.0
    spec = trainer.update_spec
    assert not checkpointed(trainer.model if spec.cast is None else spec.cast.module)
    (said,) = [line for line in lines if line.startswith("gradient checkpointing (auto)")]
    assert said.startswith("gradient checkpointing (auto): off: a pass holds ")
    holds, takes = (int(said.split(word)[1].split()[0].replace(",", ""))
                    for word in (" holds ", " takes "))
    assert holds > takes  # the whole update in one pass
