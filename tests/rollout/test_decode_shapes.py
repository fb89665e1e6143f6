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
