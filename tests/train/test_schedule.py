import math

import pytest
import torch

from pods.train.schedule import budget_progress, lr_multiplier


@pytest.mark.parametrize("progress, expected", [
    (0.0, 1.0), (0.25, (1 + math.cos(math.pi / 4)) / 2), (0.5, 0.5), (1.0, 0.0), (1.5, 0.0),
])
def test_cosine_without_warmup_or_floor(progress, expected):
    assert lr_multiplier(progress, "cosine") == pytest.approx(expected)


@pytest.mark.parametrize("schedule, progress, expected", [
    # warm-up 0.1: p / 0.1 below it, whatever the schedule
    ("cosine", 0.0, 0.0), ("cosine", 0.05, 0.5), ("linear", 0.02, 0.2), ("constant", 0.05, 0.5),
    # after it, q = (p - 0.1) / 0.9; floor 0.2: 0.2 + 0.8 * decay(q)
    ("cosine", 0.1, 1.0),            # q = 0
    ("cosine", 0.55, 0.6),           # q = 0.5: 0.2 + 0.8 * 0.5
    ("linear", 0.325, 0.8),          # q = 0.25: 0.2 + 0.8 * 0.75
    ("linear", 1.0, 0.2), ("cosine", 1.0, 0.2),  # ends on the floor
    ("constant", 0.1, 1.0), ("constant", 1.0, 1.0),  # constant ignores the floor
])
def test_warmup_then_decay_to_the_floor(schedule, progress, expected):
    assert lr_multiplier(progress, schedule, warmup=0.1, floor=0.2) == pytest.approx(expected)


def test_decay_never_rises():
    for schedule in ("linear", "cosine"):
        values = [lr_multiplier(i / 100, schedule, warmup=0.05, floor=0.1) for i in range(5, 101)]
        assert all(a >= b for a, b in zip(values, values[1:], strict=False)), schedule


def test_unknown_schedule_says_which_exist():
    with pytest.raises(ValueError, match="constant, linear, cosine"):
        lr_multiplier(0.5, "step")


@pytest.mark.parametrize("steps, seconds, max_steps, max_time, expected", [
    (25, 0.0, 100, None, 0.25),      # a step budget
    (25, 30.0, None, 60.0, 0.5),     # a time budget
    (25, 30.0, 100, 60.0, 0.5),      # both: the one further along ends the run
    (90, 30.0, 100, 60.0, 0.9),
    (120, 0.0, 100, None, 1.0),      # never past the end
])
def test_budget_progress(steps, seconds, max_steps, max_time, expected):
    assert budget_progress(steps, seconds, max_steps, max_time) == pytest.approx(expected)


def test_a_resumed_run_follows_the_uninterrupted_schedule(tiny_model_dir, tmp_path):
    from pods.runs.metrics import read_metrics
    from pods.train.run import resume, train
    from runs import config, train_interrupted, weights

    # 4 steps, warm-up half the budget, cosine to 0.1: progress k/4 for step k gives
    # 0.25 -> 0.25/0.5 = 0.5; 0.5 -> q=0: 1; 0.75 -> q=0.5: 0.1 + 0.9*0.5 = 0.55; 1 -> 0.1
    schedule = dict(max_steps=4, lr=1e-2, lr_schedule="cosine", warmup_frac=0.5, lr_floor=0.1)
    whole = train(config(tiny_model_dir, tmp_path, run_name="whole", **schedule))
    train_interrupted(config(tiny_model_dir, tmp_path, run_name="part", **schedule), after=2)
    part = resume(tmp_path / "part")
    lrs = [[r["optim/lr"] for r in read_metrics(run / "metrics.jsonl", "step")]
           for run in (whole, part)]
    assert lrs[0] == pytest.approx([5e-3, 1e-2, 5.5e-3, 1e-3]) and lrs[1] == lrs[0]
    a = weights(whole / "checkpoints" / "step_000004" / "model")
    b = weights(part / "checkpoints" / "step_000004" / "model")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6)
