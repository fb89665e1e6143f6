"""The update's micro-batch chosen from free device memory (no --micro-batch-size): the
estimate's arithmetic with worked numbers, and every row in one pass off CUDA."""

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config

from pods.train import micro_batch
from pods.train.micro_batch import auto_micro_batch, fitting_rows, token_bytes

GiB = 2**30


def test_a_tokens_activation_bytes_follow_the_layers_and_the_dtypes():
    # Qwen2.5-1.5B: 28 layers, hidden 1536, MLP 8960; bf16 throughout:
    # (8 + 2*2 + 4*2 + 2*2) * 1536 + 4*2 * 8960 = 108,544 bytes a layer, 3,039,232 a token
    assert token_bytes(28, 1536, 8960, 2, checkpointed=False) == 28 * 108_544 == 3_039_232
    # float32: (8 + 8 + 16 + 8) * 1536 + 16 * 8960 (the norms' float32 input is no larger)
    assert token_bytes(28, 1536, 8960, 4, checkpointed=False) == 28 * 204_800
    # checkpointed: each layer's input (2 * 1536) and one layer's whole set
    assert token_bytes(28, 1536, 8960, 2, checkpointed=True) == 28 * 3072 + 108_544


def test_under_autocast_the_float32_residual_and_each_projections_cast_count():
    """bf16 autocast over float32 weights: float32 norms, and a bf16 cast of the normalised
    input for each projection. One H200 measured 2.94 MiB a token (2026-11-28, Qwen2.5-1.5B's
    architecture, 64 rows x 288 tokens in one pass, no checkpointing: 78.7 GiB peak less
    22.9 GiB of state and 2.9 GiB of casts, docs/guides/gpu.md): the estimate is above it,
    by less than a fifth."""
    MiB = 2**20
    estimate = token_bytes(28, 1536, 8960, 2, checkpointed=False, residual_bytes=4)
    assert estimate == 28 * ((8 + 8 + 8 + 10) * 1536 + 8 * 8960) == 3_469_312  # 3.31 MiB
    measured = 52.9 * GiB / (64 * 288)
    assert round(measured / MiB, 2) == 2.94
    assert measured < estimate < 1.2 * measured
    assert token_bytes(28, 1536, 8960, 2, True, 4) == 28 * 4 * 1536 + 123_904


def saved_bytes(model, tokens: int, autocast: bool) -> int:
    """Bytes of the tensors autograd keeps for the backward of a forward of ``tokens``
    tokens through ``model``'s decoder (each storage once; the weights and their casts
    are the same at any length, so differences over lengths leave them out)."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    ids = torch.randint(0, 100, (2, tokens // 2), generator=torch.Generator().manual_seed(0))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        model.model(input_ids=ids)
    return sum(kept.values())


@pytest.mark.parametrize("weights,autocast", [(torch.bfloat16, False), (torch.float32, True),
                                              (torch.float32, False)])
def test_the_estimate_covers_what_autograd_keeps_a_token_and_layer(weights, autocast):
    """A Qwen2 decoder (grouped-query attention, gated MLP) on a CPU: bytes a token and a
    layer, from two lengths and two depths, at most the estimate and more than 0.9 of it
    (the estimate bounds the keys and values by full width). It needs SDPA's fused kernel,
    as on a GPU: torch 2.11 and 2.13 take it on a CPU too, while torch 2.6's CPU took the
    math path for grouped-query attention, keeping [tokens, tokens] scores."""
    hidden, mlp = 128, 768

    def per_token(layers: int) -> float:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(Qwen2Config(
            vocab_size=128, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
            num_attention_heads=4, num_key_value_heads=2), dtype=weights).train()
        return (saved_bytes(model, 512, autocast) - saved_bytes(model, 256, autocast)) / 256

    measured = (per_token(4) - per_token(2)) / 2  # a layer's bytes a token
    compute = 2 if weights == torch.bfloat16 or autocast else 4
    estimate = token_bytes(1, hidden, mlp, compute, False, weights.itemsize)
    assert 0.9 * estimate < measured <= estimate, (measured, estimate)


def test_the_rows_that_fit_beside_the_weights_state_and_the_head():
    # 100 GiB free: 80 GiB usable; 1.5e9 trained weights * 12 = 18e9 bytes; head 1.25 GiB;
    # rows of 1,024 tokens at 3,039,232 bytes a token = 3,112,173,568 bytes a row
    room = 80 * GiB - 18_000_000_000 - int(1.25 * GiB)
    assert room // 3_112_173_568 == 21
    state = 1_500_000_000 * 12
    assert fitting_rows(100 * GiB, state, 3_039_232, 1024, 64, int(1.25 * GiB)) == 21
    assert fitting_rows(100 * GiB, state, 3_039_232, 1024, 16, int(1.25 * GiB)) == 16
    assert fitting_rows(GiB, state, 3_039_232, 1024, 64, 0) == 1  # at least one row


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


def test_checkpointing_pays_where_the_passes_it_saves_cost_more_than_its_recompute():
    """16 rows of 200 + 512 tokens (the paper's GSM8K shape) = 11,392 positions; the
    recompute costs a third of them, 3,797 tokens' compute; a pass 1,024."""
    tokens, roomy = 11_392, 10**6
    assert micro_batch.RECOMPUTE * tokens > 3_797
    assert not micro_batch.checkpointing_pays(tokens, tokens, roomy, fixed=False)  # 1 pass
    # 3,000 positions a pass without it: 4 passes against 1, 3 x 1,024 = 3,072 < 3,797
    assert not micro_batch.checkpointing_pays(tokens, 3_000, roomy, fixed=False)
    # 2,000: 6 passes against 1, 5,120 > 3,797
    assert micro_batch.checkpointing_pays(tokens, 2_000, roomy, fixed=False)
    # with it, 6,000 a pass (2 passes): 4 saved, 4,096 > 3,797; 5,000 (3 passes): 3,072
    assert micro_batch.checkpointing_pays(tokens, 2_000, 6_000, fixed=False)
    assert not micro_batch.checkpointing_pays(tokens, 2_000, 5_000, fixed=False)
    # a pass of fixed size (a flag's, or every row off CUDA): on where it does not fit
    assert micro_batch.checkpointing_pays(4_000, 3_999, roomy, fixed=True)
    assert not micro_batch.checkpointing_pays(4_000, 4_000, roomy, fixed=True)


def test_a_cpu_pass_fits_in_the_machines_available_memory(tiny_model_dir, tmp_path,
                                                            monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25165824 kB\nMemFree:  1 kB\n"
                       "MemAvailable:   20971520 kB\n")
    assert micro_batch.host_available_bytes(str(meminfo)) == 20 * GiB
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # four processes of a run share it
    assert micro_batch.host_available_bytes(str(meminfo)) == 5 * GiB
    assert micro_batch.host_available_bytes(str(tmp_path / "none")) is None
    monkeypatch.setattr(micro_batch, "host_available_bytes", lambda: 5 * GiB)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    c, trained = model.config, sum(p.numel() for p in model.parameters())
    per_token = {on: token_bytes(c.num_hidden_layers, c.hidden_size, c.intermediate_size, 4,
                                 on) for on in (False, True)}
    room = 5 * GiB * micro_batch.SAFETY - 12 * trained - 2**25 * 10
    cpu = torch.device("cpu")
    assert micro_batch.fitting_tokens(model, 4, cpu) == {
        on: int(room // per_token[on]) for on in (False, True)}
    assert micro_batch.fitting_tokens(model, 4, torch.device("meta")) is None  # unknown
