"""A comparison's summary: mean accuracy curves over seeds, speed-ups over the baselines, the
per-step phase times that explain them, and each run's evaluations; written as summary.json,
summary.md and curves.png.

Protocol (the paper, arXiv 2504.13818, and its official code): a run's accuracy is a step
function of training time (the last evaluation at or before t); a variant's curve is the
mean over seeds with a band of 1.96 x SEM; the speed-up of a variant over a baseline is the
time the baseline takes to reach its own peak mean accuracy divided by the time the variant
takes to reach that same accuracy. Each figure has one definition: a variant's peak and
final accuracy are the highest and the last value of that mean curve (which runs to the
first time a seed stopped, so every seed counts at every point); the optimizer steps to a
target are each seed's steps at the time the mean curve reached it, averaged (so a time and
its steps describe one moment). A spec may name several baselines (the paper compares
PODS with GRPO at fewer rollouts and with GRPO-GA on all of them): each row then has a
speed-up over each. Beyond the paper, each speed-up carries a 95% bootstrap interval over
seeds and a verdict (pods.experiments.intervals), so a table says which differences the
seeds can tell apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from pods.experiments.intervals import (
    Seeds,
    on_common_grid,
    paired_difference,
    step_functions,
    steps_at,
    to_peak,
    versus,
)
from pods.experiments.plots import plot_compare, plot_seeds
from pods.experiments.run_records import Runs, load_runs
from pods.experiments.tables import each_run_table, machines_note, markdown_table
from pods.runs.metrics import positions_share


@dataclass(frozen=True, eq=False)
class Curve:
    """A variant's mean test accuracy (in [0, 1]) over seeds, on a grid of training times."""

    times: np.ndarray  # [G] training seconds (or optimizer steps, see aggregate_curves)
    mean: np.ndarray  # [G]
    sem: np.ndarray  # [G] standard error of the mean over seeds (ddof=1); 0 with one seed
    seeds: int
    runs: list[Path]  # the run folders averaged

    def plain(self) -> dict[str, Any]:
        """What plots.plot_compare draws: lists and a seed count."""
        return {"times": self.times.tolist(), "mean": self.mean.tolist(),
                "sem": self.sem.tolist(), "seeds": self.seeds}


def aggregate_curves(out_dir: str | Path, x: str = "time") -> dict[str, Curve]:
    """One Curve per variant folder (a subfolder with ``seed*/metrics.jsonl``), by name.

    Each run is a step function (accuracy of the last eval at or before t). The grid is the
    sorted union of the runs' eval times, cut to where every run has an eval at or before it
    and none has run out (at most the smallest last eval time), so each seed counts at each
    grid time. Runs without eval records yet are left out, with a printed line.
    ``x`` is the record field on the horizontal axis: "time" (training seconds) or "step"
    (optimizer steps; ``Curve.times`` then holds steps).
    """
    return {name: _curve(runs, seeds_of(runs, x)) for name, runs in load_runs(out_dir).items()}


def seeds_of(runs: Runs, x: str = "time", y: str = "eval/accuracy") -> Seeds:
    """A variant's runs as step functions of their eval records' field ``y`` (accuracy, or
    "step": the optimizer steps made) against field ``x``."""
    return step_functions([([r[x] for r in run.evals], [r[y] for r in run.evals])
                           for run in runs])


def _curve(runs: Runs, seeds: Seeds) -> Curve:
    try:
        times, values = on_common_grid(seeds.times, seeds.values)  # [G], [k, G]
    except ValueError as e:
        raise ValueError(f"runs {', '.join(str(run.path) for run in runs)}: {e}") from None
    k = seeds.k
    sem = values.std(axis=0, ddof=1) / np.sqrt(k) if k > 1 else np.zeros(len(times))
    return Curve(times=times, mean=values.mean(axis=0), sem=sem, seeds=k,
                 runs=[run.path for run in runs])


# the first baseline's figures, repeated at the top of each row under these names
TOP = {"time_to_peak": "time_to_baseline_peak", "speedup": "speedup",
       "speedup_ci95": "speedup_ci95", "verdict": "verdict",
       "steps_to_peak": "steps_to_baseline_peak", "steps_ratio": "steps_ratio",
       "steps_ratio_ci95": "steps_ratio_ci95", "steps_verdict": "steps_verdict",
       "p_better_at_end": "p_better_at_end", "p_better_at_end_ci95": "p_better_at_end_ci95",
       "seeds_baseline": "seeds_baseline"}


