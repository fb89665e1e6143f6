import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.models.logprobs import completion_logprobs
from pods.rollout import (
    HFEngine,
    KeyedSampler,
    SamplingRequest,
    completion_mask,
    generate,
    mix32,
    sample_keys,
)


def test_completion_mask_stops_after_first_eos():
    ids = torch.tensor([[5, 6, 2, 0, 0], [2, 7, 7, 7, 7], [5, 5, 5, 5, 5]])
    assert completion_mask(ids, eos_id=2).tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0],
                                                       [1, 1, 1, 1, 1]]


def test_rollouts_say_which_completions_were_cut_at_the_limit(tiny_model_dir):
    """A completion with no eos stopped at max_new_tokens; ``select`` keeps the flag."""
    from pods.rollout.base import finish

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    eos, pad, word = tokenizer.eos_token_id, tokenizer.pad_token_id, 5
    ids = torch.tensor([[word, eos, pad], [word, word, word], [eos, pad, pad]])
    prompts = torch.ones(3, 2, dtype=torch.long)
    out = finish(tokenizer, prompts, prompts, ids)
    assert out.finished.tolist() == [True, False, True]
    assert out.select(torch.tensor([1, 2])).finished.tolist() == [False, True]


def load(model_dir):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    return AutoModelForCausalLM.from_pretrained(model_dir).eval(), tokenizer


def test_generate_shapes_and_grouping(tiny_model_dir):
    model, tokenizer = load(tiny_model_dir)
    torch.manual_seed(0)
    request = SamplingRequest(["1+2=", "10+20="], n=3, temperature=1.0, max_new_tokens=4)
    out = generate(model, tokenizer, request, chunk=4)  # 6 sequences in chunks of 4 and 2
    assert out.prompt_ids.shape[0] == out.completion_ids.shape[0] == 6
    assert out.completion_ids.shape[1] <= 4 and len(out.texts) == 6
    # rows 0-2 continue the first prompt, rows 3-5 the second (left-padded)
    assert torch.equal(out.prompt_ids[0], out.prompt_ids[2])
    assert out.prompt_mask[0].sum() < out.prompt_mask[3].sum()
    kept = out.select(torch.tensor([1, 4]))
    assert kept.texts == [out.texts[1], out.texts[4]]


def test_logprobs_match_the_sampling_distribution(tiny_model_dir):
    """The update scores completions exactly as generate() sampled them, left padding
    included: the log-probs equal those of generate's own (temperature-scaled) scores."""
    model, tokenizer = load(tiny_model_dir)
    torch.manual_seed(0)
    prompts = ["1+2=", "123+45=", "9="]
    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=True, temperature=0.7, top_k=0, top_p=1.0,
                             max_new_tokens=5, output_scores=True, return_dict_in_generate=True,
                             pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id)
        completion = out.sequences[:, enc["input_ids"].shape[1]:]
        mask = completion_mask(completion, tokenizer.eos_token_id)
        logp = completion_logprobs(model, enc["input_ids"], enc["attention_mask"], completion,
                                   mask, temperature=0.7)
    scores = torch.stack(out.scores, dim=1).log_softmax(-1)  # [B, L, V], already / 0.7
    want = scores.gather(-1, completion.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(logp * mask, want * mask, atol=1e-4, rtol=1e-4)


def test_chunked_log_softmax_is_exact(tiny_model_dir, monkeypatch):
    import pods.models.policy

    model, tokenizer = load(tiny_model_dir)
    enc = tokenizer(["1+2=", "33+4="], return_tensors="pt", padding=True)
    completion = torch.tensor([[5, 6, 2], [7, 2, 0]])
    mask = completion_mask(completion, tokenizer.eos_token_id)
    with torch.no_grad():
        whole = completion_logprobs(model, enc["input_ids"], enc["attention_mask"], completion,
                                    mask, 0.7)
        monkeypatch.setattr(pods.models.logprobs, "HEAD_CHUNK", 1)  # one token per chunk
        rows = completion_logprobs(model, enc["input_ids"], enc["attention_mask"], completion,
                                   mask, 0.7)
    torch.testing.assert_close(rows, whole)


def test_mix32_is_lowbias32():
    def reference(x):
        x &= 0xFFFFFFFF
        x ^= x >> 16
        x = (x * 0x7FEB352D) & 0xFFFFFFFF
        x ^= x >> 15
        x = (x * 0x846CA68B) & 0xFFFFFFFF
        return x ^ (x >> 16)

    xs = [0, 1, 12345, 2**31 - 1, 2**31, 2**32 - 1]
    assert mix32(torch.tensor(xs)).tolist() == [reference(x) for x in xs]


def test_keyed_sampler_draws_from_the_tempered_softmax():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5, float("-inf")])  # [V]
    N = 100_000
    sampler = KeyedSampler(mix32(torch.arange(N)), temperature=0.7)
    scores = sampler(torch.zeros(N, 3, dtype=torch.long), logits.expand(N, -1).clone())
    assert torch.isinf(scores).sum(1).tolist() == [5] * N  # one token left per row
    freq = torch.bincount(scores.argmax(1), minlength=6).double() / N
    want = torch.softmax(logits.double() / 0.7, 0)
    assert (freq - want).abs().max() < 4 * (0.25 / N) ** 0.5  # 4 binomial std at most
    assert freq[5] == 0  # a -inf logit is never drawn


