"""`pods train` and `pods eval` with --engine vllm, end to end in subprocesses (vLLM's CPU
build): the logged engine/trainer gap, resume, evaluation, and 2-process DDP, each rank
with its own engine. Runs in .venv-vllm (`tox -e vllm`, part of `make test`)."""

import json

import pytest

from launch import EAGER_VLLM, assert_same_run, pods, train_args
from pods.runs.metrics import read_metrics

pytestmark = pytest.mark.vllm


def vllm_pods(args: list[str], procs: int):
    """`pods ARGS` in a new process, vLLM's compile skipped (launch.EAGER_VLLM)."""
    return pods(args, procs, env=EAGER_VLLM)


@pytest.fixture(scope="module")
def whole(vllm_model_dir, tmp_path_factory):
    """A 4-step run with the vllm engine, on one process."""
    out = tmp_path_factory.mktemp("vllm-runs")
    vllm_pods(train_args(vllm_model_dir, out, "whole", max_steps=4, engine="vllm"), procs=1)
    return out / "whole"


def test_a_vllm_run_logs_the_logprob_gap_and_the_sync(whole):
    steps = read_metrics(whole / "metrics.jsonl", "step")
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    for r in steps:
        assert 0 <= r["rollout/logprob_gap"] < 1e-4  # float32 on both sides
        assert r["time/sync"] > 0 and r["time/generate"] > 0
    assert len(read_metrics(whole / "metrics.jsonl", "eval")) == 2  # start and end


def test_a_resumed_vllm_run_continues_the_same_run(whole, vllm_model_dir, tmp_path):
    """2 steps, then --resume to 4 = the 4-step run: the engine takes the restored weights."""
    vllm_pods(train_args(vllm_model_dir, tmp_path, "part", max_steps=2, engine="vllm"), procs=1)
    vllm_pods(["train", "--resume", str(tmp_path / "part"), "--max-steps", "4"], procs=1)
    assert_same_run(whole, tmp_path / "part", step=4)


def test_two_processes_with_an_engine_each_match_one(whole, vllm_model_dir, tmp_path):
    vllm_pods(train_args(vllm_model_dir, tmp_path, "two", max_steps=4, engine="vllm"), procs=2)
    assert_same_run(whole, tmp_path / "two", step=4)


def test_pods_eval_with_the_vllm_engine(whole):
    """`pods eval` greedy on the run's test problems gives the run's own final evaluation."""
    done = vllm_pods(["eval", str(whole), "--engine", "vllm", "--repeats", "1",
                      "--eval-temperature", "0", "--eval-size", "8", "--json"], procs=1)
    lines = done.stdout.splitlines()  # the JSON object comes last, after vLLM's own lines
    start = len(lines) - 1 - lines[::-1].index("{")
    result = json.loads("\n".join(lines[start:]))["even_start"]
    final = read_metrics(whole / "metrics.jsonl", "eval")[-1]
    assert result["eval/accuracy"] == final["eval/accuracy"]
    assert result["eval/reward_mean"] == final["eval/reward_mean"]


def test_a_lora_run_syncs_the_merged_adapter_every_step(vllm_model_dir, tmp_path):
    """With LoRA the engine gets base + adapter after every step: the gap stays at float
    noise while the adapter moves the policy away from the base model."""
    vllm_pods(train_args(vllm_model_dir, tmp_path, "lora", max_steps=3, engine="vllm",
                    lora_rank=4, lora_alpha=8, lr=0.05), procs=1)
    steps = read_metrics(tmp_path / "lora" / "metrics.jsonl", "step")
    assert len(steps) == 3 and all(r["rollout/logprob_gap"] < 1e-4 for r in steps)
    from safetensors.torch import load_file

    adapter = load_file(tmp_path / "lora" / "checkpoints" / "step_000003" / "model" /
                        "adapter_model.safetensors")
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]  # zero at the start
    assert lora_b and max(v.abs().max().item() for v in lora_b) > 1e-2  # the adapter moved
