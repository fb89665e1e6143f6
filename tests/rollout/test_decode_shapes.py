"""The hf engine's static shapes are bounded and none decodes eagerly for want of dynamo's
cache (pods.rollout.decode.own_code, pods.rollout.hf_decode.StaticDecoding): the 9th and
20th shapes still get their graph; shapes an update does not need are dropped before it;
sliding-window models decode on the dynamic cache. On the CPU, torch.compile's eager
backend counts graphs as the CUDA one does."""

import gc
import weakref

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, MistralConfig

from pods.rollout import SamplingRequest, generate
from pods.rollout.decode import DecodeLoop, Decoding
from pods.rollout.hf_decode import StaticDecoding

EAGER = {"backend": "eager"}


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_dir, padding_side="left")


def run(loop: DecodeLoop, rows: int, width: int, tokenizer):
    ids = torch.full((rows, width), 5)
    with torch.no_grad():
        loop.run(ids, torch.ones_like(ids), torch.arange(rows), 1.0)


def test_the_9th_and_20th_shapes_still_decode_compiled(tiny):
    model, tokenizer = tiny
    how = Decoding(3, tokenizer.pad_token_id, tokenizer.eos_token_id)
    torch._dynamo.reset()
    loops = []
    for width in range(1, 21):  # 20 shapes: more than dynamo's recompile_limit (8)
        loop = DecodeLoop(model, 2, width, how, compiled=EAGER)
        run(loop, 2, width, tokenizer)
        loops.append(loop)
    assert [loop.graphs() for loop in loops] == [1] * 20
    # the control: one code object for every shape, as before, runs the 9th eagerly
    torch._dynamo.reset()
    shared = []
    for width in range(1, 11):
        loop = DecodeLoop(model, 2, width, how)
        loop.step = torch.compile(loop._step, dynamic=False, **EAGER)
        run(loop, 2, width, tokenizer)
        shared.append(loop)
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    assert len(_debug_get_cache_entry_list(DecodeLoop._step.__code__)) == 8  # the limit
    torch._dynamo.reset()


def test_a_shape_that_runs_eagerly_is_warned_and_counted(tiny, monkeypatch):
    model, tokenizer = tiny
    static = StaticDecoding(None, "loop", compiled=EAGER)
    monkeypatch.setattr(DecodeLoop, "graphs", lambda self: 0)  # as past dynamo's limit
    request = SamplingRequest(["1+2="], 2, 1.0, 3, keys=torch.tensor([1]))
    with pytest.warns(RuntimeWarning, match="ran eagerly .*hf/decode_fallbacks"):
        generate(model, tokenizer, request, chunk=2, static=static)
    assert static.fallbacks == 1
    from pods.rollout.hf import HFEngine

    assert HFEngine(model, tokenizer, 2, static=static).metrics == {"hf/decode_fallbacks": 1.0}
    assert HFEngine(model, tokenizer, 2).metrics == {}  # no static cache: no such record
    torch._dynamo.reset()


def test_shapes_are_bounded_and_the_update_gets_what_the_step_did_not_use(tiny,
                                                                          monkeypatch):
    import pods.rollout.hf_decode as hf_decode

    model, tokenizer = tiny
    monkeypatch.setattr(hf_decode, "MAX_KEPT", 3)
    static = StaticDecoding(None, "loop", compiled=False)

    def sample(rows: int):
        request = SamplingRequest(["1+2="] * rows, 1, 1.0, 3, keys=torch.arange(rows))
        generate(model, tokenizer, request, chunk=rows, static=static)

    for rows in (1, 2, 3, 4):  # four shapes, at most three kept: the oldest went
        sample(rows)
    assert [shape[1] for shape in static.kept] == [2, 3, 4]
    evaluation = weakref.ref(static.kept[next(s for s in static.kept if s[1] == 4)].cache)
    static.park()  # before the first update: all were used since (none before)
    sample(2)  # the next step samples at 2 rows only
    assert static.park() == 2  # the 3- and 4-row shapes (an evaluation's) go
    gc.collect()
    assert evaluation() is None  # their static cache is freed
    assert [shape[1] for shape in static.kept] == [2]


def test_the_engine_parks_its_shapes_while_the_update_runs(tiny):
    from pods.rollout.hf import HFEngine

    model, tokenizer = tiny
    static = StaticDecoding(None, "loop", compiled=False)
    engine = HFEngine(model, tokenizer, chunk=4, static=static)
    engine.generate(["1+2="], 2, 1.0, 3, torch.tensor([1]))
    static.used = set()  # as if the step had sampled at another shape
    with engine.asleep():
        assert not static.kept


def test_sliding_window_models_decode_on_the_dynamic_cache():
    from pods.config.step import RolloutConfig
    from pods.rollout import EngineSpec
    from pods.rollout.hf import build

    config = MistralConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                           num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                           sliding_window=4096)
    model = AutoModelForCausalLM.from_config(config)
    spec = EngineSpec(RolloutConfig(hf_compile="on"), torch.device("cpu"))
    with pytest.warns(RuntimeWarning, match="sliding window of 4096 tokens would recompile"):
        engine = build(spec, model, tokenizer=None)
    assert engine.static is None


