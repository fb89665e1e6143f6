"""The head applied a chunk of tokens at a time gives the log-probs and gradients of the
model's own full logits (pods.models.logprobs)."""

import pytest
import torch
from transformers import AutoModelForCausalLM

import pods.models.logprobs as logprobs
from pods.models.logprobs import completion_logprobs, output_head

B, LP, LC = 3, 4, 6


def batch(vocabulary: int):
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocabulary, (B, LP), generator=generator)
    prompt_mask = torch.ones(B, LP, dtype=torch.long)
    prompt_mask[0, :2] = 0  # left padding
    completion = torch.randint(3, vocabulary, (B, LC), generator=generator)
    completion_mask = torch.ones(B, LC, dtype=torch.long)
    completion_mask[1, 3:] = 0  # right padding
    completion_mask[2, 1:] = 0
    return prompt, prompt_mask, completion, completion_mask


def logps_and_grads(model, data, monkeypatch, full: bool):
    with monkeypatch.context() as patch:
        if full:  # the model's own logits, as before chunking
            patch.setattr(logprobs, "output_head", lambda model: None)
        else:
            patch.setattr(logprobs, "HEAD_CHUNK", 3 * model.config.vocab_size)  # 3 tokens
        model.zero_grad()
        logp = completion_logprobs(model, *data, temperature=0.7)  # [B, Lc]
        mask = data[3].float()
        (logp * mask * torch.linspace(-1, 1, LC)).sum().backward()
    return logp * mask, {k: p.grad.clone() for k, p in model.named_parameters()}


@pytest.mark.parametrize("precision", ["float32", "bf16"])
def test_chunked_head_equals_the_full_logits(tiny_model_dir, monkeypatch, precision):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).train()
    assert output_head(model) is model.lm_head
    data = batch(model.config.vocab_size)
    runs = []
    for full in (True, False):
        with torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16"):
            runs.append(logps_and_grads(model, data, monkeypatch, full))
    (want, want_grads), (got, got_grads) = runs
    assert got.dtype == torch.float32
    tolerance = dict(atol=1e-5, rtol=1e-4) if precision == "float32" else dict(atol=2e-2,
                                                                               rtol=2e-2)
    torch.testing.assert_close(got, want, **tolerance)
    for name, grad in want_grads.items():
        torch.testing.assert_close(got_grads[name], grad, **tolerance, msg=name)
    assert model.lm_head.forward.__func__ is type(model.lm_head).forward  # head given back


def test_padding_positions_are_zero_and_no_grad_runs_without_checkpoints(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    data = batch(model.config.vocab_size)
    with torch.no_grad():
        logp = completion_logprobs(model, *data, temperature=1.0)
    assert (logp[data[3] == 0] == 0).all() and (logp[data[3] == 1] < 0).all()


def test_models_that_change_their_logits_keep_them(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model.config.final_logit_softcapping = 30.0  # as Gemma 2: tanh-capped logits
    assert output_head(model) is None
    model.config.final_logit_softcapping = None
    assert output_head(model) is model.lm_head
    assert output_head(torch.nn.Linear(2, 2)) is None  # no head to find: the model's logits


def test_an_instance_forward_on_the_head_is_put_back(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    calls = []
    original = model.lm_head.forward

    def hooked(hidden):  # as accelerate's hooks replace a module's forward
        calls.append(hidden.shape)
        return original(hidden)

    model.lm_head.forward = hooked
    data = batch(model.config.vocab_size)
    with torch.no_grad():
        completion_logprobs(model, *data, temperature=1.0)
    assert model.lm_head.forward is hooked
    assert calls and all(shape[-1] == model.config.hidden_size for shape in calls)


def test_a_batch_of_padding_still_reaches_every_parameter(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    prompt, prompt_mask, completion, completion_mask = batch(model.config.vocab_size)
    logp = completion_logprobs(model, prompt, prompt_mask, completion,
                               torch.zeros_like(completion_mask), temperature=1.0)
    assert (logp == 0).all()
    logp.sum().backward()  # DDP and FSDP need a backward through the model on every rank
    assert all(p.grad is not None for p in model.parameters())
