"""The embedded default (`pods train`, what `make run` runs) over several seeds.

Each seed is one `pods train --seed S` in its own process, the real entry point, timed from
start to exit (wall s: model loading, evaluations and checkpoints included). Every seed
starts from the shipped embedded model (pods.models.tiny: nothing is built), so the start
accuracy is the same on every machine. Prints a table (seed, start accuracy, best accuracy
and when, final accuracy, steps, training s, wall s), then the mean and a 95% interval over
the seeds (Student t) of best, final, best - final and wall s.

    python benchmarks/default_run.py --seeds 0 1 2 3 4
    python benchmarks/default_run.py --seeds 0 1 2 -- --lr 1e-3   # a variant

Arguments after ``--`` are passed to every `pods train` (a variant of the default).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pods.runs.metrics import read_metrics


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    import torch

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs ({cpu}), torch {torch.__version__}, " \
           f"{torch.get_num_threads()} torch threads, load average {load}"


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
    print("| seed | start % | best % | best at (step, s) | final % | best - final | steps "
          "| training s | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['start']:.1f} | {r['best']:.1f} | {r['best_step']}, "
              f"{r['best_s']:.0f} | {r['final']:.1f} | {r['best'] - r['final']:.1f} | "
              f"{r['steps']} | {r['train_s']:.1f} | {r['wall_s']:.1f} |")
    print(f"\nover {len(rows)} seeds, mean +- 95% interval (Student t):")
    for key, name in (("best", "best %"), ("final", "final %"), ("gap", "best - final"),
                      ("wall_s", "wall s")):
        values = [r["best"] - r["final"] if key == "gap" else r[key] for r in rows]
        print(f"  {name:13s} {interval(values)}  (min {min(values):.1f}, max {max(values):.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out-dir", default=None, help="run folders (default: a temp dir)")
    parser.add_argument("extra", nargs="*", help="after --: flags for every `pods train`")
    args = parser.parse_args()
    out_dir = Path(args.out_dir or tempfile.mkdtemp(prefix="pods-default-"))
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    print(f"machine: {machine()}")
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


if __name__ == "__main__":
    main()
