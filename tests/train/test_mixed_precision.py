"""--mixed-precision bf16: float32 weights and optimizer, bfloat16 compute (autocast in the
update, a bfloat16 sampling copy in the hf engine refreshed after every update)."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.config import ModelConfig, from_dict
from pods.models.logprobs import completion_logprobs
from pods.models.merge import merged_state_dict
from pods.models.policy import add_lora
from pods.models.precision import SamplingCopy, autocast, resolve_mixed_precision
from pods.rollout import HFEngine, sample_keys
from pods.runs.metrics import read_metrics
from pods.train.optimizer import join
from pods.train.run import resume, train
from runs import config

MIXED = dict(mixed_precision="bf16", device="cpu")


def _saved(path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(path, dtype="auto").state_dict()


def test_a_mixed_run_keeps_float32_weights_learns_and_resumes_exactly(tiny_model_dir,
                                                                      tmp_path):
    whole = train(config(tiny_model_dir, tmp_path, max_steps=4, run_name="whole", **MIXED))
    part = train(config(tiny_model_dir, tmp_path, max_steps=2, run_name="part", **MIXED))
    resume(part, {"max_steps": 4})
    start = _saved(tiny_model_dir)
    a = _saved(whole / "checkpoints" / "step_000004" / "model")
    b = _saved(part / "checkpoints" / "step_000004" / "model")
    assert {t.dtype for t in a.values()} == {torch.float32}  # the master weights
    moved = [(a[k] - start[k]).abs().max().item() for k in a]
    assert max(moved) > 1e-2
    for k in a:  # the resumed run is the uninterrupted one, bit for bit
        assert torch.equal(a[k], b[k]), k
    steps = [r for r in read_metrics(whole / "metrics.jsonl") if r["kind"] == "step"]
    assert all(r["loss/loss"] == r["loss/loss"] for r in steps)  # no NaN


def _moved_share(after: dict, start: dict) -> float:
    """The share of the weights in ``after`` (its keys: each tied weight once, or twice)
    that differ from ``start`` in ``after``'s dtype."""
    return sum(int((after[k].float() != start[k].to(after[k].dtype).float()).sum())
               for k in after) / sum(t.numel() for t in after.values())


def _masters(checkpoint) -> dict[str, torch.Tensor]:
    """A bf16 run's float32 masters: its saved weights joined with the low 16 bits its
    SplitAdamW keeps in state.pt (parameters in the model's order, as the trainer's)."""
    model = AutoModelForCausalLM.from_pretrained(checkpoint / "model", dtype="auto")
    state = torch.load(checkpoint / "state.pt", weights_only=False)["optimizer"]["state"]
    return {name: join(p.detach(), state[i]["low"])
            for i, (name, p) in enumerate(model.named_parameters())}


