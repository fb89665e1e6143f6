"""SmolLM2-135M-Instruct with the vllm engine (vLLM's CPU build), as the showcase runs it:
`--mixed-precision auto` over float32 weights (bf16 compute where the CPU has native bf16,
float32 where it would be emulated, several times slower), vLLM's own generator. Runs in
.venv-vllm (`tox -e vllm`, part of `make test`); vLLM compiles the model once per process
(about 2 minutes here): one run, in this process. Resume and `pods eval` with vLLM:
tests/rollout/test_vllm_runs.py."""

import pytest

from launch import saved_tensors
from pods.cli import main
from pods.runs.metrics import read_metrics
from runs import varied_rewards

pytestmark = pytest.mark.vllm


def test_a_vllm_run_on_the_model_trains_and_checkpoints(offline, tmp_path, monkeypatch):
    varied_rewards(monkeypatch)  # each step updates: 16 tokens earn no real reward
    args = ["--model", "smollm2", "--task", "wordproblems", "--engine", "vllm",
            "--mixed-precision", "auto", "--vllm-seeded", "false", "--n", "4", "--m", "2",
            "--prompts-per-step", "1", "--max-new-tokens", "16", "--eval-size", "4",
            "--eval-every", "1e9", "--checkpoint-every", "1e9", "--device", "cpu",
            "--progress", "false", "--out-dir", str(tmp_path), "--run-name", "run",
            "--recipe", "embedded"]
    assert main(["train", *args, "--max-steps", "2"]) == 0  # in process: one compile
    run = tmp_path / "run"
    steps = read_metrics(run / "metrics.jsonl", "step")
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # another engine's kernels (and bf16 where native): close, not equal
        assert 0 < r["rollout/logprob_gap"] < 0.2 and r["time/sync"] > 0
    assert len(saved_tensors(run / "checkpoints" / "step_000002" / "model")) == 272
    assert len(read_metrics(run / "metrics.jsonl", "eval")) == 2  # start and end
