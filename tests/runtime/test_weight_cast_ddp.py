"""--weight-cast step under DDP (2 CPU processes, torchrun, gloo): DDP's wrapper does not see
the gradients made on the bf16 copy, so the update averages them itself; the run must
train as one process does (bf16 compute: to bf16 tolerance, not bit for bit)."""

import pytest

from launch import SAME, pods, train_args
from pods.runs.metrics import read_metrics

pytestmark = pytest.mark.xdist_group("launch")


def test_two_processes_on_the_bf16_copy_match_one(tiny_model_dir, tmp_path):
    fields = dict(max_steps=2, micro_batch_size=2, loss_norm="token", mixed_precision="bf16",
                  weight_cast="step")
    pods(train_args(tiny_model_dir, tmp_path, "one", **fields), procs=1)
    pods(train_args(tiny_model_dir, tmp_path, "two", **fields), procs=2)
    one, two = (read_metrics(tmp_path / name / "metrics.jsonl", "step")
                for name in ("one", "two"))
    assert len(one) == len(two) == 2
    for a, b in zip(one, two, strict=True):
        assert all(a[key] == b[key] for key in SAME)  # the same rollouts, kept alike
        # unaveraged, each rank's gradient is its half's: the norm would differ by far more
        assert b["loss/grad_norm"] == pytest.approx(a["loss/grad_norm"], rel=2e-2)
