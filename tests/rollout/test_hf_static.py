"""The hf engine on a static cache at fixed shapes (--hf-compile): the same keys give the
same completions and log-probs as the dynamic cache, with pods's decode loop and with
generate; the shapes are fixed; auto is on for a CUDA GPU only, and never under FSDP2.
(The compile itself happens on CUDA only: measured by benchmarks/gpu/check.py; pods's loop is
compared with generate in detail in test_hf_decode.py.)"""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.config import from_dict
from pods.rollout import (
    EngineSpec,
    SamplingRequest,
    generate,
    make_engine,
    resolve_engine,
    sample_keys,
)
from pods.rollout.hf import static_cache
from pods.rollout.hf_decode import StaticDecoding, fixed_shape

PROMPTS = ["1+2=", "10+20=", "5+5=", "123+4="]


def load(model_dir):
    return (AutoModelForCausalLM.from_pretrained(model_dir).eval(),
            AutoTokenizer.from_pretrained(model_dir, padding_side="left"))


@pytest.mark.parametrize("decode", ["loop", "generate"])
def test_a_static_cache_gives_the_dynamic_caches_completions(tiny_model_dir, decode):
    model, tokenizer = load(tiny_model_dir)
    request = SamplingRequest(PROMPTS, 5, 1.0, 8, keys=sample_keys(3, 1, torch.arange(4)))
    dynamic = generate(model, tokenizer, request, chunk=8)
    static = generate(model, tokenizer, request, chunk=8,
                      static=StaticDecoding(24, decode))  # 3 chunks: 8 + 8 + 4 rows, the
    # last filled to 8
    assert torch.equal(static.completion_ids, dynamic.completion_ids)
    assert static.texts == dynamic.texts and len(set(dynamic.texts)) > 5
    assert torch.equal(static.prompt_ids, dynamic.prompt_ids)  # the prompts' own padding
    torch.testing.assert_close(static.logprobs, dynamic.logprobs, rtol=0, atol=1e-5)
    greedy = SamplingRequest(PROMPTS, 1, 0.0, 8, keys=sample_keys(3, 1, torch.arange(4)))
    out = generate(model, tokenizer, greedy, chunk=3, static=StaticDecoding(24, decode))
    assert out.texts == generate(model, tokenizer, greedy, chunk=3).texts
    assert out.logprobs is None  # greedy: none, as the dynamic cache and vLLM


def test_fixed_shapes_pad_columns_on_the_left_and_fill_rows_with_the_first():
    ids = torch.tensor([[0, 5, 6], [7, 8, 9]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    keys = torch.tensor([11, 12])
    ids4, mask4, keys4 = fixed_shape(ids, mask, keys, rows=4, width=5, pad_id=0)
    assert ids4.tolist() == [[0, 0, 0, 5, 6], [0, 0, 7, 8, 9], [0, 0, 0, 5, 6], [0, 0, 0, 5, 6]]
    assert mask4.tolist() == [[0, 0, 0, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 1, 1], [0, 0, 0, 1, 1]]
    assert keys4.tolist() == [11, 12, 11, 11]
    wide, _, _ = fixed_shape(ids, mask, keys, rows=2, width=2, pad_id=0)  # never cut
    assert torch.equal(wide, ids)


def test_auto_is_on_for_a_cuda_gpu_only(tiny_model_dir):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert static_cache("auto", cuda, sharded=False)
    assert not static_cache("auto", cuda, sharded=True)  # FSDP2 keeps the dynamic path
    assert not static_cache("auto", cpu, sharded=False)
    assert static_cache("on", cpu, sharded=False) and not static_cache("off", cuda, False)
    model, tokenizer = load(tiny_model_dir)
    config = from_dict({"engine": "hf", "hf_compile": "on", "max_prompt_tokens": 20,
                        "max_new_tokens": 6})
    engine = make_engine(EngineSpec(config.rollout, cpu, max_model_len=26), model, tokenizer)
    assert engine.static.limit == 20 and engine.static.decode == "generate"  # the default
    config = from_dict({"engine": "hf", "hf_compile": "on", "hf_decode": "loop"})
    assert make_engine(EngineSpec(config.rollout, cpu), model, tokenizer).static.decode == \
        "loop"
    config = from_dict({"engine": "hf"})
    assert make_engine(EngineSpec(config.rollout, cpu), model, tokenizer).static is None


@pytest.mark.parametrize("engine", ["hf", "auto"])
def test_hf_compile_on_is_refused_under_fsdp(engine):
    """Under FSDP2 every forward pass gathers the shards: no static cache or CUDA graphs.
    "on" says so before any model loads; auto keeps the dynamic cache there."""
    cuda = torch.device("cuda")
    on = from_dict({"engine": engine, "hf_compile": "on"}).rollout
    with pytest.raises(ValueError, match="hf_compile on .* FSDP2"):
        resolve_engine(on, cuda, sharded=True)
    assert not static_cache("on", cuda, sharded=True)
    assert resolve_engine(on, cuda, sharded=False) in ("hf", "vllm")
    auto = from_dict({"engine": engine, "hf_compile": "auto"}).rollout
    assert resolve_engine(auto, cuda, sharded=True) == "hf"
