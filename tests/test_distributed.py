"""Data-parallel training on 2 CPU processes (torchrun, gloo) against 1 process."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from pods.checkpoint import latest_checkpoint
from pods.config import TrainConfig, load_yaml
from pods.distributed import Dist
from pods.metrics import read_metrics
from pods.trainer import Trainer

WORKER = Path(__file__).parent / "distributed_worker.py"
ACCELERATE_DDP = Path(__file__).parents[1] / "configs" / "accelerate" / "ddp.yaml"
SAME = ("rollout/reward_mean", "select/reward_mean", "select/var_kept", "select/var_full",
        "select/zero_var_frac")


ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


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


def pods(args: list[str], procs: int, timeout: float = 240,
         accelerate: bool = False) -> subprocess.CompletedProcess:
    """`pods ARGS`, launched as ``launcher`` says; it must succeed."""
    done = subprocess.run(launcher(procs, accelerate) + args, env=ENV, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def train_args(model_dir, out, name, **fields) -> list[str]:
    base = dict(model=model_dir, task="even_start", prompts_per_step=4, n=6, m=3,
                max_new_tokens=4, max_time="none", eval_every=1e9, eval_size=8,
                checkpoint_every=1e9, lr=2e-3, out_dir=out, run_name=name, progress="false")
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
    a = AutoModelForCausalLM.from_pretrained(one / name).state_dict()
    b = AutoModelForCausalLM.from_pretrained(two / name).state_dict()
    start = AutoModelForCausalLM.from_pretrained(read_config(one)["model"]).state_dict()
    assert max((a[k] - start[k]).abs().max() for k in a) > 1e-3  # the model did move
    for key in a:  # float noise, and Adam's ~lr * sign(grad) where a gradient is ~0
        torch.testing.assert_close(b[key], a[key], rtol=1e-4, atol=1e-4)


def test_two_processes_match_one(tiny_model_dir, tmp_path):
    """Same seed and P: the same rollouts, selections, metrics and parameters; gradient
    accumulation and the token-count loss normaliser are split over the ranks."""
    fields = dict(max_steps=3, micro_batch_size=2, loss_norm="token")
    pods(train_args(tiny_model_dir, tmp_path, "one", **fields), procs=1)
    pods(train_args(tiny_model_dir, tmp_path, "two", **fields), procs=2)
    assert_same_run(tmp_path / "one", tmp_path / "two", step=3)
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == \
        ["checkpoints", "config.yaml", "curve.png", "metrics.jsonl"]
    kinds = [r["kind"] for r in read_metrics(tmp_path / "two" / "metrics.jsonl")]
    assert kinds == ["eval", "step", "step", "step", "eval", "done"]  # rank 0 wrote, once


def test_accelerate_launch_runs_the_same(tiny_model_dir, tmp_path):
    fields = dict(max_steps=2)
    pods(train_args(tiny_model_dir, tmp_path, "one", **fields), procs=1)
    pods(train_args(tiny_model_dir, tmp_path, "acc", **fields), procs=2, accelerate=True)
    assert_same_run(tmp_path / "one", tmp_path / "acc", step=2)


def test_distributed_resume_continues_the_run(tiny_model_dir, tmp_path):
    """2 steps on 2 processes, resumed on 2 processes to 4 = 4 steps on one process; the
    random rule's generator stays in step on every rank."""
    pods(train_args(tiny_model_dir, tmp_path, "one", max_steps=4, rule="random"), procs=1)
    pods(train_args(tiny_model_dir, tmp_path, "two", max_steps=2, rule="random"), procs=2)
    pods(["train", "--resume", str(tmp_path / "two"), "--max-steps", "4"], procs=2)
    assert_same_run(tmp_path / "one", tmp_path / "two", step=4)


def _rank_pid(torchrun: subprocess.Popen, rank: int) -> int | None:
    children = Path(f"/proc/{torchrun.pid}/task/{torchrun.pid}/children").read_text().split()
    for pid in children:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ:
            return int(pid)
    return None


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_a_dead_rank_stops_the_run_and_the_checkpoint_stays_loadable(tiny_model_dir,
                                                                      tmp_path):
    args = train_args(tiny_model_dir, tmp_path, "run", max_steps=100000, max_time=1e9,
                      checkpoint_every=0.2)
    torchrun = subprocess.Popen(launcher(2) + args, env=ENV, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while latest_checkpoint(tmp_path / "run") is None and time.time() < deadline:
            assert torchrun.poll() is None, torchrun.stdout.read()[-3000:]
            time.sleep(0.2)
        os.kill(_rank_pid(torchrun, 1), signal.SIGKILL)
        output = torchrun.communicate(timeout=90)[0]
    finally:
        torchrun.kill()
    assert torchrun.returncode != 0
    assert "exitcode  : -9" in output and "rank      : 1" in output  # torchrun's report
    # Rank 0 says where the run stands, unless it was blocked in a collective when the
    # launcher stopped it.
    if "pods train: error" in output:
        assert "rank 0 of 2 stopped at step" in output and "--resume" in output
    checkpoint = latest_checkpoint(tmp_path / "run")
    step = torch.load(checkpoint / "state.pt", weights_only=False)["step"]
    pods(["train", "--resume", str(tmp_path / "run"), "--max-steps", str(step + 1),
          "--max-time", "none"], procs=1)  # loadable, on any number of processes
    assert read_metrics(tmp_path / "run" / "metrics.jsonl")[-1]["kind"] == "done"


def test_prompts_must_split_evenly_over_the_ranks(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    config = TrainConfig(model=tiny_model_dir, task="even_start", prompts_per_step=3,
                         max_steps=1, out_dir=str(tmp_path))
    with pytest.raises(ValueError, match="prompts_per_step=3 does not split over 2 "
                                         "processes.*multiple of 2"):
        Trainer(config, tmp_path)


def test_one_device_name_is_refused_for_several_processes():
    with pytest.raises(ValueError, match="use --device auto"):
        Dist("cuda:1", world=2)


def test_one_process_needs_no_engine():
    dist = Dist("cpu", world=1)
    assert dist.accelerator is None and dist.is_main and dist.shard(8) == slice(0, 8)
    x = torch.arange(6.0).view(3, 2)
    assert dist.gather(x) is x and dist.reduce({"a": 1.0}, "sum") == {"a": 1.0}
