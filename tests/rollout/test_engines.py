"""Choosing an engine: auto, and the errors a bad choice gives before any model loads."""

import pytest
import torch

import pods.rollout
import pods.rollout.vllm
from pods.config import RolloutConfig, from_dict
from pods.rollout import resolve_engine

CPU, GPU = torch.device("cpu"), torch.device("cuda")


def test_auto_is_vllm_only_on_a_gpu_with_vllm_installed(monkeypatch):
    monkeypatch.setattr(pods.rollout.vllm, "installed", lambda: True)
    assert resolve_engine(RolloutConfig(engine="auto"), GPU) == "vllm"
    assert resolve_engine(RolloutConfig(engine="auto"), CPU) == "hf"
    assert resolve_engine(RolloutConfig(engine="auto"), GPU, sharded=True) == "hf"
    monkeypatch.setattr(pods.rollout.vllm, "installed", lambda: False)
    assert resolve_engine(RolloutConfig(engine="auto"), GPU) == "hf"
    assert resolve_engine(RolloutConfig(engine="hf"), GPU) == "hf"


def test_vllm_without_vllm_says_what_to_install(monkeypatch):
    monkeypatch.setattr(pods.rollout.vllm, "installed", lambda: False)
    with pytest.raises(ValueError, match=r"pip install -e '\.\[vllm\]'.*make vllm-env"):
        resolve_engine(RolloutConfig(engine="vllm"), CPU)


def test_vllm_settings_that_cannot_work_are_refused(monkeypatch):
    monkeypatch.setattr(pods.rollout.vllm, "installed", lambda: True)
    with pytest.raises(ValueError, match="drop --vllm-sleep"):
        resolve_engine(RolloutConfig(engine="vllm", vllm_sleep=True), CPU)
    with pytest.raises(ValueError, match="FSDP"):
        resolve_engine(RolloutConfig(engine="vllm"), GPU, sharded=True)
    assert resolve_engine(RolloutConfig(engine="vllm", vllm_sleep=True), GPU) == "vllm"


@pytest.mark.parametrize("fields, message", [
    ({"engine": "sglang"}, "unknown engine 'sglang'; use one of auto, hf, vllm"),
    ({"vllm_gpu_memory_utilization": 0.0}, r"must be in \(0, 1\]"),
    ({"vllm_gpu_memory_utilization": 1.5}, r"must be in \(0, 1\]"),
])
def test_config_checks_the_engine_fields(fields, message):
    """The memory fraction when the config is built; the engine's name, which the engine
    registry holds, before a run loads anything (pods.train.checks)."""
    from pods.train.checks import check

    with pytest.raises(ValueError, match=message):
        check(from_dict(fields))


def test_the_vllm_engine_is_sized_for_prompt_and_completion(monkeypatch, tmp_path,
                                                            tiny_model_dir):
    """The trainer gives vLLM max_model_len = max_prompt_tokens + max_new_tokens."""
    import pods.rollout.vllm
    from pods.train.trainer import Trainer

    seen = {}

    class Engine:
        def __init__(self, spec, model, tokenizer):
            seen["spec"] = spec
            raise RuntimeError("sized")

    monkeypatch.setattr(pods.rollout.vllm, "installed", lambda: True)
    monkeypatch.setattr(pods.rollout.vllm, "VLLMEngine", Engine)
    cfg = from_dict(dict(model=tiny_model_dir, engine="vllm", max_prompt_tokens=100,
                         max_new_tokens=28, gen_batch_size=64, seed=3, device="cpu",
                         recipe="embedded", out_dir=str(tmp_path)))
    with pytest.raises(RuntimeError, match="sized"):
        Trainer(cfg)
    spec = seen["spec"]
    assert (spec.max_model_len, spec.rollout.gen_batch_size, spec.seed) == (128, 64, 3)


def test_pods_train_with_a_missing_vllm_fails_before_loading(tmp_path, monkeypatch, capsys):
    from pods.cli import main

    monkeypatch.setattr(pods.rollout.vllm, "installed", lambda: False)
    code = main(["train", "--engine", "vllm", "--model", str(tmp_path / "no-model"),
                 "--out-dir", str(tmp_path), "--run-name", "r"])
    assert code != 0 and "make vllm-env" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # nothing written


def test_a_new_engine_is_one_registry_entry(monkeypatch, tmp_path, tiny_model_dir):
    """An engine registered in ENGINES (a module path, or any object with build and an
    optional check) is accepted by the config checks and built by the trainer, with the
    run's sizes; nothing in pods.config changes."""
    from types import SimpleNamespace

    from pods.rollout import ENGINES, HFEngine, engine_names
    from pods.train.checks import check
    from pods.train.trainer import Trainer

    built, checked = [], []

    def build(spec, model, tokenizer):
        built.append((spec.max_model_len, spec.seed))
        return HFEngine(model, tokenizer, chunk=8, synced=spec.sharded, dtype=spec.dtype)

    monkeypatch.setitem(ENGINES, "hf8", SimpleNamespace(
        build=build, check=lambda options, device, sharded: checked.append(device.type)))
    assert engine_names() == ("auto", "hf", "vllm", "hf8")
    cfg = from_dict(dict(model=tiny_model_dir, engine="hf8", max_prompt_tokens=100,
                         max_new_tokens=8, prompts_per_step=2, n=4, m=2, seed=3, recipe="embedded",
                         device="cpu", out_dir=str(tmp_path)))
    check(cfg)
    trainer = Trainer(cfg)
    assert built == [(108, 3)] and checked[0] == "cpu"
    assert trainer.step()["rollout/completion_len"] > 0


def test_a_correction_needs_an_engine_that_returns_logprobs(monkeypatch, tmp_path):
    """is_correction weighs tokens by the engine's log-probs: an engine that sets no
    SAMPLED_LOGPROBS is refused before anything loads (the trainer's first check; the
    model path here does not even exist); hf, vllm and auto return them."""
    from types import SimpleNamespace

    from pods.rollout import ENGINES, returns_logprobs
    from pods.train.checks import check
    from pods.train.trainer import Trainer

    monkeypatch.setitem(ENGINES, "plain", SimpleNamespace(build=None))
    assert [returns_logprobs(name) for name in ("auto", "hf", "vllm", "plain")] == \
        [True, True, True, False]
    cfg = from_dict(dict(engine="plain", is_correction="token_mask",
                         model=str(tmp_path / "no-model"), out_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="engine 'plain' returns none.*--is-correction none"):
        Trainer(cfg)
    check(cfg.replace(is_correction="none"))  # without a correction any engine will do
    check(cfg.replace(engine="hf"))
