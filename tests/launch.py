"""Launching `pods` in subprocesses (one process, torchrun or accelerate launch) and
comparing two runs; shared by the distributed tests of each engine."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from pods.config import load_yaml
from pods.runs.metrics import read_metrics

WORKER = Path(__file__).parent / "distributed_worker.py"
ACCELERATE_DDP = Path(__file__).parents[1] / "configs" / "accelerate" / "ddp.yaml"
SAME = ("rollout/reward_mean", "select/reward_mean", "select/var_kept", "select/var_full",
        "select/zero_var_frac")


ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
# vLLM's CPU build compiles the model with inductor in every new process (about 28 s of a
# 2-core machine's time, caches cold, as in CI). VLLM_CPU_CI_ENV, what vLLM's own CPU CI
# sets, keeps the graph capture but runs it eagerly: for the tests that start a process per
# run, whose checks do not depend on the backend. The compiled model is tested in process
# (tests/rollout/test_vllm.py, tests/models/test_smollm2_vllm.py).
EAGER_VLLM = {"VLLM_CPU_CI_ENV": "1"}


def launcher(procs: int, accelerate: bool = False) -> list[str]:
    """The command before pods's arguments: one plain process, or ``procs`` processes
    under torchrun (or accelerate launch with the shipped DDP config, on CPUs)."""
    if accelerate:
        return [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                str(ACCELERATE_DDP), "--cpu", f"--num_processes={procs}", str(WORKER)]
    if procs > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={procs}", str(WORKER), "--"]
    return [sys.executable, str(WORKER)]


def pods(args: list[str], procs: int, timeout: float = 240, accelerate: bool = False,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`pods ARGS`, launched as ``launcher`` says (``env``: added to ``ENV``); it must
    succeed."""
    done = subprocess.run(launcher(procs, accelerate) + args, env={**ENV, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def train_args(model_dir, out, name, **fields) -> list[str]:
    base = dict(model=model_dir, task="even_start", prompts_per_step=4, n=6, m=3,
                max_new_tokens=4, max_time="none", eval_every=1e9, eval_size=8,
                checkpoint_every=1e9, lr=2e-3, lr_schedule="constant", out_dir=out,
                run_name=name, progress="false", recipe="embedded")
    args = ["train"]
    for key, value in {**base, **fields}.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return args


def read_config(run: Path) -> dict:
    return load_yaml(run / "config.yaml")


def assert_same_run(one: Path, two: Path, step: int) -> None:
    for kind in ("step", "eval"):  # (a resumed run also evaluated where it stopped)
        ones = {r["step"]: r for r in read_metrics(one / "metrics.jsonl", kind)}
        twos = {r["step"]: r for r in read_metrics(two / "metrics.jsonl", kind)}
        assert step in ones and step in twos
        for a, b in ((ones[k], twos[k]) for k in ones.keys() & twos.keys()):
            for key in SAME if kind == "step" else ("eval/accuracy", "eval/reward_mean"):
                assert a[key] == b[key], (kind, a["step"], key)  # the same rollouts, kept
            if kind == "step":
                assert b["loss/grad_norm"] == pytest.approx(a["loss/grad_norm"], rel=1e-4)
    name = f"checkpoints/step_{step:06d}/model"
    assert saved_tensors(one / name) == saved_tensors(two / name)  # tied weights once, always
    a = AutoModelForCausalLM.from_pretrained(one / name).state_dict()
    b = AutoModelForCausalLM.from_pretrained(two / name).state_dict()
    start = AutoModelForCausalLM.from_pretrained(read_config(one)["model"]).state_dict()
    assert max((a[k] - start[k]).abs().max() for k in a) > 1e-3  # the model did move
    for key in a:  # float noise, and Adam's ~lr * sign(grad) where a gradient is ~0
        torch.testing.assert_close(b[key], a[key], rtol=1e-4, atol=1e-4)


def saved_tensors(model_dir: Path) -> set[str]:
    """The tensor names in a saved model folder's safetensors files."""
    from safetensors import safe_open

    names: set[str] = set()
    for file in model_dir.glob("*.safetensors"):
        with safe_open(file, "pt") as weights:
            names |= set(weights.keys())
    return names
