"""bfloat16 end to end on a CPU: train, evaluate, checkpoint and resume; log-probs in float32."""

import torch
from transformers import AutoModelForCausalLM

from pods.config import ModelConfig
from pods.models.logprobs import completion_logprobs
from pods.models.precision import weights_dtype
from pods.runs.metrics import read_metrics
from pods.train.run import resume, train
from runs import config

BF16 = dict(dtype="bfloat16", device="cpu")


def _saved(path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(path, dtype="auto").state_dict()


def test_auto_on_a_cpu_is_float32():
    assert weights_dtype(ModelConfig(), torch.device("cpu")) == torch.float32
    assert weights_dtype(ModelConfig(dtype="bfloat16"), torch.device("cpu")) == torch.bfloat16


def test_bf16_run_trains_evaluates_checkpoints_and_resumes(tiny_model_dir, tmp_path):
    whole = train(config(tiny_model_dir, tmp_path, max_steps=4, run_name="whole", **BF16))
    part = train(config(tiny_model_dir, tmp_path, max_steps=2, run_name="part", **BF16))
    resume(part, {"max_steps": 4})
    start = _saved(tiny_model_dir)  # float32
    a = _saved(whole / "checkpoints" / "step_000004" / "model")
    b = _saved(part / "checkpoints" / "step_000004" / "model")
    assert {t.dtype for t in a.values()} == {torch.bfloat16}  # saved as trained
    assert max((a[k].float() - start[k]).abs().max() for k in a) > 1e-2  # it learned
    for k in a:  # the resumed run is the uninterrupted one, bit for bit
        assert torch.equal(a[k], b[k]), k
    records = [read_metrics(run / "metrics.jsonl") for run in (whole, part)]
    evals = [[r for r in rs if r["kind"] == "eval"] for rs in records]
    assert [r["step"] for r in evals[0]] == [0, 4] and evals[1][-1]["step"] == 4
    assert evals[0][-1]["eval/accuracy"] == evals[1][-1]["eval/accuracy"]
    steps = [[r for r in rs if r["kind"] == "step"] for rs in records]
    assert [r["rollout/reward_mean"] for r in steps[0]] == \
        [r["rollout/reward_mean"] for r in steps[1]]
    assert all(r["loss/loss"] == r["loss/loss"] for r in steps[0])  # no NaN


def test_bf16_logprobs_are_float32_and_close_to_float32s(tiny_model_dir):
    model32 = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model16 = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    vocab = model32.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocab, (4, 5), generator=gen)  # [B, Lp]
    prompt_mask = torch.ones_like(prompt)
    prompt_mask[0, :2] = 0  # a left-padded row
    completion = torch.randint(3, vocab, (4, 6), generator=gen)  # [B, Lc]
    completion_mask = torch.ones_like(completion)
    lp32, lp16 = (completion_logprobs(model, prompt, prompt_mask, completion,
                                      completion_mask, temperature=0.7)
                  for model in (model32, model16))  # [B, Lc] each
    assert lp16.dtype == torch.float32 and lp32.dtype == torch.float32
    # bf16 weights and activations carry ~3 significant digits: log-probs agree to ~1e-2
    torch.testing.assert_close(lp16, lp32, rtol=0, atol=5e-2)
    # the softmax over the vocabulary is taken in float32 on the bf16 logits: exactly the
    # float32 log-softmax, not a bf16 one (whose rounding, ~4e-3 relative, would bias the
    # ratio and the logprob gap)
    ids = torch.cat([prompt, completion], 1)  # [B, Lp+Lc]
    mask = torch.cat([prompt_mask, completion_mask], 1)
    with torch.no_grad():
        logits = model16(input_ids=ids, attention_mask=mask,
                         position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits
    logits = logits[:, prompt.shape[1] - 1 : -1]  # [B, Lc, V] predicting the completion
    assert logits.dtype == torch.bfloat16
    exact = (logits.float() / 0.7).log_softmax(-1).gather(-1, completion[..., None])[..., 0]
    rounded = (logits / 0.7).log_softmax(-1).gather(-1, completion[..., None])[..., 0]
    torch.testing.assert_close(lp16, exact, rtol=0, atol=1e-5)
    assert (rounded.float() - exact).abs().max() > 1e-4  # the difference the upcast makes
