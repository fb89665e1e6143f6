"""Data-parallel training on 2 CPU processes (torchrun, gloo) against 1 process."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from launch import ENV, assert_same_run, launcher, pods, train_args
from pods.config import from_dict
from pods.runs.checkpoints import latest_checkpoint
from pods.runs.metrics import read_metrics
from pods.runtime.distributed import Dist
from pods.train.trainer import Trainer

# pytest-xdist: on one worker, in turn (accelerate launch listens on a fixed port)
pytestmark = pytest.mark.xdist_group("launch")


def test_two_processes_match_one(tiny_model_dir, tmp_path):
    """Same seed and P: the same rollouts, selections, metrics and parameters; gradient
    accumulation and the token-count loss normaliser are split over the ranks."""
    fields = dict(max_steps=3, micro_batch_size=2, loss_norm="token")
    pods(train_args(tiny_model_dir, tmp_path, "one", **fields), procs=1)
    pods(train_args(tiny_model_dir, tmp_path, "two", report_to="tensorboard", **fields),
         procs=2)
    assert_same_run(tmp_path / "one", tmp_path / "two", step=3)
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == \
        ["checkpoints", "config.yaml", "curve.png", "metrics.jsonl", "tensorboard",
         "trackers.json"]
    assert len(list((tmp_path / "two" / "tensorboard").iterdir())) == 1  # rank 0 reports
    kinds = [r["kind"] for r in read_metrics(tmp_path / "two" / "metrics.jsonl")]
    assert kinds == ["machine", "eval", "step", "step", "step", "eval", "done"]  # rank 0, once


def test_batch_selection_on_two_processes_matches_one(tiny_model_dir, tmp_path):
    """selection=batch: every rank allocates the same P*m rows from the gathered rewards;
    ranks keeping fewer rows are padded with masked rows, and the run equals one process
    (sequence-normalised loss over the rows kept on all ranks)."""
    fields = dict(max_steps=3, selection="batch", n=8, m=2, temperature=2.0)
    pods(train_args(tiny_model_dir, tmp_path, "one", **fields), procs=1)
    pods(train_args(tiny_model_dir, tmp_path, "two", **fields), procs=2)
    assert_same_run(tmp_path / "one", tmp_path / "two", step=3)
    steps = read_metrics(tmp_path / "two" / "metrics.jsonl", "step")
    assert any(r["select/pad_rows"] > 0 for r in steps)  # the ranks kept unequal numbers


def test_dynamic_sampling_on_two_processes(tiny_model_dir, tmp_path):
    """Each rank needs its own P/W groups with signal; both decide from the same gathered
    rewards, so they draw the same rounds and keep consistent groups (a disagreement would
    break the collectives or the shapes). Resumed on 2 processes, the run goes on."""
    fields = dict(dynamic_sampling="true", max_sampling_rounds=3, temperature=0.5)
    pods(train_args(tiny_model_dir, tmp_path, "two", max_steps=2, **fields), procs=2)
    pods(["train", "--resume", str(tmp_path / "two"), "--max-steps", "3"], procs=2)
    steps = read_metrics(tmp_path / "two" / "metrics.jsonl", "step")
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert all(1 <= r["rollout/rounds"] <= 3 for r in steps)
    assert all(r["rollout/prompts_drawn"] == 4 * r["rollout/rounds"] for r in steps)


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
    config = from_dict(dict(model=tiny_model_dir, recipe="embedded", task="even_start",
                            prompts_per_step=3,
                         max_steps=1, out_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="prompts_per_step=3 does not split over 2 "
                                         "processes.*multiple of 2"):
        Trainer(config)


def test_one_device_name_is_refused_for_several_processes():
    with pytest.raises(ValueError, match="use --device auto"):
        Dist("cuda:1", world=2)


def test_one_process_needs_no_engine():
    dist = Dist("cpu", world=1)
    assert dist.accelerator is None and dist.is_main and dist.shard(8) == slice(0, 8)
    x = torch.arange(6.0).view(3, 2)
    assert dist.gather(x) is x and dist.reduce({"a": 1.0}, "sum") == {"a": 1.0}


LEAVE = ("import atexit, sys, types\n"
         "from pods.runtime.distributed import leave\n"
         "if len(sys.argv) > 1: sys.modules['vllm'] = types.ModuleType('vllm')\n"
         "atexit.register(print, ' exit handlers ran', end='')\n"
         "print('written', end='')\n"
         "leave(3)\n"
         "print(' then the interpreter ends', end='')\n")


@pytest.mark.parametrize("world,vllm,code,out", [
    ("2", False, 3, "written exit handlers ran"),  # a rank under torchrun: exit handlers,
    # its output flushed, then it ends
    ("1", False, 0, "written then the interpreter ends exit handlers ran"),  # returns
    ("2", True, 3, "written exit handlers ran"),  # vLLM's exit handlers run, then it ends
])
def test_a_rank_ends_without_the_interpreter_teardown(world, vllm, code, out):
    """Under torchrun a rank ends in ``leave`` (os._exit after flushing), so no gloo thread
    can take the GIL during the interpreter's finalization and abort a finished rank; the
    exit handlers (vLLM's, a library's) run first."""
    done = subprocess.run([sys.executable, "-c", LEAVE, *(["vllm"] if vllm else [])],
                          env={**ENV, "WORLD_SIZE": world}, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout.strip()) == (code, out), done.stderr
