"""`pods train` with the default update layout (auto) on tiny random models of the
architectures that broke it: models whose packed pass raises (StableLM and Falcon decoder
layers do not hand the ``pods_packing`` keyword to attention, MPT has its own attention)
and a windowed Mistral config with ``layer_types`` train padded, said at start-up; models
with dropout (GPT-2's 0.1, LoRA's lora_dropout 0.05) keep shared_prompt, the self-check
running in eval mode, and their step records equal padded's. Each run ends in the layout
its start-up line announced, without a fallback warning. Every model is built from its
config and saved locally (no hub)."""

import json
import warnings

import pytest

from pods.train.run import train
from runs import config
from tiny_architectures import ARCHITECTURES, save_tiny

LORA = dict(lora_rank=4, lora_alpha=8, lora_dropout=0.05)
DROPOUT = {"loss/grad_norm": 5e-2, "rollout/logprob_": 1.0}  # what dropout moves: the
# gradient, and the trainer's log-probs of the training pass that the engine's (sampled
# without dropout) are compared to: that gap is the dropout's own noise, of its size


def saved(name: str, tiny_model_dir: str, folder) -> str:
    """The folder of the tiny ``name`` model (the session's tiny Qwen2 for LoRA)."""
    return tiny_model_dir if ARCHITECTURES[name][0] is None else save_tiny(name, folder)


def run(model_dir, tmp_path, name, **fields) -> tuple[list[str], list[dict]]:
    """Two steps of ``model_dir``: the lines the run said, and its step records."""
    said = []
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*falls back to --update-layout padded")
        run_dir = train(config(model_dir, tmp_path, run_name=name, **fields), log=said.append)
    records = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
               if r["kind"] == "step"]
    return said, records


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_each_model_ends_in_the_layout_its_start_line_announced(name, tiny_model_dir,
                                                                 tmp_path):
    model_dir = saved(name, tiny_model_dir, tmp_path / "model")
    lora = LORA if ARCHITECTURES[name][0] is None else {}
    said, records = run(model_dir, tmp_path, "auto", **lora)
    announced = next(line for line in said if line.startswith("update layout: "))
    layout = ARCHITECTURES[name][1]
    assert announced.startswith(f"update layout: auto chose {layout} ("), announced
    assert len(records) == 2 and all(r["optim/skipped"] == 0 for r in records)
    if layout == "padded":  # every pass padded: its positions are padded's
        assert all(r["update/positions"] == r["update/padded_positions"] for r in records)
        return
    assert any("gives padded's log-probs" in line for line in said)  # checked, kept
    assert all(r["update/positions"] < r["update/padded_positions"] for r in records)
    _, padded = run(model_dir, tmp_path, "padded", update_layout="padded", **lora)
    # dropout draws other masks in the two layouts' training passes (their shapes differ):
    # the first step's gradient norm agrees to its noise only, and the weights part after it
    assert_same_records(padded[:1], records[:1], noisy=DROPOUT)


def test_a_step_of_the_embedded_default_equals_padded(tmp_path):
    """Two steps of `pods train` with each layout: every field of the records equal but
    times and the positions (float32 rounding: the loss and gradient norm to 1e-4)."""
    from pods.cli import main

    for layout in ("padded", "shared_prompt"):
        main(["train", "--max-steps", "2", "--eval-every", "1e9", "--update-layout", layout,
              "--out-dir", str(tmp_path), "--run-name", layout, "--progress", "false",
              "--checkpoint-every", "1e9"])
    records = {layout: [r for r in map(json.loads, (tmp_path / layout / "metrics.jsonl")
                                       .read_text().splitlines()) if r["kind"] == "step"]
               for layout in ("padded", "shared_prompt")}
    assert_same_records(records["padded"], records["shared_prompt"])
    for want, got in zip(records["padded"], records["shared_prompt"], strict=True):
        assert got["update/positions"] < 0.5 * want["update/positions"]
        assert got["update/padded_positions"] == want["update/positions"]


# records that mean the same in every layout but whose value is the layout's shape
LAYOUT_SHAPED = ("optim/micro_batch_tokens", "optim/micro_batch_size")


def assert_same_records(want: list[dict], got: list[dict], noisy=None) -> None:
    """Step records of two layouts equal but times, memory and positions: the same rollouts
    and selections, losses and gradient norms to float32 rounding (1e-4; ``noisy``: key
    prefixes and their relative tolerance); the engine's log-prob gap is float noise of
    ~1e-6 in either layout."""
    noisy = noisy or {}
    rel = lambda key: next((v for k, v in noisy.items() if key.startswith(k)), 1e-4)  # noqa: E731
    for a, b in zip(want, got, strict=True):
        assert a.keys() == b.keys()  # the same records, whatever the layout
        for key, value in a.items():
            if key.startswith(("time", "mem/", "update/")) or key in LAYOUT_SHAPED:
                continue
            if isinstance(value, str):
                assert b[key] == value, key
            else:
                small = 1e-5 if key.startswith("rollout/logprob_") else 1e-6
                assert b[key] == pytest.approx(value, rel=rel(key), abs=small), key
