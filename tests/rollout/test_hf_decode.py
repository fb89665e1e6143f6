"""pods's decode loop (--hf-decode loop) against transformers' generate on the same static
cache and against the dynamic cache: the same tokens and log-probs for the same keys
(sampled and greedy, prompts of several lengths, eos in the middle, a last chunk filled
with copies); one cache per shape, kept across calls; bucketed prompt widths; an early
stop soon after every row has ended; one traced graph a step (on the CPU, without the
compile, which runs on CUDA only)."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.models.cache import compile_cache
from pods.rollout import SamplingRequest, generate, sample_keys
from pods.rollout.decode import CHECK_EVERY, DecodeLoop, Decoding
from pods.rollout.hf_decode import StaticDecoding, bucket_width

PROMPTS = ["1+2=", "10+20=", "5+5=", "123+4=", "99999+1=", "7="]  # 2 to 8 tokens


@pytest.fixture(scope="module")
def noisy(tiny_model_dir):
    """The tiny model with its weights shaken (seeded), so that greedy decoding varies by
    prompt and ends some rows with eos in the middle."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.5)
    return model, AutoTokenizer.from_pretrained(tiny_model_dir, padding_side="left")


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_the_loop_gives_generates_tokens_and_logprobs(noisy, temperature):
    model, tokenizer = noisy
    request = SamplingRequest(PROMPTS, 3, temperature, 12, keys=sample_keys(5, 2, torch.arange(6)))
    # 18 rows in chunks of 5: the last chunk's 3 rows filled to 5 with copies of its first
    loop = generate(model, tokenizer, request, chunk=5, static=StaticDecoding(None, "loop"))
    on_generate = generate(model, tokenizer, request, chunk=5,
                           static=StaticDecoding(None, "generate"))
    dynamic = generate(model, tokenizer, request, chunk=5)
    assert torch.equal(loop.completion_ids, on_generate.completion_ids)
    assert torch.equal(loop.completion_ids, dynamic.completion_ids)
    lengths = loop.completion_mask.sum(1)
    assert loop.finished.any() and (lengths < loop.completion_ids.shape[1]).any()  # eos
    # in the middle, and padding after it
    assert (loop.completion_ids[~loop.completion_mask.bool()] == tokenizer.pad_token_id).all()
    assert len(set(loop.texts)) > 4
    if temperature == 0:
        assert loop.logprobs is None and on_generate.logprobs is None
        return
    torch.testing.assert_close(loop.logprobs, on_generate.logprobs, rtol=0, atol=1e-6)
    torch.testing.assert_close(loop.logprobs, dynamic.logprobs, rtol=0, atol=1e-5)


@pytest.mark.parametrize("decode", ["loop", "generate"])
def test_each_shape_keeps_one_cache_across_calls(noisy, decode):
    """Prompts are padded to their call's longest, rounded up to 64 columns (not to the
    prompt limit), and each shape's cache is built once, then emptied and reused."""
    model, tokenizer = noisy
    static = StaticDecoding(512, decode)
    request = SamplingRequest(PROMPTS[:2], 2, 1.0, 6, keys=sample_keys(1, 0, torch.arange(2)))
    first = generate(model, tokenizer, request, chunk=4, static=static)
    (shape, kept), = static.kept.items()
    assert shape[1:4] == (4, 64, 6)  # rows, prompt columns (the longest is 6), new tokens
    cache = kept.cache if decode == "loop" else kept
    again = generate(model, tokenizer, request, chunk=4, static=static)
    assert static.kept[shape] is kept and (kept.cache if decode == "loop" else kept) is cache
    assert torch.equal(again.completion_ids, first.completion_ids)  # emptied in between
    assert cache.layers[0].keys.shape[2] == 64 + 6 - 1  # generate used the kept cache
    long = SamplingRequest(["1+" * 40 + "1="], 4, 1.0, 6, keys=torch.tensor([3]))  # 82
    generate(model, tokenizer, long, chunk=4, static=static)
    assert sorted(s[2] for s in static.kept) == [64, 128]


def test_prompt_widths_are_bucketed():
    assert [bucket_width(n, 512) for n in (1, 20, 64, 65, 200)] == [64, 64, 64, 128, 256]
    assert bucket_width(70, 100) == 100 and bucket_width(120, 100) == 120  # never cut
    assert bucket_width(5, None) == 64


