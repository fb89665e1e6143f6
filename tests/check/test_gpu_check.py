"""benchmarks/gpu.py, the prepared GPU check, rehearsed on the CPU (--quick: tiny sizes):
every section runs through pods's own code and lands in the table and gpu.json."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_runs_on_a_cpu_and_prints_its_table(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--quick",
                           "--out", str(tmp_path), "--skip", "default,tests"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "gpu.json").read_text())
    assert [(r["model"], r["rows"]) for r in report["update"]] == \
        [("SmolLM2-135M", 2), ("Qwen2.5-1.5B", 2)]
    for row in report["update"]:
        assert row["precision"] == "float32 weights, float32 compute"  # the CPU default
        assert row["pods"]["tok_s"] > 0 and row["bare"]["tok_s"] > 0
        assert 0 < row["pods"]["share"]
    generation = report["generate"][0]
    assert min(generation[k] for k in ("engine_tok_s", "static_tok_s", "raw_tok_s")) > 0
    profile = (tmp_path / "profile.txt").read_text()  # the update's operators, by own time
    assert "Self CPU" in profile and "aten::" in profile
    heads = report["head"]  # the output head's chunk size and recompute varied
    assert [h["variant"] for h in heads][-1] == "chunks of 2^25 floats, kept (no recompute)"
    assert len(heads) == 3 and all(h["tok_s"] > 0 for h in heads)
    pods_head = {k: v for k, v in heads[0].items() if k != "variant"}
    assert pods_head == report["update"][-1]["pods"]  # pods's own head: not measured twice
    table = (tmp_path / "gpu.md").read_text()
    assert "| SmolLM2-135M | 2 | float32 weights, float32 compute |" in table
    assert "| output head (Qwen2.5-1.5B arch., 2 rows) |" in table


def test_the_check_measures_the_architectures_in_the_gpu_default_precision(monkeypatch):
    """bf16 compute on a GPU with bf16, as a user's model gets it (not the embedded model's
    float32, which plain ModelConfig() would plan for)."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("gpu", ROOT / "benchmarks" / "gpu.py")
    gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    for name in gpu.ARCHITECTURES:
        precision = gpu.default_precision(name, torch.device("cuda"))
        assert (precision.weights, precision.update) == (torch.float32, "bf16")
