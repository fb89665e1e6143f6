"""The vllm engine, for real: vLLM's CPU build in this process (no mocks). Runs in
.venv-vllm (`tox -e vllm`, part of `make test`); skipped where vLLM is not installed."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.config import RolloutConfig
from pods.models.logprobs import completion_logprobs
from pods.rollout import EngineSpec, HFEngine, make_engine, sample_keys

pytestmark = pytest.mark.vllm
PROMPTS = ["1+2=", "10+20=", "55+5="]  # different lengths: left padding in the batch
KEYS = sample_keys(3, 0, torch.arange(3))  # [3]


def load(model_dir):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    return AutoModelForCausalLM.from_pretrained(model_dir).eval(), tokenizer


@pytest.fixture(scope="module")
def setup(vllm_model_dir):
    """(HF model, tokenizer, vllm engine): one engine for the module (it takes seconds)."""
    model, tokenizer = load(vllm_model_dir)
    spec = EngineSpec(RolloutConfig(engine="vllm", gen_batch_size=256), torch.device("cpu"),
                      max_model_len=64)
    engine = make_engine(spec, model, tokenizer)
    assert engine.name == "vllm"
    return model, tokenizer, engine


def recomputed(model, out, temperature):
    with torch.no_grad():
        return completion_logprobs(model, out.prompt_ids, out.prompt_mask, out.completion_ids,
                                   out.completion_mask, temperature)  # [B, Lc]


def test_greedy_rollouts_equal_the_hf_engine(setup):
    """Same prompts, n, token limit: ids, padding, eos masks and texts as hf makes them."""
    model, tokenizer, engine = setup
    hf = HFEngine(model, tokenizer, chunk=64).generate(PROMPTS, 2, 0.0, 6, KEYS)
    out = engine.generate(PROMPTS, 2, 0.0, 6, KEYS)
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"):
        assert torch.equal(getattr(out, name), getattr(hf, name)), name
    assert out.texts == hf.texts and out.logprobs is None  # greedy: no sampled log-probs


def test_sampled_rollouts_follow_the_config(setup):
    """n per prompt in prompt order, at most max_new_tokens, mask up to the first eos and
    pad after it; both endings occur (eos, and the limit)."""
    _, tokenizer, engine = setup
    out = engine.generate(PROMPTS, 32, 1.5, 5, KEYS)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    assert out.completion_ids.shape[0] == len(out.texts) == 3 * 32
    assert out.completion_ids.shape[1] <= 5 and out.logprobs.shape == out.completion_ids.shape
    lengths = out.completion_mask.sum(1)  # [B]
    ended = (out.completion_ids == eos).any(1)
    assert ended.any() and (lengths == 5).any() and (~ended).any()
    for row in range(out.completion_ids.shape[0]):
        k = int(lengths[row])
        if ended[row]:
            assert out.completion_ids[row, k - 1] == eos
            assert eos not in out.completion_ids[row, : k - 1]
        assert (out.completion_ids[row, k:] == pad).all() and (out.logprobs[row, k:] == 0).all()
    for p in range(3):  # rows p*n .. p*n+n-1 continue prompt p
        assert torch.equal(out.prompt_ids[p * 32], out.prompt_ids[p * 32 + 31])


def test_a_rollout_depends_on_its_key_not_its_batch(setup):
    _, _, engine = setup
    whole = engine.generate(PROMPTS, 4, 1.0, 6, KEYS)
    alone = engine.generate(PROMPTS[1:2], 4, 1.0, 6, KEYS[1:2])
    swapped = engine.generate([PROMPTS[2], PROMPTS[1]], 4, 1.0, 6, KEYS[[2, 1]])
    assert alone.texts == whole.texts[4:8] == swapped.texts[4:8]
    assert len(set(whole.texts)) > 3  # it does sample
    other = engine.generate(PROMPTS, 4, 1.0, 6, sample_keys(4, 0, torch.arange(3)))
    assert other.texts != whole.texts  # another seed, other rollouts


def test_unseeded_requests_sample_from_vllms_own_generator(setup):
    _, _, engine = setup
    engine.seeded = False  # --vllm-seeded false
    try:
        first, again = (engine.generate(PROMPTS, 4, 1.0, 6, KEYS) for _ in range(2))
    finally:
        engine.seeded = True
    assert len(set(first.texts)) > 3 and first.texts != again.texts  # the generator moves on


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_engine_logprobs_equal_the_trainers(setup, temperature):
    """The engine's log-prob of each sampled token equals the trainer's recomputed one
    (float32) within 1e-4: the update scores exactly what was sampled."""
    model, _, engine = setup
    out = engine.generate(PROMPTS, 8, temperature, 6, KEYS)
    mask = out.completion_mask.bool()
    gap = (recomputed(model, out, temperature) - out.logprobs).abs()[mask]
    assert gap.max() < 1e-4


def _train_a_step(model, tokenizer, lr):
    """One AdamW step on a toy objective over some sampled completions."""
    out = HFEngine(model, tokenizer, chunk=64).generate(PROMPTS, 4, 1.0, 4, KEYS)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr)
    logp = completion_logprobs(model, out.prompt_ids, out.prompt_mask, out.completion_ids,
                               out.completion_mask, 1.0)
    (-(logp * out.completion_mask).sum()).backward()
    optimizer.step()
    model.eval()


def _assert_engine_follows(engine, model, before):
    """Before a sync the engine still samples the old policy; after it, the new one."""
    out = engine.generate(PROMPTS, 8, 1.0, 6, KEYS)
    mask = out.completion_mask.bool()
    assert (recomputed(before, out, 1.0) - out.logprobs).abs()[mask].max() < 1e-4
    assert (recomputed(model, out, 1.0) - out.logprobs).abs()[mask].max() > 1e-2
    engine.sync_weights(model)
    out = engine.generate(PROMPTS, 8, 1.0, 6, KEYS)
    mask = out.completion_mask.bool()
    assert (recomputed(model, out, 1.0) - out.logprobs).abs()[mask].max() < 1e-4
    engine.sync_weights(before)  # leave the module's engine as the other tests expect it


def test_after_an_optimizer_step_the_engine_samples_the_new_weights(setup):
    model, tokenizer, engine = setup
    updated = copy.deepcopy(model)
    _train_a_step(updated, tokenizer, lr=0.05)
    _assert_engine_follows(engine, updated, before=model)


def test_lora_weights_reach_the_engine_merged(setup):
    from peft import LoraConfig, get_peft_model

    model, tokenizer, engine = setup
    lora = get_peft_model(copy.deepcopy(model), LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"]))
    _train_a_step(lora, tokenizer, lr=0.05)  # lora_B leaves zero: the adapter now matters
    _assert_engine_follows(engine, lora, before=model)
    base = lora.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight
    assert torch.equal(base, model.model.layers[0].self_attn.q_proj.weight)  # not merged in


def test_long_prompts_in_a_large_batch(setup):
    """More prompt tokens than vLLM's token budget per step: on the CPU build, a prefill
    split over steps would crash seeded sampling ("CPU Generator does not use offset");
    the engine schedules whole prompts there. Rollouts stay keyed."""
    model, _, engine = setup
    prompts = ["".join(str((7 * i + j) % 10) for j in range(45)) + "=" for i in range(4)]
    out = engine.generate(prompts, 64, 1.0, 4, sample_keys(5, 0, torch.arange(4)))
    assert len(out.texts) == 256  # 256 requests of 47 prompt tokens: > 12,000 tokens
    alone = engine.generate(prompts[2:3], 64, 1.0, 4, sample_keys(5, 0, torch.arange(4))[2:3])
    assert alone.texts == out.texts[128:192]


def test_a_weight_sync_prints_nothing_unless_asked(setup, capfd, monkeypatch):
    """vLLM's log is off by default (each sync used to print three lines, one of them the
    harmless `RotaryEmbedding: Failed to load weights`); VLLM_LOGGING_LEVEL brings it back
    (vLLM's handlers read it when vLLM is imported; here a handler of the test's listens)."""
    import logging

    from pods.rollout.vllm import quiet

    model, _, engine = setup
    records, listener = [], logging.Handler()
    listener.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("vllm")
    logger.addHandler(listener)
    try:
        capfd.readouterr()
        engine.sync_weights(model)
        printed = "".join(capfd.readouterr())
        assert "Reloading" not in printed and "Failed to load weights" not in printed
        assert records == []
        monkeypatch.setenv("VLLM_LOGGING_LEVEL", "INFO")
        quiet()
        engine.sync_weights(model)
        assert any("Reloading and processing weights took" in message for message in records)
    finally:
        logger.removeHandler(listener)
        logger.setLevel("ERROR")
