"""LoRA through PEFT: only adapter weights train, the reference is the adapter-disabled base,
checkpoints hold the adapter, and `pods export` merges it into a standalone model."""

import warnings

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.cli.export import export_checkpoint
from pods.config import from_dict
from pods.models.policy import load_saved_policy
from pods.runs.metrics import read_metrics
from pods.train.run import resume, train
from pods.train.trainer import Trainer
from runs import config

LORA = dict(lora_rank=4, lora_alpha=8.0, lr=5e-2)


def test_lora_run_trains_only_the_adapter(tiny_model_dir, tmp_path):
    run = train(config(tiny_model_dir, tmp_path, **LORA))
    saved = run / "checkpoints" / "step_000002" / "model"
    assert (saved / "adapter_config.json").is_file() and not (saved / "model.safetensors").exists()
    adapter = load_file(saved / "adapter_model.safetensors")
    assert adapter and all("lora_" in k for k in adapter)
    assert any("lora_B" in k and v.abs().sum() > 0 for k, v in adapter.items())  # B starts at 0
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    model, _ = load_saved_policy(saved, tiny_model_dir,
                                 torch.device("cpu"), from_dict(LORA).model)
    frozen = {k.replace(".base_layer", ""): v
              for k, v in model.get_base_model().state_dict().items() if "lora_" not in k}
    assert frozen.keys() == base.keys()
    for name, weight in base.items():  # every base weight is exactly as it was
        torch.testing.assert_close(frozen[name], weight, rtol=0, atol=0)


def test_kl_reference_is_the_adapter_disabled_base(tiny_model_dir, tmp_path):
    cfg = config(tiny_model_dir, tmp_path, beta=0.1, **LORA)
    trainer = Trainer(cfg, log=lambda *_: None)
    assert trainer.ref_model is None  # no second copy of the weights
    run = train(cfg.replace(run_name="kl"))
    assert read_metrics(run / "metrics.jsonl", "step")[-1]["loss/kl"] > 0


def test_lora_resume_matches_an_uninterrupted_run(tiny_model_dir, tmp_path):
    whole = train(config(tiny_model_dir, tmp_path, max_steps=3, run_name="whole", **LORA))
    part = train(config(tiny_model_dir, tmp_path, max_steps=1, run_name="part", **LORA))
    resume(part, {"max_steps": 3})
    a = load_file(whole / "checkpoints" / "step_000003" / "model" / "adapter_model.safetensors")
    b = load_file(part / "checkpoints" / "step_000003" / "model" / "adapter_model.safetensors")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6)


def test_export_merges_the_adapter(tiny_model_dir, tmp_path):
    run = train(config(tiny_model_dir, tmp_path, **LORA))
    out = export_checkpoint(run, tmp_path / "exported")
    merged = AutoModelForCausalLM.from_pretrained(out)
    assert not (out / "adapter_config.json").exists()
    peft_model, tokenizer = load_saved_policy(
        run / "checkpoints" / "step_000002" / "model", tiny_model_dir, torch.device("cpu"),
        from_dict(LORA).model)
    ids = tokenizer(["12+34="], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, peft_model(ids).logits, atol=1e-5,
                                   rtol=1e-4)
        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        assert not torch.allclose(merged(ids).logits, base(ids).logits)
    with pytest.raises(ValueError, match="not empty"):
        export_checkpoint(run, out)


def test_export_of_a_full_fine_tune(tiny_model_dir, tmp_path):
    run = train(config(tiny_model_dir, tmp_path))
    out = export_checkpoint(run / "checkpoints" / "step_000002", tmp_path / "full")
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    assert {t.dtype for t in load_file(out / "model.safetensors").values()} == {torch.float32}


def test_export_writes_the_base_models_dtype_and_checkpoints_keep_float32(tiny_model_dir,
                                                                          tmp_path):
    """A base published in bfloat16 (as most hub models are) trains float32 weights (the
    default), checkpoints them in float32 (an exact resume) and exports bfloat16, or the
    dtype asked for."""
    base = tmp_path / "bf16-base"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    model.save_pretrained(base)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(base)
    run = train(config(str(base), tmp_path))
    checkpoint = run / "checkpoints" / "step_000002"
    saved = load_file(checkpoint / "model" / "model.safetensors")
    assert {t.dtype for t in saved.values()} == {torch.float32}
    written = {dtype: load_file(export_checkpoint(run, tmp_path / dtype, dtype=dtype) /
                                "model.safetensors")
               for dtype in ("auto", "float32")}
    assert {t.dtype for t in written["auto"].values()} == {torch.bfloat16}
    assert {t.dtype for t in written["float32"].values()} == {torch.float32}
    for key, value in written["float32"].items():  # the trained weights, as checkpointed
        assert torch.equal(value, saved[key]), key


