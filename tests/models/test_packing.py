"""The packed layouts give the padded layout's log-probs and gradients (pods.models.packing,
pods.models.packed_attention): each row whole, and each prompt once a group."""

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

import pods.models.logprobs as logprobs
from pods.models.checkpointing import set_checkpointing
from pods.models.logprobs import completion_logprobs, packed_logprobs
from pods.models.packed_attention import NAME, packed_attention, refusal
from pods.models.packing import pack, prompt_groups

LAYOUTS = {"packed": False, "shared_prompt": True}


def rows(vocabulary: int, seed: int = 0):
    """Six rows from three prompts: A (3 tokens) kept thrice, B (5) twice, C (4) once;
    completions of 3, 7, 1, 5, 0 (a padding row) and 7 tokens."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, vocabulary, (6, 5), generator=g)
    prompt_mask = torch.ones(6, 5, dtype=torch.long)
    prompt[1] = prompt[2] = prompt[0]
    prompt_mask[:3, :2] = 0
    prompt[:3, :2] = 0
    prompt[4] = prompt[3]
    prompt_mask[5, :1] = 0
    prompt[5, :1] = 0
    completion = torch.randint(3, vocabulary, (6, 7), generator=g)
    completion_mask = (torch.arange(7) < torch.tensor([3, 7, 1, 5, 0, 7])[:, None]).long()
    return prompt, prompt_mask, completion * completion_mask, completion_mask


def llama(**changes):
    """SmolLM2's architecture (Llama, grouped-query attention), small and random."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=48, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                         max_position_embeddings=64, tie_word_embeddings=True, **changes)
    return AutoModelForCausalLM.from_config(config).train()


def test_the_stream_holds_each_prompt_once_with_generates_positions():
    prompt = torch.tensor([[0, 7, 8], [0, 7, 8], [5, 6, 9]])
    prompt_mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1]])
    completion = torch.tensor([[1, 2], [3, 0], [4, 0]])
    completion_mask = torch.tensor([[1, 1], [1, 0], [1, 0]])
    shared = pack(prompt, prompt_mask, completion, completion_mask, share=True)
    # prompts 7 8 | 5 6 9, then completions 1 2 | 3 | 4
    assert shared.input_ids.tolist() == [[7, 8, 5, 6, 9, 1, 2, 3, 4]]
    assert shared.position_ids.tolist() == [[0, 1, 0, 1, 2, 2, 3, 2, 3]]
    # token 1 is predicted by the last prompt token (stream 1), 2 by 1 (stream 5), 3 by
    # the shared prompt's last token again (1), 4 by its own prompt's (4)
    assert shared.predictors.tolist() == [1, 5, 1, 4]
    assert shared.row_group.tolist() == [0, 0, 1]
    whole = pack(prompt, prompt_mask, completion, completion_mask, share=False)
    assert whole.input_ids.tolist() == [[7, 8, 7, 8, 5, 6, 9, 1, 2, 3, 4]]
    assert whole.predictors.tolist() == [1, 7, 3, 6]


def test_rows_share_a_group_exactly_when_their_prompts_are_the_same_tokens():
    prompt, prompt_mask, _, _ = rows(50)
    assert prompt_groups(prompt, prompt_mask, share=True).tolist() == [0, 0, 0, 1, 1, 2]
    assert prompt_groups(prompt, prompt_mask, share=False).tolist() == list(range(6))
    prompt_mask[0, 2] = 0  # the same ids, one token fewer: another prompt
    assert prompt_groups(prompt, prompt_mask, share=True).tolist() == [0, 1, 1, 2, 2, 3]


def logps_and_grads(model, data, layout: str | None, temperature: float = 0.7):
    model.zero_grad()
    mask = data[3]
    weights = torch.linspace(-1, 1, mask.shape[1]) * torch.arange(1, mask.shape[0] + 1)[:, None]
    if layout is None:
        logp = completion_logprobs(model, *data, temperature)
        (logp * mask * weights).sum().backward()  # tokens weighted unequally
    else:  # the backward too: gradient checkpointing recomputes the attention there
        with packed_attention(model):
            logp = packed_logprobs(model, pack(*data, share=LAYOUTS[layout]), data[2], mask,
                                   temperature)
            (logp * mask * weights).sum().backward()
    return logp * mask, {k: p.grad.clone() for k, p in model.named_parameters()
                         if p.grad is not None}


def assert_same(model, data, layout, tolerance=None):
    tolerance = tolerance or dict(atol=1e-5, rtol=1e-5)
    want, want_grads = logps_and_grads(model, data, None)
    got, got_grads = logps_and_grads(model, data, layout)
    torch.testing.assert_close(got, want, **tolerance)
    assert got_grads.keys() == want_grads.keys()
    for name, grad in want_grads.items():
        scale = grad.abs().max().clamp(min=1e-12)
        torch.testing.assert_close(got_grads[name] / scale, grad / scale, **tolerance, msg=name)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", ["tiny", "smollm2-like", "full-logits", "checkpointed",
                                  "chunked-head"])