def test_the_loop_stops_soon_after_every_row_has_ended(noisy):
    """Every row ends at its first token (eos is made the token greedy decoding draws
    first): the loop runs CHECK_EVERY steps, not 40, and returns one column."""
    model, tokenizer = noisy
    ids = tokenizer(["7="] * 2, return_tensors="pt")["input_ids"]
    mask = torch.ones_like(ids)
    with torch.no_grad():
        first = model(input_ids=ids).logits[:, -1].argmax(-1)  # [2]
    assert first[0] == first[1]
    loop = DecodeLoop(model, 2, ids.shape[1], Decoding(40, tokenizer.pad_token_id, int(first[0])))
    steps = []
    step = loop.step
    loop.step = lambda: (steps.append(1), step())
    with torch.no_grad():
        completion, _ = loop.run(ids, mask, torch.tensor([1, 2]), 0.0)
    assert len(steps) == CHECK_EVERY and completion.tolist() == [[int(first[0])]] * 2


def test_a_step_is_one_graph_and_greedy_shares_it(noisy):
    """Traced by torch.compile with fullgraph (no graph break), and the sampled and the
    greedy calls of a shape run the same graph: the temperature is a tensor."""
    from torch._dynamo.utils import counters

    model, tokenizer = noisy
    enc = tokenizer(PROMPTS[:4], return_tensors="pt", padding=True)
    ids, mask, keys = enc["input_ids"], enc["attention_mask"], torch.arange(4)
    how = Decoding(6, tokenizer.pad_token_id, tokenizer.eos_token_id)
    eager = DecodeLoop(model, 4, ids.shape[1], how)
    traced = DecodeLoop(model, 4, ids.shape[1], how)
    torch._dynamo.reset()
    counters.clear()
    traced.step = torch.compile(traced._step, backend="eager", fullgraph=True, dynamic=False)
    with torch.no_grad():
        for temperature in (1.0, 0.0):
            want, want_logprobs = eager.run(ids, mask, keys, temperature)
            got, got_logprobs = traced.run(ids, mask, keys, temperature)
            assert torch.equal(got, want) and torch.equal(got_logprobs, want_logprobs)
    assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()


def test_compiled_kernels_go_to_the_pods_cache_unless_set(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/elsewhere")  # restored after the test
    assert compile_cache() == "/elsewhere"  # the user's own
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setenv("PODS_CACHE", str(tmp_path))
    assert compile_cache() == str(tmp_path / "compile")


@pytest.mark.gpu  # the static path is compiled to CUDA graphs there
@pytest.mark.parametrize("decode", ["loop", "generate"])
def test_on_cuda_each_shape_is_recorded_once_and_replayed(noisy, decode, monkeypatch):
    """Compiled, a shape's CUDA graphs are recorded at its first call and replayed at the
    later ones (the cache is kept: same addresses), sampled and greedy calls alike; no
    graph is skipped; the log-probs are the model's own."""
    import copy

    from torch._dynamo.utils import counters
    from torch._inductor import cudagraph_trees

    from pods.models.logprobs import completion_logprobs

    model, tokenizer = noisy
    model = copy.deepcopy(model).cuda()
    recorded = []
    record = cudagraph_trees.CUDAGraphNode.__init__

    def counted(self, *args, **kwargs):
        recorded.append(decode)
        record(self, *args, **kwargs)

    monkeypatch.setattr(cudagraph_trees.CUDAGraphNode, "__init__", counted)
    counters.clear()
    static = StaticDecoding(None, decode)
    keys = sample_keys(5, 2, torch.arange(6))
    sampled = SamplingRequest(PROMPTS, 2, 1.0, 12, keys=keys)
    first = generate(model, tokenizer, sampled, chunk=12, static=static)
    after_first = len(recorded)
    again = generate(model, tokenizer, sampled, chunk=12, static=static)
    generate(model, tokenizer, SamplingRequest(PROMPTS, 2, 0.0, 12, keys=keys), chunk=12,
             static=static)
    assert after_first >= 1 and len(recorded) == after_first  # replayed, not re-recorded
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert torch.equal(again.completion_ids, first.completion_ids)
    with torch.no_grad():
        want = completion_logprobs(model, first.prompt_ids, first.prompt_mask,
                                   first.completion_ids, first.completion_mask, 1.0)
    mask = first.completion_mask.bool()
    assert (first.logprobs - want).abs()[mask].max() < 1e-4