@pytest.mark.parametrize("overrides, message", [
    (dict(dtype="fp8"), "unknown dtype"),
    (dict(lora_rank=-1), "lora_rank must be >= 0"),
    (dict(lora_dropout=1.0), "lora_dropout"),
])
def test_model_option_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        from_dict(overrides)


@pytest.mark.parametrize("lora", [{}, LORA], ids=["full", "lora"])
def test_gradient_checkpointing_gives_the_same_update(tiny_model_dir, tmp_path, lora,
                                                      monkeypatch):
    """Recomputing activations in the backward pass changes memory and time, not the
    numbers: the same run with checkpointing off has the same losses and gradient norms;
    so has auto, on here where the machine's memory (made 1 MiB) cannot hold the pass."""
    from pods.train import micro_batch

    monkeypatch.setattr(micro_batch, "host_available_bytes", lambda: 2**20)
    runs = [train(config(tiny_model_dir, tmp_path, gradient_checkpointing=on,
                         run_name=f"gc-{on}", **lora)) for on in (True, False, "auto")]
    on, off, auto = (read_metrics(run / "metrics.jsonl", "step") for run in runs)
    assert len(on) == 2 and on[-1]["loss/grad_norm"] > 0
    assert [r["optim/gradient_checkpointing"] for r in auto] == [1.0, 1.0]
    assert "optim/gradient_checkpointing" not in on[0]  # chosen by the config, not recorded
    for a, b, c in zip(on, off, auto, strict=True):
        for key in ("loss/loss", "loss/grad_norm", "rollout/reward_mean"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-7), key
            assert a[key] == pytest.approx(c[key], rel=1e-4, abs=1e-7), key


def test_auto_gradient_checkpointing_is_off_where_the_pass_fits(tiny_model_dir, tmp_path,
                                                                monkeypatch):
    from pods.models.checkpointing import checkpointed
    from pods.train import micro_batch

    monkeypatch.setattr(micro_batch, "host_available_bytes", lambda: 16 * 2**30)
    lines = []
    with warnings.catch_warnings():  # none of transformers' deprecations (peft's reads)
        warnings.simplefilter("error", FutureWarning)
        trainer = Trainer(config(tiny_model_dir, tmp_path, gradient_checkpointing="auto",
                                 **LORA), log=lambda line, **_: lines.append(line))
    said = [line for line in lines if line.startswith("gradient checkpointing (auto)")]
    assert len(said) == 1 and said[0].startswith("gradient checkpointing (auto): off: a pass ")
    record = trainer.step()  # chosen when the trainer was built, before any generation
    assert record["optim/gradient_checkpointing"] == 0.0 and not checkpointed(trainer.model)
    trainer.step()
    assert len([line for line in lines if "(auto)" in line]) == 1  # said once


def test_auto_gradient_checkpointing_is_switched_before_anything_is_generated(
        tiny_model_dir, tmp_path, monkeypatch):
    """Where memory (made 1 MiB) holds no pass, auto turns checkpointing on as the trainer
    is built: a compiled decode step over the same module (the bf16 copy the sampler
    shares on a GPU) is traced with it on, not recompiled when the first update would
    switch it (a compiled step guards on each layer's flag)."""
    from pods.models.checkpointing import checkpointed
    from pods.train import micro_batch

    monkeypatch.setattr(micro_batch, "host_available_bytes", lambda: 2**20)
    trainer = Trainer(config(tiny_model_dir, tmp_path, gradient_checkpointing="auto"),
                      log=lambda *_: None)
    spec = trainer.update_spec
    trained = trainer.model if spec.cast is None else spec.cast.module
    assert checkpointed(trained) and spec.budget["checkpointing"] is True
    assert trainer.step()["optim/gradient_checkpointing"] == 1.0 and checkpointed(trained)