def summarize(out_dir: str | Path) -> list[dict[str, Any]]:
    """Write summary.json, summary.md and curves.png for a comparison folder; print summary.md.

    Rows in the spec's variant order; times are training seconds, accuracies in [0, 1]. The
    ``vs`` entry holds, per baseline by name, the time and optimizer steps to its peak, the
    speed-up and steps ratio with 95% intervals over seeds and their verdicts, and the
    probability of ending above it (pods.experiments.intervals). The first baseline's
    figures are repeated at the top of the row (``TOP`` names them).
    """
    out_dir = Path(out_dir)
    spec_path = out_dir / "compare.yaml"
    if not spec_path.is_file():
        raise ValueError(f"{out_dir} has no compare.yaml: summarize a folder made by "
                         "`pods compare SPEC --out DIR`.")
    spec = yaml.safe_load(spec_path.read_text()) or {}
    found = load_runs(out_dir)
    if not found:
        raise ValueError(f"{out_dir} has no run with eval records yet; nothing to summarize.")
    order = [n for n in spec.get("variants") or {} if n in found]
    runs = {n: found[n] for n in order + [n for n in found if n not in order]}
    by_time = {n: seeds_of(r, "time") for n, r in runs.items()}
    by_step = {n: seeds_of(r, "time", "step") for n, r in runs.items()}  # steps made by t
    curves = {n: _curve(r, by_time[n]) for n, r in runs.items()}
    baselines = []
    for name in baseline_names(spec.get("baseline")):
        if name in curves:
            baselines.append(name)
        else:
            print(f"baseline {name!r} has no eval records yet: no speed-ups over it.")
    ends = {n: {run.seed: run.evals[-1]["eval/accuracy"] for run in r}
            for n, r in runs.items()}  # each run's end accuracy by seed
    rows = []
    for name, curve in curves.items():
        vs = {base: (versus(by_time[name], by_time[base], by_step[name], by_step[base])
                     | paired_difference(ends[name], ends[base])
                     if base != name else _itself(by_time[name], by_step[name]))
              for base in baselines}
        first = vs[baselines[0]] if baselines else {}
        rows.append({**_row(name, curve, runs[name]), **{TOP[k]: first.get(k) for k in TOP},
                     "vs": vs})
    (out_dir / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
    text = f"{machines_note(runs)}{markdown_table(rows)}\n## Each run\n\n{each_run_table(runs)}"
    (out_dir / "summary.md").write_text(text)
    plot_compare({n: c.plain() for n, c in curves.items()}, out_dir / "curves.png",
                 baseline=baselines[0] if baselines else None,
                 step_curves={n: _curve(runs[n], seeds_of(runs[n], "step")).plain()
                              for n in runs})
    plot_seeds({n: [(run.path.name, [r["time"] for r in run.evals],
                     [r["eval/accuracy"] for r in run.evals]) for run in variant_runs]
                for n, variant_runs in runs.items()},
               out_dir / "seeds.png")
    print(text, end="")
    return rows


def _itself(by_time: Seeds, by_step: Seeds) -> dict[str, Any]:
    """The baseline against itself: 1x by definition, no interval and no verdict."""
    time = to_peak(by_time, by_time)[1]
    return {"time_to_peak": time, "speedup": 1.0,
            "speedup_ci95": None, "verdict": None,
            "steps_to_peak": steps_at(by_step, time), "steps_ratio": 1.0,
            "steps_ratio_ci95": None, "steps_verdict": None,
            "p_better_at_end": None, "p_better_at_end_ci95": None,
            "seeds_variant": by_time.k, "seeds_baseline": by_time.k,
            "paired_seeds": by_time.k, "paired_wins": 0, "paired_diff": None,
            "paired_diff_ci95": None, "paired_p": None, "paired_detectable": None}


def baseline_names(value: Any) -> list[str]:
    """A spec's ``baseline:``, one name or a list of names, as a list."""
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]


def _row(name: str, curve: Curve, runs: Runs) -> dict[str, Any]:
    peak = int(np.argmax(curve.mean))  # the first grid time at the peak: peak and final
    # come from the same curve, so the peak is never below the final
    steps = [run.steps for run in runs]
    per_step = [s for s in (run.sec_per_step() for run in runs) if s is not None]
    return {
        "variant": name, "seeds": curve.seeds,
        "peak_acc": float(curve.mean[peak]), "time_to_peak": float(curve.times[peak]),
        "peak_at_last_eval": bool(peak == len(curve.times) - 1),  # it may still be rising
        "sec_per_step": float(np.mean(per_step)) if per_step else None,
        "generate_sec": _mean_of(steps, "time/generate"),
        "update_sec": _mean_of(steps, "time/update"),
        "zero_var_frac": _mean_of(steps, "select/zero_var_frac"),  # kept groups, no signal
        "var_kept": _mean_of(steps, "select/var_kept"),
        "completion_len": _mean_of(steps, "rollout/completion_len"),  # generated, tokens
        "kept_completion_len": _mean_of(steps, "select/completion_len"),  # trained on
        "positions_share": _share(steps),  # the update's positions / padded's
        "peak_mem_mb": _max_of(steps, "mem/peak_rss_mb"),
        "peak_gpu_mb": _max_of(steps, "mem/peak_gpu_mb"),
        "final_acc": float(curve.mean[-1]),
        "time_of_final": float(curve.times[-1]),  # where the mean curve ends
    }


def _share(steps: list[list[dict]]) -> float | None:
    """The update's positions as a share of padded's, over the seeds' steps together."""
    return positions_share([r for records in steps for r in records])


def _values(steps: list[list[dict]], key: str) -> list[float]:
    return [r[key] for records in steps for r in records if r.get(key) is not None]


def _mean_of(steps: list[list[dict]], key: str) -> float | None:
    values = _values(steps, key)
    return float(np.mean(values)) if values else None


def _max_of(steps: list[list[dict]], key: str) -> float | None:
    values = _values(steps, key)
    return float(max(values)) if values else None
