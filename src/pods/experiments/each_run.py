"""Each run of a comparison on one line: its accuracy at every evaluation, the steps it made
and its seconds per step. These are the figures behind the mean curves of summary.md, so a
reader can check a summary run by run; summary.md gives them under "Each run"."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from pods.runs.metrics import read_metrics

# a variant's run folders with their eval records (pods.experiments.summary.load_runs)
Runs = list[tuple[Path, list[dict]]]

LAST = 10  # steps over which the completion length at the end is averaged


def each_run_table(variants: Mapping[str, Runs]) -> str:
    """A markdown table, one row per run, variants in the order given and seeds as loaded.

    Evaluation i is column i; its header is the median training time of evaluation i over
    the runs that have it (runs evaluate at the first step past each mark, so their times
    differ by a step or so); a run with fewer evaluations has "-" there. Then the optimizer
    steps made, the mean seconds per step (training time / steps) and the mean completion
    length over the last ``LAST`` steps.
    """
    evals = [e for runs in variants.values() for _, e in runs]
    width = max(len(e) for e in evals)
    marks = [float(np.median([e[i]["time"] for e in evals if len(e) > i])) for i in range(width)]
    head = ["variant", "seed", *(f"{t:.0f} s" for t in marks), "steps", "s/step",
            f"completion tokens (last {LAST} steps)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, runs in variants.items():
        for run, records in runs:
            accs = [f"{100 * r['eval/accuracy']:.1f}" for r in records]
            lines.append("| " + " | ".join([name, run.name.removeprefix("seed"), *accs,
                                            *["-"] * (width - len(accs)), *_steps(run)]) + " |")
    return "\n".join(lines) + "\n"


def _steps(run: Path) -> list[str]:
    """Steps made, seconds per step and the completion length at the end; "-" without step
    records."""
    steps = read_metrics(run / "metrics.jsonl", "step")
    if not steps or not steps[-1].get("step"):
        return ["-", "-", "-"]
    lengths = [r["rollout/completion_len"] for r in steps[-LAST:]
               if r.get("rollout/completion_len") is not None]
    return [str(steps[-1]["step"]), f"{steps[-1]['time'] / steps[-1]['step']:.1f}",
            f"{np.mean(lengths):.0f}" if lengths else "-"]