def test_small_updates_are_kept_where_bf16_weights_round_them_away(tiny_model_dir,
                                                                  tmp_path):
    """lr 1e-5 moves a weight by about 1e-5: far below bf16's resolution (2**-8 relative),
    so plain bf16 weights keep almost none of it (and the run warns, with the measured
    share); float32 master weights keep all of it, whether float32 weights (the default,
    or mixed precision) or bf16 weights with exact updates (the master in two halves)."""
    modes = {"float32": {}, "mixed": MIXED, "exact": dict(dtype="bfloat16"),
             "plain": dict(dtype="bfloat16", bf16_updates="plain")}
    runs, logs = {}, {}
    for mode, overrides in modes.items():
        logs[mode] = []
        runs[mode] = train(config(tiny_model_dir, tmp_path, max_steps=1, lr=1e-5,
                                  run_name=mode, **overrides), log=logs[mode].append)
    start = _saved(tiny_model_dir)
    step = {mode: run / "checkpoints" / "step_000001" for mode, run in runs.items()}
    changed = {mode: _moved_share(_saved(step[mode] / "model"), start)
               for mode in ("float32", "mixed", "plain")}
    changed["exact"] = _moved_share(_masters(step["exact"]), start)
    assert min(changed["float32"], changed["mixed"], changed["exact"]) > 0.99, changed
    assert changed["plain"] < 0.3, changed  # ~16%: only weights near 0 move
    warned = [line for line in logs["plain"] if "would not move" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: ")
    assert "by an AdamW step of lr 1e-05" in warned[0] and "--bf16-updates exact" in warned[0]
    assert not any("would not move" in line for line in logs["exact"] + logs["float32"])
    assert any("exact updates" in line for line in logs["exact"])


def test_the_update_runs_its_matmuls_in_bf16_and_its_logprobs_in_float32(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    seen = []
    hook = model.model.layers[0].mlp.up_proj.register_forward_hook(
        lambda module, args, out: seen.append(out.dtype))
    ids = torch.randint(3, model.config.vocab_size, (2, 7))  # [B, L]
    mask = torch.ones_like(ids)
    plain = completion_logprobs(model, ids[:, :3], mask[:, :3], ids[:, 3:], mask[:, 3:], 1.0)
    with autocast(torch.device("cpu"), "bf16"):
        mixed = completion_logprobs(model, ids[:, :3], mask[:, :3], ids[:, 3:], mask[:, 3:],
                                    1.0)  # [B, Lc]
        mixed.sum().backward()
    hook.remove()
    assert seen == [torch.float32, torch.bfloat16]
    assert mixed.dtype == torch.float32 and not torch.equal(mixed, plain)
    torch.testing.assert_close(mixed, plain, rtol=0, atol=5e-2)
    assert {p.grad.dtype for p in model.parameters()} == {torch.float32}


def test_the_sampling_copy_is_the_model_in_bf16_and_follows_its_updates(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    copy = SamplingCopy(model, torch.bfloat16)
    assert not any(p.requires_grad for p in copy.module.parameters())
    theirs = copy.module.state_dict()
    assert all(torch.equal(theirs[k], v.bfloat16()) for k, v in model.state_dict().items())
    with torch.no_grad():
        model.model.embed_tokens.weight.add_(1.0)  # tied to lm_head
    assert not torch.equal(copy.module.lm_head.weight, model.lm_head.weight.bfloat16())
    copy.refresh(model)
    assert torch.equal(copy.module.lm_head.weight, model.lm_head.weight.bfloat16())
    assert copy.module.lm_head.weight is copy.module.model.embed_tokens.weight


def test_a_lora_models_sampling_copy_has_the_adapter_merged(tiny_model_dir):
    model = add_lora(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                     ModelConfig(lora_rank=4))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_()  # a non-zero adapter
    copy = SamplingCopy(model, torch.bfloat16)
    assert not any("lora" in k for k in copy.module.state_dict())  # a plain model
    merged = merged_state_dict(model)
    key = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(copy.module.state_dict()[key], merged[key].bfloat16())


def test_the_hf_engine_samples_from_the_copy_until_synced(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir, padding_side="left")
    engine = HFEngine(model, tokenizer, chunk=8, dtype=torch.bfloat16)
    keys = sample_keys(0, 0, torch.arange(2))
    before = engine.generate(["3+4=", "5+1="], 4, 1.0, 6, keys).completion_ids
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.0)  # a model that always predicts token 0 ...
    assert torch.equal(engine.generate(["3+4=", "5+1="], 4, 1.0, 6, keys).completion_ids,
                       before)  # ... not seen until the weights are synced
    engine.sync_weights(model)
    assert not torch.equal(engine.generate(["3+4=", "5+1="], 4, 1.0, 6, keys).completion_ids,
                           before)


@pytest.mark.parametrize("flat, message", [
    (dict(dtype="bfloat16"), "keeps float32 master weights.*--dtype float32"),
    (dict(mixed_precision="fp8"), "unknown mixed_precision 'fp8'"),
])
def test_mixed_precision_settings_that_cannot_work_are_refused(flat, message):
    with pytest.raises(ValueError, match=message):
        from_dict({"mixed_precision": "bf16", **flat})


@pytest.mark.parametrize("support, expected", [
    ("amx", "bf16"), ("avx512_bf16", "bf16"), ("none", "no"), ("unknown", "no")])
def test_auto_is_bf16_only_where_the_cpu_computes_it_natively(monkeypatch, support, expected):
    monkeypatch.setattr("pods.runtime.machine.cpu_bf16", lambda: support)
    cpu = torch.device("cpu")
    assert resolve_mixed_precision("auto", cpu) == expected
    assert (resolve_mixed_precision("no", cpu), resolve_mixed_precision("bf16", cpu)) == \
        ("no", "bf16")  # asked for explicitly: kept, wherever it runs


@pytest.mark.parametrize("supported, expected", [(True, "bf16"), (False, "no")])
def test_auto_on_a_gpu_follows_its_bf16_support(monkeypatch, supported, expected):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: supported)
    assert resolve_mixed_precision("auto", torch.device("cuda")) == expected


@pytest.mark.parametrize("support, same_as", [("avx512_bf16", MIXED), ("none", {})])
def test_an_auto_run_computes_as_resolved_keeps_auto_and_resumes(tiny_model_dir, tmp_path,
                                                                 monkeypatch, support,
                                                                 same_as):
    """auto on a CPU said to compute bf16 natively trains bit for bit as bf16 does, and on
    one said to emulate it as float32 does; the run folder keeps "auto", so a resume
    resolves it again (here, the same) and is not refused as a changed setting."""
    monkeypatch.setattr("pods.runtime.machine.cpu_bf16", lambda: support)
    auto, lines = dict(mixed_precision="auto", device="cpu"), []
    whole = train(config(tiny_model_dir, tmp_path, max_steps=2, run_name="auto", **auto),
                  log=lines.append)
    twin = train(config(tiny_model_dir, tmp_path, max_steps=2, run_name="twin", **same_as))
    part = train(config(tiny_model_dir, tmp_path, max_steps=1, run_name="part", **auto))
    resume(part, {"max_steps": 2})
    resolved = "bf16" if same_as else "no"
    assert any(line.startswith(f"mixed precision auto: {resolved} ") for line in lines), lines
    assert "mixed_precision: auto" in (whole / "config.yaml").read_text()
    a = _saved(whole / "checkpoints" / "step_000002" / "model")
    for other in (twin, part):
        b = _saved(other / "checkpoints" / "step_000002" / "model")
        assert all(torch.equal(a[k], b[k]) for k in a), other.name
