"""The update layouts on 2 CPU processes (torchrun, gloo) against the padded layout on one:
DDP with batch-level selection (ranks keep unequal numbers of rows, padding rows, ragged
widths) and FSDP2. Micro-batches by tokens give the ranks unequal numbers of parts unless
the update evens them: the packed layouts' whole groups, padded's rows of each rank's own
width (FSDP2 gathers the weights in every pass: one rank would wait for the other's).
The same rollouts and selections, and weights within ``assert_same_run``'s 1e-4. A model
whose packed pass raises (StableLM) falls back to padded on both ranks under FSDP2."""

import pytest

from launch import assert_same_run, pods, train_args
from pods.runs.metrics import read_metrics
from tiny_architectures import save_tiny

pytestmark = pytest.mark.xdist_group("launch")  # one worker, in turn

BATCH = dict(max_steps=3, selection="batch", n=8, m=2, temperature=2.0, loss_norm="token",
             dist_timeout=120)  # a rank left waiting fails in minutes, not half an hour


@pytest.fixture(scope="module")
def one_process(tiny_model_dir, tmp_path_factory):
    """The padded layout on one process, every row in one pass."""
    out = tmp_path_factory.mktemp("one-process")
    pods(train_args(tiny_model_dir, out, "padded", update_layout="padded", **BATCH), procs=1)
    return out / "padded"


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp2"])
@pytest.mark.parametrize("layout, tokens", [("shared_prompt", 12), ("padded", 20)])
def test_token_micro_batches_on_two_processes_match_padded_on_one(
        one_process, tiny_model_dir, tmp_path, parallelism, layout, tokens):
    pods(train_args(tiny_model_dir, tmp_path, "two", update_layout=layout,
                    micro_batch_tokens=tokens, parallelism=parallelism, **BATCH), procs=2)
    assert_same_run(one_process, tmp_path / "two", step=3)
    two = read_metrics(tmp_path / "two" / "metrics.jsonl", "step")
    assert any(r["select/pad_rows"] > 0 for r in two)  # the ranks kept unequal numbers
    assert all(r["update/positions"] > 0 and r["update/padded_positions"] > 0 for r in two)


def test_a_model_whose_packed_pass_raises_trains_padded_under_fsdp2(tmp_path):
    """StableLM's decoder layers do not hand the packing to attention: the start-up check
    fails at the same layer on both ranks, both agree on padded and train."""
    model = save_tiny("stablelm", tmp_path / "model")
    done = pods(train_args(model, tmp_path, "stablelm", parallelism="fsdp2",
                           micro_batch_tokens=20, **{**BATCH, "max_steps": 2}), procs=2)
    assert "update layout: auto chose padded (the packed layouts do not compute this model's " \
           "attention; tried on made-up rows: the packed pass failed: RuntimeError" in done.stdout
    records = read_metrics(tmp_path / "stablelm" / "metrics.jsonl", "step")
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["update/positions"] == r["update/padded_positions"] for r in records)