def test_log_probs_and_gradients_equal_padded(tiny_model_dir, monkeypatch, layout, case):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).train() if case == "tiny" \
        else llama()
    if case == "full-logits":  # the model's own logits (soft-capped heads use them)
        monkeypatch.setattr(logprobs, "output_head", lambda model: None)
    if case == "checkpointed":
        set_checkpointing(model, True)
    if case == "chunked-head":  # two tokens a chunk
        monkeypatch.setattr(logprobs, "HEAD_CHUNK", 2 * model.config.vocab_size)
    assert_same(model, rows(model.config.vocab_size), layout)
    assert model.config._attn_implementation != NAME  # given back


def test_lora_and_its_base_equal_padded():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(llama(), LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                               target_modules=["q_proj", "v_proj"]))
    data = rows(64)
    assert_same(model, data, "shared_prompt")
    with model.disable_adapter(), torch.no_grad():  # the KL reference of a LoRA run
        want = completion_logprobs(model, *data, 0.7)
        with packed_attention(model):
            got = packed_logprobs(model, pack(*data, share=True), data[2], data[3], 0.7)
    torch.testing.assert_close(got * data[3], want * data[3], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(want, completion_logprobs(model, *data, 0.7))  # the adapter


def test_bf16_compute_is_within_bf16_rounding_of_padded():
    model = llama()
    with torch.autocast("cpu", torch.bfloat16):
        assert_same(model, rows(64), "shared_prompt", dict(atol=3e-2, rtol=3e-2))


def test_a_micro_batch_of_padding_rows_still_reaches_every_parameter():
    model = llama()
    prompt, prompt_mask, completion, completion_mask = rows(64)
    zero = torch.zeros_like(completion_mask)
    packing = pack(prompt, prompt_mask, completion, zero, share=True)
    assert packing.tokens == 3  # the first row's prompt alone
    with packed_attention(model):
        logp = packed_logprobs(model, packing, completion, zero, 1.0)
        assert (logp == 0).all()
        logp.sum().backward()  # DDP and FSDP need every rank's backward through the model
    assert all(p.grad is not None for p in model.parameters())


def test_a_wrong_mask_is_caught(monkeypatch):
    """The comparison can fail: with completions allowed to see other rows, it does."""
    import pods.models.packing as packing

    model = llama()
    real = packing.Packing.masks

    def leaky(self):
        prompts, completions = real(self)
        return prompts, torch.ones_like(completions)
    monkeypatch.setattr(packing.Packing, "masks", leaky)
    with pytest.raises(AssertionError):
        assert_same(model, rows(64), "shared_prompt")


def test_the_attention_switch_is_given_back_and_needs_a_packing():
    model = llama()
    before = model.config._attn_implementation
    with pytest.raises(RuntimeError, match="pods_packing"):
        with packed_attention(model):
            model(input_ids=torch.tensor([[4, 5, 6]]))
    assert model.config._attn_implementation == before
    data = rows(64)  # outside the switch, the stream would go through plain attention
    with pytest.raises(RuntimeError, match="inside packed_attention"):
        packed_logprobs(model, pack(*data, share=True), data[2], data[3], 1.0)


@pytest.mark.parametrize("config, why", [
    (MistralConfig(sliding_window=16), "sliding-window"),
    (Qwen2Config(layer_types=["full_attention", "sliding_attention"], num_hidden_layers=2,
                 use_sliding_window=True, sliding_window=8), "sliding_attention"),
    (LlamaConfig(attn_logit_softcapping=50.0), "attn_logit_softcapping"),
])
def test_attention_the_packed_layouts_do_not_compute_is_refused(config, why):
    assert why in refusal(config)


def test_plain_attention_is_accepted(tiny_model_dir):
    assert refusal(LlamaConfig()) is None
    assert refusal(Qwen2Config(sliding_window=4096, use_sliding_window=False)) is None
    assert refusal(AutoModelForCausalLM.from_pretrained(tiny_model_dir).config) is None


def test_the_shipped_smollm2_gives_padded_log_probs_and_gradients(smollm2):
    """The real SmolLM2-135M-Instruct (30 layers, grouped-query attention): the ragged rows
    of ``rows`` through each prompt once, against padded."""
    model = AutoModelForCausalLM.from_pretrained(smollm2.folder, dtype=torch.float32).train()
    assert refusal(model.config) is None
    assert_same(model, rows(model.config.vocab_size), "shared_prompt",
                dict(atol=1e-4, rtol=1e-4))
