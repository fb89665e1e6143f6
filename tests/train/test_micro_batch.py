"""The update's micro-batch chosen from free device memory (no --micro-batch-size): the
estimate's arithmetic with worked numbers, and every row in one pass off CUDA."""

import torch
from transformers import AutoModelForCausalLM

from pods.train import micro_batch
from pods.train.micro_batch import auto_micro_batch, fitting_rows, token_bytes

GiB = 2**30


def test_a_tokens_activation_bytes_follow_the_layers_and_the_compute_dtype():
    # Qwen2.5-1.5B: 28 layers, hidden 1536, MLP 8960; bf16: 2 * (8*1536 + 2*8960) = 60,416
    # bytes a layer, 1,691,648 a token
    assert token_bytes(28, 1536, 8960, 2, checkpointed=False) == 28 * 60_416 == 1_691_648
    assert token_bytes(28, 1536, 8960, 4, checkpointed=False) == 2 * 1_691_648  # float32
    # checkpointed: each layer's input (2 * 1536) and one layer's whole set
    assert token_bytes(28, 1536, 8960, 2, checkpointed=True) == 28 * 3072 + 60_416


def test_the_rows_that_fit_beside_the_weights_state_and_the_head():
    # 100 GiB free: 80 GiB usable; 1.5e9 trained weights * 12 = 18e9 bytes; head 1.25 GiB;
    # rows of 1,024 tokens at 1,691,648 bytes a token = 1,732,247,552 bytes a row
    room = 80 * GiB - 18_000_000_000 - int(1.25 * GiB)
    assert room // 1_732_247_552 == 38
    assert fitting_rows(100 * GiB, 1_500_000_000, 1_691_648, 1024, 64, int(1.25 * GiB)) == 38
    assert fitting_rows(100 * GiB, 1_500_000_000, 1_691_648, 1024, 16, int(1.25 * GiB)) == 16
    assert fitting_rows(GiB, 1_500_000_000, 1_691_648, 1024, 64, 0) == 1  # at least one row


def test_on_a_gpu_the_choice_reads_free_memory_and_elsewhere_it_is_all_rows(tiny_model_dir,
                                                                            monkeypatch):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert auto_micro_batch(model, 12, 40, 2, torch.device("cpu")) is None  # one pass
    c = model.config
    per_row = token_bytes(c.num_hidden_layers, c.hidden_size, c.intermediate_size, 2,
                          False) * 40
    trained = sum(p.numel() for p in model.parameters())
    head = 2**25 * 10  # pods.models.logprobs.HEAD_CHUNK floats: float32, bf16, gradient
    free = int((trained * 12 + head + 5 * per_row) / micro_batch.SAFETY) + 1  # 5 rows' room
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
    assert auto_micro_batch(model, 12, 40, 2, torch.device("cuda")) == 5
    # memory torch's allocator holds but does not use counts as free: it reuses it
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free - per_row, 2 * free))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 3 * per_row)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2 * per_row)
    assert auto_micro_batch(model, 12, 40, 2, torch.device("cuda")) == 5
    assert auto_micro_batch(model, 3, 40, 2, torch.device("cuda")) == 3
