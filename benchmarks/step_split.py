"""Where a training step's time goes: per-phase seconds per step of finished runs, read
from their metrics.jsonl (the trainer times each phase: generate, reward, select, update,
weight sync), with each run's seconds per step as a ratio to the first run's.

The paper's comparison (SmolLM2-135M-Instruct, the showcase's config, the first 12 steps of
each method from the same base model, one after the other on a quiet machine):

    for v in "grpo --n 16 --m 16" "pods --n 64 --m 16" \\
             "grpo_ga --n 64 --m 64 --micro-batch-size 16"; do
      set -- $v; name=$1; shift
      .venv-vllm/bin/pods train --config configs/smollm2_wordproblems.yaml "$@" \\
        --max-steps 12 --eval-size 4 --checkpoint-every 100000 --run-name $name \\
        --out-dir runs/split
    done
    python benchmarks/step_split.py runs/split/grpo runs/split/pods runs/split/grpo_ga \\
        --skip 1 --steps 5

The comparison's runs (`pods compare configs/compare_smollm2.yaml`) are read the same way,
one seed folder each (shown as ``variant/seedK``):

    python benchmarks/step_split.py runs/compare_smollm2/{grpo,pods,grpo_ga,random}/seed0

``--skip`` leaves out each run's first steps (vLLM's and the allocator's warm-up);
``--steps`` counts the same number of steps after them in every run, since completions
change length as a run learns.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

PHASES = ("generate", "reward", "select", "update", "sync")


def steps_of(run: Path, skip: int, count: int | None) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
            if line.strip()]
    steps = [r for r in rows if r.get("kind") == "step"][skip:]
    return steps if count is None else steps[:count]


def summary(run: Path, skip: int, count: int | None) -> dict:
    steps = steps_of(run, skip, count)
    if not steps:
        raise SystemExit(f"{run}: no step records after the first {skip}")
    mean = {p: statistics.fmean(s.get(f"time/{p}", 0.0) for s in steps) for p in PHASES}
    step = statistics.fmean(s["time/step"] for s in steps)
    name = f"{run.parent.name}/{run.name}" if run.name.startswith("seed") else run.name
    return {"run": name, "steps": len(steps), "step": step, **mean,
            "tokens": statistics.fmean(s["rollout/completion_len"] for s in steps),
            "kept": statistics.fmean(s["select/kept"] for s in steps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (the first: baseline)")
    parser.add_argument("--skip", type=int, default=1, help="first steps left out")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps counted after those (default: all), the same for every run")
    args = parser.parse_args()
    rows = [summary(run, args.skip, args.steps) for run in args.runs]
    print("| run | steps | s/step | " + " | ".join(PHASES) + " | completion tokens | kept "
          f"| s/step vs {rows[0]['run']} |")
    print("|---" * (len(PHASES) + 6) + "|")
    for r in rows:
        phases = " | ".join(f"{r[p]:.2f} ({r[p] / r['step']:.0%})" for p in PHASES)
        print(f"| {r['run']} | {r['steps']} | {r['step']:.2f} | {phases} | {r['tokens']:.0f} "
              f"| {r['kept']:.0f} | {r['step'] / rows[0]['step']:.2f}x |")


if __name__ == "__main__":
    main()
