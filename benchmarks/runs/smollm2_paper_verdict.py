"""The paper comparison on SmolLM2 (configs/compare_smollm2_paper.yaml): its verdicts, from
every run's evaluations.

The run folders of 19 of its 25 runs were lost with the machine they ran on (runs/ is not
kept in the repository) after docs/results.md had printed their evaluations from
summary.md; those rows are ``published_19.csv`` in the results folder, copied from the page
(commit 72a64d6), each accuracy an exact count out of the 256 test stories to one decimal.
The other runs' records (metrics.jsonl, config.yaml) are in ``<variant>/seed<k>/`` there.
Every run's evaluation i is placed at the grid time T[i], the page's column heading (the
median time of evaluation i over the 19), so all runs share one grid; a recorded run's own
times are printed beside, to show how far from the grid they lie (runs evaluate at the
first step past each mark).

Printed as markdown: every run's row; each variant's mean curve; then for each comparison
(PODS against each other variant, and the paper's GRPO-GA against pods' former one):
- the paper's speed-up, the baseline's time to its peak mean over the time the variant's
  mean takes to reach that accuracy, with its 95% bootstrap interval over seeds
  (pods.experiments.intervals, as `pods compare` prints it);
- the accuracy at equal training time, paired by seed, at every evaluation: the mean
  difference, its 95% t-interval, the seeds with the variant higher, and the exact
  two-sided sign-flip p-value (all 2^k sign patterns of the k differences);
- P(a run of the variant ends above a run of the baseline), with its bootstrap interval.

    .venv/bin/python benchmarks/runs/smollm2_paper_verdict.py [results/smollm2_paper] [--plot PNG]
    .venv/bin/python benchmarks/runs/smollm2_paper_verdict.py --quick   # the same: seconds
"""

from __future__ import annotations

import csv
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402
from pods.experiments.intervals import paired_difference, step_functions, versus  # noqa: E402
from pods.experiments.power import detectable_difference, missing_seed_fills, seeds_needed  # noqa: E402
from pods.experiments.run_records import load_runs  # noqa: E402
from pods.experiments.tables import ci_cell, num, paired_cell, ratio_cell, step_cells  # noqa: E402

# (variant, baseline): PODS against each other variant; the two GRPO-GAs against each other
PAIRS = [("pods", "grpo"), ("pods", "grpo_ga"), ("pods", "grpo_ga_one_group"),
         ("pods", "random"), ("grpo_ga_one_group", "grpo_ga")]
FEASIBLE = np.arange(-256, 257) / 256  # a difference of two accuracies out of 256 stories


@dataclass(frozen=True)
class Row:
    """One run: its accuracy at each evaluation and the page's last three cells."""

    variant: str
    seed: str
    accs: list[float]  # [E] in [0, 1]
    cells: list[str]  # steps, seconds per step, completion tokens (last 10 steps)
    times: list[float] | None  # [E] its recorded eval times; None for a published row


def published(path: Path) -> tuple[list[float], list[Row]]:
    """The grid times (from the ``acc_<t>s`` headers) and the published rows."""
    with path.open() as f:
        table = list(csv.DictReader(f))
    keys = [k for k in table[0] if k.startswith("acc_")]
    grid = [float(k.removeprefix("acc_").removesuffix("s")) for k in keys]
    rows = [Row(r["variant"], r["seed"], [float(r[k]) / 100 for k in keys],
                [r["steps"], r["sec_per_step"], r["completion_tokens_last10"]], None)
            for r in table]
    return grid, rows


def recorded(folder: Path) -> list[Row]:
    """The runs whose folders are here, read as `pods compare` reads them."""
    return [Row(name, run.seed, [e["eval/accuracy"] for e in run.evals], step_cells(run),
                [e["time"] for e in run.evals])
            for name, runs in load_runs(folder).items() for run in runs]


def check(rows: list[Row], grid: list[float]) -> None:
    seen = [(r.variant, r.seed) for r in rows]
    twice = {run for run in seen if seen.count(run) > 1}
    if twice:
        raise ValueError(f"runs both published and recorded: {sorted(twice)}")
    short = [(r.variant, r.seed) for r in rows if len(r.accs) != len(grid)]
    if short:
        raise ValueError(f"runs without one evaluation per grid time {grid}: {short}")


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def markdown(head: list[str], rows: list[list[str]]) -> str:
    return suite.markdown(head, rows, "l" * len(head)) + "\n"


