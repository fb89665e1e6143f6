"""The hf engine on a static cache at fixed shapes (--hf-compile): the same keys give the
same completions and log-probs as the dynamic cache; the shapes are fixed; auto is on for
a CUDA GPU only. (The compile itself happens on CUDA only: measured by benchmarks/gpu.py.)"""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.config import from_dict
from pods.rollout import EngineSpec, SamplingRequest, generate, make_engine, sample_keys
from pods.rollout.hf import fixed_shape, static_cache

PROMPTS = ["1+2=", "10+20=", "5+5=", "123+4="]


def load(model_dir):
    return (AutoModelForCausalLM.from_pretrained(model_dir).eval(),
            AutoTokenizer.from_pretrained(model_dir, padding_side="left"))


def test_a_static_cache_gives_the_dynamic_caches_completions(tiny_model_dir):
    model, tokenizer = load(tiny_model_dir)
    request = SamplingRequest(PROMPTS, 5, 1.0, 8, keys=sample_keys(3, 1, torch.arange(4)))
    dynamic = generate(model, tokenizer, request, chunk=8)
    static = generate(model, tokenizer, request, chunk=8, static_width=24)  # 3 chunks:
    # 8 + 8 + 4 rows, the last filled to 8
    assert torch.equal(static.completion_ids, dynamic.completion_ids)
    assert static.texts == dynamic.texts and len(set(dynamic.texts)) > 5
    assert torch.equal(static.prompt_ids, dynamic.prompt_ids)  # the prompts' own padding
    torch.testing.assert_close(static.logprobs, dynamic.logprobs, rtol=0, atol=1e-5)
    greedy = SamplingRequest(PROMPTS, 1, 0.0, 8, keys=sample_keys(3, 1, torch.arange(4)))
    assert generate(model, tokenizer, greedy, chunk=3, static_width=24).texts == \
        generate(model, tokenizer, greedy, chunk=3).texts


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
    assert engine.static_width == 20  # the run's prompt limit
    config = from_dict({"engine": "hf"})
    assert make_engine(EngineSpec(config.rollout, cpu), model, tokenizer).static_width is None
