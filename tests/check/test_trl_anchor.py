"""The GPU check's TRL anchor (benchmarks/gpu/trl_anchor.py, through
benchmarks/integrations/trl_vs_native.py): a worker prints each step as it ends, so a run
stopped at its share still gives the timed steps it finished."""

import argparse
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
try:
    trl_anchor = importlib.import_module("trl_anchor")
finally:
    sys.path.remove(str(ROOT / "benchmarks" / "gpu"))
STEP = '{"step": %s, "generate": 1.0, "reward": 0.1, "select": 0.0, "update": 0.5}'


def worker(tmp_path, steps: list[float], then: str) -> str:
    lines = "".join(f"print('STEP ' + {STEP % s!r}, flush=True)\n" for s in steps)
    (tmp_path / "worker.py").write_text("import sys, time\n" + lines + then)
    return str(tmp_path / "worker.py")


@pytest.fixture
def module():
    return trl_anchor.trl_vs_native()


def test_a_run_stopped_at_its_share_keeps_the_steps_it_finished(tmp_path, monkeypatch, module):
    monkeypatch.setattr(module, "__file__", worker(tmp_path, [9.0, 2.0, 4.0],
                                                   "time.sleep(60)\n"))
    cli = argparse.Namespace(model="tiny", prompts=2, steps=4, warmup=1, threads=1, beta=0.0)
    got = module.run("TRL GRPOTrainer", cli, timeout=6)
    assert [r["step"] for r in got["records"]] == [2.0, 4.0]  # after the warm-up
    assert got["step"] == 3.0 and got["stopped"] == "TRL GRPOTrainer stopped after 6 s"


def test_a_run_stopped_before_a_timed_step_says_so(tmp_path, monkeypatch, module):
    monkeypatch.setattr(module, "__file__", worker(tmp_path, [9.0], "time.sleep(60)\n"))
    cli = argparse.Namespace(model="tiny", prompts=2, steps=4, warmup=1, threads=1, beta=0.0)
    with pytest.raises(RuntimeError, match="stopped after 6 s"):
        module.run("TRL GRPOTrainer", cli, timeout=6)


def test_a_finished_run_gives_its_medians(tmp_path, monkeypatch, module):
    monkeypatch.setattr(module, "__file__", worker(tmp_path, [9.0, 2.0, 4.0, 3.0], ""))
    cli = argparse.Namespace(model="tiny", prompts=2, steps=3, warmup=1, threads=1, beta=0.0)
    got = module.run("TRL GRPOTrainer", cli, timeout=60)
    assert got["step"] == 3.0 and "stopped" not in got and len(got["records"]) == 3
