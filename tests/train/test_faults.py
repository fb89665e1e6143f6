"""Fault injection (CI-sized): 12 SIGKILLs at random points of a short CPU run, some inside
checkpoint writes, each followed by `pods train --resume`; the harness is
benchmarks/runs/fault_injection.py, whose table the results page quotes."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks" / "runs"))

from fault_injection import run_faults  # noqa: E402


def test_twelve_hard_kills_lose_at_most_one_checkpoint_interval(tiny_model_dir, tmp_path):
    report = run_faults(tiny_model_dir, tmp_path, kills=12, steps=1200, checkpoint_every=0.25,
                        seed=0)
    print(report.table())
    assert report.problems == []  # resumes, lost time, metrics, steps, weights (see harness)
    assert len(report.kills) == 12
    where = [k["where"] for k in report.kills]
    assert where.count("checkpoint write") >= 3 and where.count("training") >= 5
    assert all(k["next"] in ("restored", "killed in start-up") for k in report.kills)
    assert 0 < report.max_lost <= report.checkpoint_every + report.max_step_time