def peak(mean: np.ndarray, grid: list[float]) -> str:
    """A mean curve's peak and the first grid time it is reached ("(last eval)": it may
    still have been rising)."""
    top = int(np.argmax(mean))
    return f"{pct(mean[top])} at {grid[top]:.0f} s" + \
        (" (last eval)" if top == len(grid) - 1 else "")


def runs_table(variants: dict[str, list[Row]], grid: list[float]) -> str:
    head = ["variant", "seed", *(f"{t:.0f} s" for t in grid), "steps", "s/step",
            "completion tokens (last 10 steps)", "record"]
    body = []
    for name, rows in variants.items():
        for r in rows:
            source = "published" if r.times is None else \
                "metrics.jsonl, evals at " + ", ".join(f"{t:.0f}" for t in r.times) + " s"
            body.append([name, r.seed, *map(pct, r.accs), *r.cells, source])
    return markdown(head, body)


def curves_table(variants: dict[str, list[Row]], grid: list[float]) -> str:
    """Each variant's mean over seeds at each grid time, +- 1.96 SEM; its peak and when."""
    head = ["variant", "seeds", *(f"{t:.0f} s" for t in grid), "peak mean"]
    body = []
    for name, rows in variants.items():
        acc = np.array([r.accs for r in rows])  # [k, E]
        mean, half = acc.mean(0), 1.96 * acc.std(0, ddof=1) / np.sqrt(len(acc))
        body.append([name, str(len(rows)), *(f"{pct(m)} ± {pct(h)}"
                                             for m, h in zip(mean, half, strict=True)),
                     peak(mean, grid)])
    return markdown(head, body)


def versus_table(variants: dict[str, list[Row]], grid: list[float]) -> str:
    """Per comparison: the baseline's peak, the speed-up to it, P(end above)."""
    head = ["variant vs baseline", "baseline's peak mean", "variant reaches it at",
            "speed-up [95% CI]", "P(end above) [95% CI]"]
    body = []
    for name, base in PAIRS:
        v, b = (step_functions([(grid, r.accs) for r in variants[x]]) for x in (name, base))
        out = versus(v, b, v, b)  # no per-eval step counts in the published rows: time only
        body.append([  # every run has an eval at each grid time (check): b's rows are b's
            f"{name} vs {base}", peak(b.values.mean(0), grid),
            num(out["time_to_peak"], ".0f", "never") + (" s" if out["time_to_peak"] else ""),
            ratio_cell(out, "time_to_peak", "speedup", "verdict"),
            num(out["p_better_at_end"], ".2f") + ci_cell(out, "p_better_at_end_ci95")])
    return markdown(head, body)


def equal_time_table(variants: dict[str, list[Row]], grid: list[float]) -> str:
    """Per comparison and grid time: the variant's minus the baseline's accuracy, by seed."""
    head = ["variant - baseline (points)", *(f"{t:.0f} s" for t in grid[1:])]
    body = []
    for name, base in PAIRS:
        cells = []
        for i in range(1, len(grid)):
            a, b = ({r.seed: r.accs[i] for r in variants[x]} for x in (name, base))
            cells.append(paired_cell(paired_difference(a, b)))
        body.append([f"{name} - {base}", *cells])
    return markdown(head, body)


def differences(variants: dict[str, list[Row]], name: str, base: str, i: int) -> np.ndarray:
    """The variant's minus the baseline's accuracy at grid time i, over their shared seeds."""
    b = {r.seed: r.accs[i] for r in variants[base]}
    return np.array([r.accs[i] - b[r.seed] for r in variants[name] if r.seed in b])  # [k]


def power_table(variants: dict[str, list[Row]], grid: list[float], planned: int) -> str:
    """Per comparison and grid time, at the spread of differences seen so far: the true
    difference a paired t-test on the planned seeds finds 4 times in 5, and the seeds
    needed to find 10 and 5 points that often."""
    head = ["variant - baseline", *(f"{t:.0f} s" for t in grid[1:])]
    body = []
    for name, base in PAIRS:
        cells = []
        for i in range(1, len(grid)):
            sd = differences(variants, name, base, i).std(ddof=1)
            need = [seeds_needed(delta, sd) for delta in (0.10, 0.05)]
            cells.append(f"sd {pct(sd)}: {pct(detectable_difference(sd, planned))}; "
                         f"10 points: {need[0]}, 5: {need[1]}")
        body.append([f"{name} - {base}", *cells])
    return markdown(head, body)


