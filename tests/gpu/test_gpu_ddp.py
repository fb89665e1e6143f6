"""On two CUDA GPUs (make test-gpu, where a machine has them): two DDP processes on NCCL
train as one process does (the same selection statistics), with the default layout."""

import pytest
import torch

from launch import SAME, pods, train_args
from pods.runs.metrics import read_metrics

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")]


def test_ddp_on_nccl_matches_one_process(tiny_model_dir, tmp_path):
    out = str(tmp_path)
    pods(train_args(tiny_model_dir, out, "one", max_steps=2, device="cuda"), 1)
    pods(train_args(tiny_model_dir, out, "two", max_steps=2, device="cuda"), 2)
    one = read_metrics(tmp_path / "one" / "metrics.jsonl", "step")
    two = read_metrics(tmp_path / "two" / "metrics.jsonl", "step")
    for a, b in zip(one, two, strict=True):
        for key in SAME:
            assert b[key] == pytest.approx(a[key], abs=1e-6), key