def test_keyed_draws_are_exact_in_law():
    """Over 200,000 keys, the Gumbel-max draw's counts fit softmax(logits / T) by a
    chi-square test at 40 tokens (a wrong law, e.g. T ignored, is rejected), for the
    sampler's shared draw at several positions; the log-prob is the tempered softmax's."""
    from scipy.stats import chisquare

    from pods.rollout.sampling import keyed_draw

    N, T = 200_000, 0.8
    logits = torch.linspace(-3, 3, 40) ** 2 / 3  # [V] uneven, from 2e-2 to 0.2 probability
    want = torch.softmax(logits.double() / T, 0)
    keys = mix32(torch.arange(N))
    for position in (0, 7):
        token, logprob = keyed_draw(logits.expand(N, -1), keys, torch.tensor(position), T)
        counts = torch.bincount(token, minlength=40).double()
        assert chisquare(counts.numpy(), (want * N).numpy()).pvalue > 1e-4
        untempered = torch.softmax(logits.double(), 0) * N
        assert chisquare(counts.numpy(), untempered.numpy()).pvalue < 1e-12
        torch.testing.assert_close(logprob, torch.log_softmax(logits / T, 0)[token])
    other, _ = keyed_draw(logits.expand(N, -1), keys, torch.tensor(8), T)
    assert (other != token).float().mean() > 0.9  # positions draw independently


def test_rollouts_do_not_depend_on_batch_or_chunking(tiny_model_dir):
    """A rollout depends on its key and prompt only: what shares its batch, the padding
    that brings, and the chunk size change nothing (this is what makes a data-parallel
    run equal to a one-process run)."""
    model, tokenizer = load(tiny_model_dir)
    keys = sample_keys(7, 0, torch.arange(3))  # [3]
    prompts = ["1+2=", "10+20=", "5+5="]
    request = SamplingRequest(prompts, 4, 1.0, 5, keys=keys)
    whole = generate(model, tokenizer, request, chunk=12)
    chunked = generate(model, tokenizer, request, chunk=5)
    alone = generate(model, tokenizer, SamplingRequest(prompts[1:2], 4, 1.0, 5, keys[1:2]),
                     chunk=4)
    assert chunked.texts == whole.texts and alone.texts == whole.texts[4:8]
    assert len(set(whole.texts)) > 3  # it does sample
    other = generate(model, tokenizer, SamplingRequest(
        prompts, 4, 1.0, 5, keys=sample_keys(8, 0, torch.arange(3))), chunk=12)
    assert other.texts != whole.texts  # another seed, other rollouts


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_engines_logprobs_are_the_trainers(tiny_model_dir, temperature):
    """The hf engine returns each sampled token's log-prob under softmax(logits / T), the
    one the trainer recomputes for the same tokens on the same float32 weights (chunks of
    different widths, padding after eos at 0), as vLLM's processed_logprobs are."""
    model, tokenizer = load(tiny_model_dir)
    keys = sample_keys(3, 0, torch.arange(3))
    request = SamplingRequest(["1+2=", "10+20=", "5+5="], 4, temperature, 6, keys=keys)
    out = HFEngine(model, tokenizer, chunk=5).generate(request.prompts, 4, temperature, 6, keys)
    assert out.logprobs.dtype == torch.float32
    assert out.logprobs.shape == out.completion_ids.shape
    with torch.no_grad():
        want = completion_logprobs(model, out.prompt_ids, out.prompt_mask, out.completion_ids,
                                   out.completion_mask, temperature)  # [B, Lc]
    mask = out.completion_mask.bool()
    assert (out.logprobs - want).abs()[mask].max() < 1e-5
    assert torch.all(out.logprobs[~mask] == 0) and bool((~mask).any())  # some padding
    same = generate(model, tokenizer, request, chunk=12)  # logging them changes no token
    assert torch.equal(same.completion_ids, out.completion_ids)


def test_greedy_decoding_returns_no_logprobs_as_vllm(tiny_model_dir):
    model, tokenizer = load(tiny_model_dir)
    out = generate(model, tokenizer, SamplingRequest(["1+2="], 2, 0.0, 4), chunk=4)
    assert out.logprobs is None