def fills_cell(d: np.ndarray, missing: int) -> str:
    """"nothing decides"; "decided by one from +10.5 to +38.7"; "decided on 4; undone by
    one of -2.0" (points)."""
    if missing == 0:
        return "none missing"
    f = missing_seed_fills(d, missing, FEASIBLE)
    if f.decided:
        return f"decided on {len(d)}, " + ("whatever the rest" if f.undo is None else
                                           f"undone by one of {100 * f.undo:+.1f}")
    sides = [f"from {sign}{pct(lo)} to {sign}{pct(hi)}"
             for sign, got in (("+", f.higher), ("-", f.lower)) if got for lo, hi in [got]]
    return "decided by one " + " or ".join(sides) if sides else "nothing decides"


def missing_table(variants: dict[str, list[Row]], grid: list[float], planned: int) -> str:
    """Per comparison and grid time: what the planned seeds not run could do to the paired
    t-test, whatever accuracies they had (every completion on the 1/256 grid)."""
    head = ["variant - baseline", "seeds run", *(f"{t:.0f} s" for t in grid[1:])]
    body = []
    for name, base in PAIRS:
        k = len(differences(variants, name, base, 0))
        body.append([f"{name} - {base}", f"{k} of {planned}",
                     *(fills_cell(differences(variants, name, base, i), planned - k)
                       for i in range(1, len(grid)))])
    return markdown(head, body)


def plot(variants: dict[str, list[Row]], grid: list[float], path: Path) -> None:
    """Each variant's mean accuracy over seeds on the grid, as `pods plot` draws a
    comparison (GRPO's peak dotted)."""
    from pods.experiments.plots import plot_compare

    curves = {}
    for name, rows in variants.items():
        acc = np.array([r.accs for r in rows])  # [k, E]
        curves[name] = {"times": grid, "mean": acc.mean(0), "seeds": len(rows),
                        "sem": acc.std(0, ddof=1) / np.sqrt(len(rows))}
    plot_compare(curves, path, baseline="grpo")


def main() -> None:
    parser = suite.parser(__doc__, "the same tables (they take seconds)")
    parser.add_argument("folder", nargs="?", type=Path,
                        default=Path(__file__).resolve().parents[2] / "results" / "smollm2_paper")
    parser.add_argument("--plot", type=Path, metavar="PNG",
                        help="also draw each variant's mean curve (+- 1.96 SEM) there")
    args = parser.parse_args()
    folder = args.folder
    grid, rows = published(folder / "published_19.csv")
    rows += recorded(folder)
    check(rows, grid)
    spec = yaml.safe_load((folder / "compare.yaml").read_text())
    order, planned = list(spec["variants"]), len(spec["seeds"])
    variants = {n: sorted((r for r in rows if r.variant == n), key=lambda r: int(r.seed))
                for n in order}
    if args.plot:
        plot(variants, grid, args.plot)
    print("## Each run (accuracy on the 256 stories, %)\n")
    print(runs_table(variants, grid))
    print("## Mean over seeds (%, ± 1.96 SEM)\n")
    print(curves_table(variants, grid))
    print("## Speed-up to the baseline's peak, and P(end above)\n")
    print(versus_table(variants, grid))
    print("## Accuracy at equal training time, paired by seed (points; 95% t-interval; "
          "seeds higher; exact sign-flip p-value)\n")
    print(equal_time_table(variants, grid))
    print(f"## What {planned} seeds can detect (points: the spread of the paired differences "
          f"so far; the true difference a paired t-test on {planned} seeds finds 4 times in "
          "5; the seeds that find 10 and 5 points that often)\n")
    print(power_table(variants, grid, planned))
    print("## What the seeds not run could change (points: the size one of them must reach "
          "for the paired t-interval to exclude 0, higher or lower, over every accuracy "
          "they could have)\n")
    print(missing_table(variants, grid, planned), end="")
    suite.write_json(args.json, [asdict(r) for rows in variants.values() for r in rows])


if __name__ == "__main__":
    main()