def raising_backend(graph, example_inputs):
    """A compiler that fails as inductor did on torch 2.11's CUDA backend."""
    raise NotImplementedError("NYI TritonSplitDimKernel reductions")


def test_a_step_that_fails_to_compile_decodes_with_generate_from_then_on(tiny):
    """The loop's compile raises (BackendCompilerFailed): the shape decodes with generate
    on the static cache, the same tokens, warned once and counted; the next call does not
    try the compile again, and the run goes on."""
    model, tokenizer = tiny
    torch._dynamo.reset()
    broken = StaticDecoding(None, "loop", compiled={"backend": raising_backend})
    request = SamplingRequest(["1+2=", "10+20="], 3, 1.0, 6, keys=torch.tensor([4, 5]))
    with pytest.warns(RuntimeWarning, match="failed to compile.*BackendCompilerFailed.*NYI "
                                            "TritonSplitDimKernel.*generate on the static"):
        got = generate(model, tokenizer, request, chunk=6, static=broken)
    want = generate(model, tokenizer, request, chunk=6, static=StaticDecoding(None, "generate"))
    assert torch.equal(got.completion_ids, want.completion_ids)
    torch.testing.assert_close(got.logprobs, want.logprobs, rtol=0, atol=1e-6)
    assert broken.fallbacks == 1 and [s[0] for s in broken.kept] == ["generate"]
    import warnings as w

    with w.catch_warnings():
        w.simplefilter("error")  # warned once: a second call neither warns nor compiles
        again = generate(model, tokenizer, request, chunk=6, static=broken)
    assert torch.equal(again.completion_ids, want.completion_ids) and broken.fallbacks == 1
    torch._dynamo.reset()


def test_a_static_generate_that_fails_to_compile_decodes_on_the_dynamic_cache(tiny,
                                                                              monkeypatch):
    import pods.rollout.hf_decode as hf_decode

    model, tokenizer = tiny
    plain = hf_decode.run_generate

    def failing(model, ids, mask, keys, how, cache=None):
        if cache is not None:  # transformers' compiled forward on the static cache
            torch.compile(lambda x: x + 1, backend=raising_backend)(ids)
        return plain(model, ids, mask, keys, how)

    monkeypatch.setattr(hf_decode, "run_generate", failing)
    static = StaticDecoding(None, "generate")
    request = SamplingRequest(["1+2="], 4, 1.0, 5, keys=torch.tensor([9]))
    with pytest.warns(RuntimeWarning, match="'generate' decoding failed.*dynamic cache"):
        got = generate(model, tokenizer, request, chunk=4, static=static)
    want = generate(model, tokenizer, request, chunk=4)  # the dynamic cache
    assert torch.equal(got.completion_ids, want.completion_ids) and static.fallbacks == 1


def test_a_cuda_graph_capture_error_is_a_compile_failure(tiny, monkeypatch):
    """torch reports a failed capture as a plain RuntimeError: read as a compile failure;
    any other RuntimeError of the loop (a real bug, out of memory) is raised."""
    model, tokenizer = tiny
    request = SamplingRequest(["1+2="], 2, 1.0, 3, keys=torch.tensor([1]))
    for message, falls_back in [("CUDA error: operation not permitted when stream is "
                                 "capturing", True), ("CUDA out of memory", False)]:
        def fail(self, *args, message=message):
            raise RuntimeError(message)

        monkeypatch.setattr(DecodeLoop, "run", fail)
        static = StaticDecoding(None, "loop", compiled=False)
        if falls_back:
            with pytest.warns(RuntimeWarning, match="CudaGraphError"):
                generate(model, tokenizer, request, chunk=2, static=static)
            assert static.fallbacks == 1
        else:
            with pytest.raises(RuntimeError, match="out of memory"):
                generate(model, tokenizer, request, chunk=2, static=static)


SCANS = ("cumsum", "cumprod", "cummax", "sort", "argsort", "searchsorted", "multinomial",
         "topk", "bucketize")


def test_the_compiled_decode_step_has_no_scan_or_sort(tiny):
    """The graph dynamo hands its backend for one decoding step (the model's forward, the
    keyed sampler, the bookkeeping) holds no cumulative scan, sort, search or multinomial
    draw: ops that inductor on torch 2.11's CUDA backend could not fuse with the argmax."""
    model, tokenizer = tiny
    graphs = []

    def recording(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()
    loop = DecodeLoop(model, 3, 4, Decoding(4, tokenizer.pad_token_id, tokenizer.eos_token_id),
                      compiled={"backend": recording, "fullgraph": True})
    run(loop, 3, 4, tokenizer)
    assert len(graphs) == 1
    ops = [str(node.target) for node in graphs[0].graph.nodes
           if node.op in ("call_function", "call_method")]
    assert any("argmax" in op for op in ops) and any("log_softmax" in op for op in ops)
    assert [op for op in ops if any(scan in op for scan in SCANS)] == []
    torch._dynamo.reset()
