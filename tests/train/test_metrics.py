"""The end-of-run summary, with worked numbers."""

import json

from pods.runs.metrics import run_summary


def test_run_summary_worked_numbers(tmp_path):
    records = [
        {"kind": "eval", "step": 0, "time": 0.0, "eval/accuracy": 0.25},
        {"kind": "step", "step": 1, "time": 1.0, "time/generate": 0.6, "time/reward": 0.0,
         "time/select": 0.0, "time/update": 0.3, "time/sync": 0.1, "time/step": 1.0},
        {"kind": "eval", "step": 1, "time": 1.0, "eval/accuracy": 0.75},
        {"kind": "step", "step": 2, "time": 4.0, "time/generate": 1.8, "time/reward": 0.0,
         "time/select": 0.0, "time/update": 0.9, "time/sync": 0.3, "time/step": 3.0},
        {"kind": "eval", "step": 2, "time": 4.0, "eval/accuracy": 0.5},
        {"kind": "done", "step": 2, "time": 4.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert run_summary(tmp_path).splitlines() == [
        f"run folder: {tmp_path}",
        "test accuracy: 25.0% at the start, best 75.0% (step 1, 1 s), 50.0% at the end",
        # 4 s over 2 steps; generate 2.4/4 = 60%, update 1.2/4 = 30%, sync 0.4/4 = 10%
        "2 steps in 4.0 training seconds (2.000 s per step: generate 60%, reward 0%, "
        "select 0%, update 30%, sync 10%)",
    ]  # no curve.png yet: no line for it


def test_run_summary_says_the_updates_positions_as_a_share_of_padded(tmp_path):
    """Summed over the run, not averaged per step: (30 + 10) / (100 + 60) = 0.25."""
    records = [
        {"kind": "step", "step": 1, "time": 1.0, "time/update": 1.0, "time/step": 1.0,
         "update/positions": 30.0, "update/padded_positions": 100.0},
        {"kind": "step", "step": 2, "time": 2.0, "time/update": 1.0, "time/step": 1.0,
         "update/positions": 10.0, "update/padded_positions": 60.0},
        {"kind": "done", "step": 2, "time": 2.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert "the update processed 0.250 of the positions padded rows would have " \
           "(update/positions / update/padded_positions)" in run_summary(tmp_path).splitlines()
