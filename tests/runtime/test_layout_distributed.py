"""The packed update layouts on 2 CPU processes (torchrun, gloo) against the padded layout
on one: DDP with batch-level selection (ranks keep unequal numbers of rows, padding rows,
micro-batches by tokens, so the ranks run unequal numbers of parts) and FSDP2. The same
rollouts and selections, and weights within ``assert_same_run``'s 1e-4."""

import pytest

from launch import assert_same_run, pods, train_args
from pods.runs.metrics import read_metrics

pytestmark = pytest.mark.xdist_group("launch")  # one worker, in turn

BATCH = dict(max_steps=3, selection="batch", n=8, m=2, temperature=2.0, loss_norm="token")


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp2"])
def test_shared_prompts_on_two_processes_match_padded_on_one(tiny_model_dir, tmp_path,
                                                              parallelism):
    pods(train_args(tiny_model_dir, tmp_path, "padded", update_layout="padded",
                    **BATCH), procs=1)
    pods(train_args(tiny_model_dir, tmp_path, "shared", update_layout="shared_prompt",
                    micro_batch_tokens=12, parallelism=parallelism, **BATCH), procs=2)
    assert_same_run(tmp_path / "padded", tmp_path / "shared", step=3)
    shared = read_metrics(tmp_path / "shared" / "metrics.jsonl", "step")
    assert any(r["select/pad_rows"] > 0 for r in shared)  # the ranks kept unequal numbers
    assert all(r["update/positions"] > 0 and r["update/padded_positions"] > 0 for r in shared)
