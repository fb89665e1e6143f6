"""Comparison folders written by hand: run folders with chosen eval records, and a spec."""

from pathlib import Path

import yaml

from pods.runs.metrics import MetricsWriter


def write_run(run_dir: Path, evals, steps=(), done=True, machine=None) -> Path:
    """A run folder with eval records [(time, accuracy)] or [(time, accuracy, step)] (steps
    default to 0, 1, 2, ... in the order given) and step records [dicts]; first a "machine"
    record with the fields of ``machine`` if given."""
    w = MetricsWriter(run_dir / "metrics.jsonl")
    if machine is not None:
        w.write({"kind": "machine", "step": 0, "time": 0, **machine})
    for i, (t, acc, *step) in enumerate(evals):
        w.write({"kind": "eval", "step": step[0] if step else i, "time": t, "eval/accuracy": acc})
    for s in steps:
        w.write({"kind": "step", **s})
    if done:
        w.write({"kind": "done", "step": len(evals), "time": evals[-1][0] if evals else 0})
    w.close()
    return run_dir


def write_spec(out: Path, baseline: str | list[str], variants) -> None:
    out.mkdir(parents=True, exist_ok=True)
    spec = {"seeds": [0], "baseline": baseline, "variants": {v: {} for v in variants}}
    (out / "compare.yaml").write_text(yaml.safe_dump(spec))


def write_checkpoint(run_dir: Path, step: int = 1) -> Path:
    """A checkpoint folder as pods.runs.checkpoints finds one (its state file empty)."""
    path = run_dir / "checkpoints" / f"step_{step}"
    path.mkdir(parents=True)
    (path / "state.pt").write_bytes(b"")
    (run_dir / "checkpoints" / "latest").write_text(path.name)
    return path
