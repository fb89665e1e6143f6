"""--weight-cast step under DDP: the masters' gradients are averaged in buckets while the
backward runs (pods.runtime.grad_buckets), equal to reducing each after it, on 2 CPU
processes (torchrun, gloo)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from launch import ENV

pytestmark = pytest.mark.xdist_group("launch")
WORKER = Path(__file__).parent / "grad_buckets_worker.py"


def test_bucketed_gradients_equal_the_plain_reduction_and_overlap_the_backward(
        tiny_model_dir):
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=2", str(WORKER), tiny_model_dir],
                          env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = [int(c) for c in re.findall(r"OK (\d+)", done.stdout)]
    assert len(counts) == 2 and all(c > 0 for c in counts)  # buckets went out early


def test_buckets_are_fixed_by_parameter_order_and_bounded():
    import torch

    from pods.runtime.grad_buckets import GradBuckets

    masters = [torch.zeros(256) for _ in range(10)]  # 1 KiB each
    buckets = GradBuckets(masters, bucket_bytes=3000)
    assert [len(b) for b in buckets.buckets] == [2, 2, 2, 2, 2]
    assert buckets.buckets[0][0] is masters[-1]  # the backward's first gradients first
