"""`pods plan`'s predicted seconds per step against steps measured by `pods train`.

Runs `pods plan` once for the config (the base model's rewards and this machine's costs),
then, for each candidate, `pods train` with the same config and that P, n, m for --steps
steps of the base model (one round of generation a step, as the planner models it; lr
1e-20, since the config needs lr > 0: the weights stay the base model's, whose pass rate
the planner measured, while every update still runs);
prints predicted and measured seconds per step (the mean over steps 2 to --steps: the
first is a warm-up), the measured share of steps that updated against the predicted
chance, and measured over predicted. Each run is its own process, one after another (time
nothing else meanwhile).

    .venv-vllm/bin/python benchmarks/runs/plan_accuracy.py \
        --config configs/smollm2_wordproblems.yaml --candidates 1x16/4,1x8/8,1x32/8 \
        --prompts 64 --steps 24 --out runs/plan_accuracy
    .venv/bin/python benchmarks/runs/plan_accuracy.py --model tiny --candidates 4x8/2,8x16/4 ...
    .venv/bin/python benchmarks/runs/plan_accuracy.py --quick   # tiny, 2x4/2, 3 steps
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402
from pods.runs.metrics import read_metrics  # noqa: E402


def pods(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pods", *args], check=True)


def measured(run: Path) -> tuple[float, float, int]:
    """(mean seconds per step over steps 2.., share of them that updated, steps)."""
    steps = read_metrics(run / "metrics.jsonl", "step")[1:]
    return (sum(r["time/step"] for r in steps) / len(steps),
            sum(1 - r.get("optim/skipped", 0) for r in steps) / len(steps), len(steps))


def main() -> None:
    parser = suite.parser(__doc__, "the tiny model, candidate 2x4/2, 3 steps, in a temp dir")
    parser.add_argument("--config", default=None)
    parser.add_argument("--model", default=None, help="instead of --config (e.g. tiny)")
    parser.add_argument("--candidates", help="PxN/M,... (required)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--prompts", type=int, default=16, help="pods plan --prompts")
    parser.add_argument("--out", default="runs/plan_accuracy")
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory(prefix="pods-plan-")  # --quick's runs
    if args.quick:
        args.model, args.config, args.candidates = "tiny", None, "2x4/2"
        args.steps, args.prompts, args.out = 3, 4, scratch.name
    if not args.candidates or not (args.config or args.model):
        parser.error("give --candidates and --config or --model (or --quick)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = ["--config", args.config] if args.config else ["--model", args.model]
    plan = out / "plan.json"
    if not plan.is_file():
        pods("plan", *base, "--candidates", args.candidates, "--prompts", str(args.prompts),
             "--json", str(plan))
    predictions = {f"{p['candidate']['P']}x{p['candidate']['n']}/{p['candidate']['m']}": p
                   for p in json.loads(plan.read_text())["predictions"]}
    rows = []
    for text in args.candidates.split(","):
        P, rest = text.split("x")
        n, m = rest.split("/")
        run = out / text.replace("/", "_")
        if not (run / "metrics.jsonl").is_file() or measured(run)[2] < args.steps - 1:
            shutil.rmtree(run, ignore_errors=True)  # an unfinished measurement: again
            pods("train", *base, "--prompts-per-step", P, "--n", n, "--m", m,
                 "--max-steps", str(args.steps), "--max-time", "100000", "--eval-size", "4",
                 "--eval-every", "100000", "--checkpoint-every", "100000", "--progress", "false",
                 "--dynamic-sampling", "false", "--lr", "1e-20",
                 "--out-dir", str(out), "--run-name", run.name)
        seconds, updated, count = measured(run)
        p = predictions[text]
        rows.append({"candidate": text, "predicted_s": p["step_s"], "measured_s": seconds,
                     "predicted_updates": p["update_chance"], "measured_updates": updated,
                     "steps": count})
    print(f"{suite.machine()}; config {args.config or args.model}")
    print(suite.markdown(
        ["P x n / m", "predicted s/step", "measured s/step", "measured / predicted",
         "predicted updates", "measured updates", "steps measured"],
        [[r["candidate"], f"{r['predicted_s']:.2f}", f"{r['measured_s']:.2f}",
          f"{r['measured_s'] / r['predicted_s']:.2f}", f"{100 * r['predicted_updates']:.0f}%",
          f"{100 * r['measured_updates']:.0f}%", r["steps"]] for r in rows]))
    suite.write_json(args.json, rows)


if __name__ == "__main__":
    main()
