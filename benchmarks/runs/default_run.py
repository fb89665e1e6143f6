"""The embedded default (`pods train`, what `make run` runs) over several seeds.

Each seed is one `pods train --seed S` in its own process, the real entry point, timed from
start to exit (wall s: model loading, evaluations and checkpoints included). Every seed
starts from the shipped embedded model (pods.models.tiny: nothing is built), so the start
accuracy is the same on every machine. Prints a table (seed, start accuracy, best accuracy
and when, final accuracy, steps, training s, wall s), then the mean and a 95% interval over
the seeds (Student t) of best, final, best - final and wall s.

    python benchmarks/runs/default_run.py --seeds 0 1 2 3 4
    python benchmarks/runs/default_run.py --seeds 0 1 2 -- --lr 1e-3   # a variant
    python benchmarks/runs/default_run.py --quick   # seed 0, 4 steps, 16 test problems

Arguments after ``--`` are passed to every `pods train` (a variant of the default).
"""

from __future__ import annotations

import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402
from pods.runs.metrics import read_metrics  # noqa: E402


def run_seed(seed: int, out_dir: Path, extra: list[str]) -> dict:
    """One `pods train` run; its accuracy curve summarised."""
    pods = Path(sys.executable).with_name("pods")
    command = [str(pods), "train", "--seed", str(seed), "--out-dir", str(out_dir),
               "--run-name", f"seed{seed}", "--progress", "false", *extra]
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    records = read_metrics(out_dir / f"seed{seed}" / "metrics.jsonl")
    evals = [r for r in records if r["kind"] == "eval"]
    done = [r for r in records if r["kind"] == "done"][-1]
    best = max(evals, key=lambda r: r["eval/accuracy"])
    return {"seed": seed, "start": 100 * evals[0]["eval/accuracy"],
            "best": 100 * best["eval/accuracy"], "best_step": best["step"],
            "best_s": best["time"], "final": 100 * evals[-1]["eval/accuracy"],
            "steps": done["step"], "train_s": done["time"], "wall_s": wall}


def interval(values: list[float]) -> str:
    """mean +- the 95% half-width over seeds."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.1f}"
    from scipy.stats import t  # the two-sided 95% Student t quantile

    half = t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return f"{mean:.1f} +- {half:.1f}"


def report(rows: list[dict]) -> None:
    print(suite.markdown(
        ["seed", "start %", "best %", "best at (step, s)", "final %", "best - final", "steps",
         "training s", "wall s"],
        [[r["seed"], f"{r['start']:.1f}", f"{r['best']:.1f}", f"{r['best_step']}, "
          f"{r['best_s']:.0f}", f"{r['final']:.1f}", f"{r['best'] - r['final']:.1f}",
          r["steps"], f"{r['train_s']:.1f}", f"{r['wall_s']:.1f}"] for r in rows], "l" * 9))
    print(f"\nover {len(rows)} seeds, mean +- 95% interval (Student t):")
    for key, name in (("best", "best %"), ("final", "final %"), ("gap", "best - final"),
                      ("wall_s", "wall s")):
        values = [r["best"] - r["final"] if key == "gap" else r[key] for r in rows]
        print(f"  {name:13s} {interval(values)}  (min {min(values):.1f}, max {max(values):.1f})")


def main() -> None:
    parser = suite.parser(__doc__, "seed 0, 4 steps, 16 test problems")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out-dir", default=None, help="run folders (default: a temp dir)")
    parser.add_argument("extra", nargs="*", help="after --: flags for every `pods train`")
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory(prefix="pods-default-")  # --quick: removed after
    if args.quick:
        args.seeds, args.extra = [0], [*args.extra, "--max-steps", "4", "--eval-size", "16"]
        args.out_dir = args.out_dir or scratch.name
    out_dir = Path(args.out_dir or tempfile.mkdtemp(prefix="pods-default-"))
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    print(f"machine: {suite.machine()}")
    print(f"pods train --seed S {shlex.join(args.extra)}; run folders in {out_dir}")
    from pods.models.tiny import embedded_model_path

    print(f"embedded model (shipped): {embedded_model_path()}\n")
    rows = []
    for seed in args.seeds:
        rows.append(run_seed(seed, out_dir, args.extra))
        r = rows[-1]
        print(f"seed {seed}: {r['start']:.1f}% -> best {r['best']:.1f}%, final "
              f"{r['final']:.1f}%, {r['wall_s']:.0f} s", flush=True)
    print()
    report(rows)
    suite.write_json(args.json, rows)


if __name__ == "__main__":
    main()
