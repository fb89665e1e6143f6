"""The update's micro-batch chosen from free device memory (no --micro-batch-size): the
estimate's arithmetic with worked numbers, and every row in one pass off CUDA."""

import torch
from transformers import AutoModelForCausalLM

from pods.train import micro_batch
from pods.train.micro_batch import auto_micro_batch, fitting_rows, token_bytes

GiB = 2**30


def test_a_tokens_activation_bytes_follow_the_layers_and_the_compute_dtype():
    # Qwen2.5-1.5B: 28 layers, hidden 1536, MLP 8960; bf16 throughout:
    # (4*2 + 6*2) * 1536 + 4*2 * 8960 = 102,400 bytes a layer, 2,867,200 a token
    assert token_bytes(28, 1536, 8960, 2, checkpointed=False) == 28 * 102_400 == 2_867_200
    assert token_bytes(28, 1536, 8960, 4, checkpointed=False) == 2 * 2_867_200  # float32
    # checkpointed: each layer's input (2 * 1536) and one layer's whole set
    assert token_bytes(28, 1536, 8960, 2, checkpointed=True) == 28 * 3072 + 102_400


def test_under_autocast_the_float32_residual_stream_counts_and_the_measured_peak_fits():
    """bf16 autocast over float32 weights: the norms keep float32 tensors. One H200 measured
    2.94 MiB a token (2026-11-28, Qwen2.5-1.5B's architecture, 64 rows x 288 tokens in one
    pass, no checkpointing: 78.7 GiB peak less 22.9 GiB of state and 2.9 GiB of casts,
    docs/guides/gpu.md): the estimate is above it, and within a tenth."""
    MiB = 2**20
    estimate = token_bytes(28, 1536, 8960, 2, checkpointed=False, residual_bytes=4)
    assert estimate == 28 * ((4 * 4 + 6 * 2) * 1536 + 4 * 2 * 8960) == 3_211_264
    measured = 52.9 * GiB / (64 * 288)  # 3.01 MB = 2.94 MiB
    assert round(measured / MiB, 2) == 2.94
    assert measured < estimate < 1.1 * measured
    assert token_bytes(28, 1536, 8960, 2, True, 4) == 28 * 4 * 1536 + 114_688


def test_the_rows_that_fit_beside_the_weights_state_and_the_head():
    # 100 GiB free: 80 GiB usable; 1.5e9 trained weights * 12 = 18e9 bytes; head 1.25 GiB;
    # rows of 1,024 tokens at 2,867,200 bytes a token = 2,936,012,800 bytes a row
    room = 80 * GiB - 18_000_000_000 - int(1.25 * GiB)
    assert room // 2_936_012_800 == 22
    state = 1_500_000_000 * 12
    assert fitting_rows(100 * GiB, state, 2_867_200, 1024, 64, int(1.25 * GiB)) == 22
    assert fitting_rows(100 * GiB, state, 2_867_200, 1024, 16, int(1.25 * GiB)) == 16
    assert fitting_rows(GiB, state, 2_867_200, 1024, 64, 0) == 1  # at least one row


def test_on_a_gpu_the_choice_reads_free_memory_and_elsewhere_it_is_all_rows(tiny_model_dir,
                                                                            monkeypatch):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert auto_micro_batch(model, 12, 40, 2, torch.device("cpu")) is None  # one pass
    c = model.config
    per_row = token_bytes(c.num_hidden_layers, c.hidden_size, c.intermediate_size, 2,
                          False, residual_bytes=4) * 40  # bf16 compute, float32 weights
    trained = sum(p.numel() for p in model.parameters())
    head = 2**25 * 10  # pods.models.logprobs.HEAD_CHUNK floats: float32, bf16, gradient
    free = int((trained * 12 + head + 5 * per_row) / micro_batch.SAFETY) + 1  # 5 rows' room
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", no_snapshot)  # reserved - allocated
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


def no_snapshot(device=None):
    raise RuntimeError("no snapshot")


def cuda_with(monkeypatch, free: int, segments: list[dict] | None = None):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
    monkeypatch.setattr(torch.cuda.memory, "_snapshot",
                        lambda device=None: {"segments": segments or []})


def test_state_the_optimizer_holds_already_is_not_reserved_again(tiny_model_dir,
                                                                  monkeypatch):
    """Step 1 reserves the gradients and AdamW's moments; from step 2 on they are allocated
    (and so missing from free memory already): with the same memory left for activations,
    the micro-batch is the same at steps 1 and 5, not several-fold smaller."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    trained = sum(p.numel() for p in model.parameters())
    assert micro_batch.pending_state_bytes(optimizer) == 12 * trained  # nothing allocated
    c = model.config
    per_row = token_bytes(c.num_hidden_layers, c.hidden_size, c.intermediate_size, 2,
                          False, residual_bytes=4) * 40  # bf16 compute, float32 weights
    head = 2**25 * 10
    activations = 5 * per_row  # the room five rows take, at every step
    cuda_with(monkeypatch, int((12 * trained + head + activations) / micro_batch.SAFETY) + 1)
    cuda = torch.device("cuda")
    first = auto_micro_batch(model, 12, 40, 2, cuda, optimizer)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()  # gradients and moments now allocated: free memory is 12 bytes a
    # weight less, and nothing more will be allocated for them
    assert micro_batch.pending_state_bytes(optimizer) == 0
    cuda_with(monkeypatch, int((head + activations) / micro_batch.SAFETY) + 1)
    assert auto_micro_batch(model, 12, 40, 2, cuda, optimizer) == first == 5


def test_free_blocks_of_a_cuda_graph_pool_do_not_count_as_free(monkeypatch):
    """torch's allocator reuses its own pool's free blocks, not those of a CUDA graph's
    private pool (the hf engine's captured decode steps)."""
    segments = [{"total_size": 100, "allocated_size": 40, "segment_pool_id": (0, 0)},
                {"total_size": 500, "allocated_size": 0, "segment_pool_id": (1, 3)}]
    cuda_with(monkeypatch, 0, segments)
    assert micro_batch.reusable_bytes(torch.device("cuda")) == 60


def test_fsdp2_shards_count_their_local_share():
    class Shard(torch.nn.Parameter):  # a DTensor's interface: the global and local counts
        def to_local(self):
            return torch.zeros(self.numel() // 4)

    p = Shard(torch.zeros(400))
    optimizer = torch.optim.AdamW([p])
    assert micro_batch.local_numel(p) == 100
    assert micro_batch.pending_state_bytes(optimizer) == 12 * 100  # not 12 * 400
