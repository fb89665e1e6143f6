"""A comparison's summary: mean accuracy curves over seeds, speed-ups over the baselines, the
per-step phase times that explain them; written as summary.json, summary.md and curves.png.

Protocol (the paper, arXiv 2504.13818, and its official code): a run's accuracy is a step
function of training time (the last evaluation at or before t); a variant's curve is the
mean over seeds with a band of 1.96 x SEM; the speed-up of a variant over a baseline is the
time the baseline takes to reach its own peak mean accuracy divided by the time the variant
takes to reach that same accuracy. A spec may name several baselines (the paper compares
PODS with GRPO at fewer rollouts and with GRPO-GA on all of them): each row then has a
speed-up over each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from pods.experiments.plots import plot_compare
from pods.train.metrics import read_metrics


@dataclass(frozen=True, eq=False)
class Curve:
    """A variant's mean test accuracy (in [0, 1]) over seeds, on a grid of training times."""

    times: np.ndarray  # [G] training seconds (or optimizer steps, see aggregate_curves)
    mean: np.ndarray  # [G]
    sem: np.ndarray  # [G] standard error of the mean over seeds (ddof=1); 0 with one seed
    seeds: int
    runs: list[Path]  # the run folders averaged


def aggregate_curves(out_dir: str | Path, x: str = "time") -> dict[str, Curve]:
    """One Curve per variant folder (a subfolder with ``seed*/metrics.jsonl``), by name.

    Each run is a step function (accuracy of the last eval at or before t). The grid is the
    sorted union of the runs' eval times, cut to where every run has an eval at or before it
    and none has run out (at most the smallest last eval time), so each seed counts at each
    grid time. Runs without eval records yet are left out, with a printed line.
    ``x`` is the record field on the horizontal axis: "time" (training seconds) or "step"
    (optimizer steps; ``Curve.times`` then holds steps).
    """
    curves = {}
    for variant in sorted(p for p in Path(out_dir).iterdir() if p.is_dir()):
        runs = []
        for metrics in sorted(variant.glob("seed*/metrics.jsonl"), key=_seed_order):
            evals = [r for r in read_metrics(metrics, "eval") if "eval/accuracy" in r]
            if evals:
                runs.append((metrics.parent, evals))
            else:
                print(f"{metrics.parent}: no eval records yet, left out.")
        if runs:
            curves[variant.name] = _curve(runs, x)
    return curves


def _seed_order(metrics: Path) -> tuple[int, str]:
    digits = metrics.parent.name.removeprefix("seed")  # seed10 after seed2
    return (int(digits) if digits.isdigit() else -1, metrics.parent.name)


def _curve(runs: list[tuple[Path, list[dict]]], x: str = "time") -> Curve:
    steps = []  # per run: (times [E], accuracies [E]) sorted by time, stable for ties
    for _, evals in runs:
        t = np.array([r[x] for r in evals], dtype=float)
        acc = np.array([r["eval/accuracy"] for r in evals], dtype=float)
        order = np.argsort(t, kind="stable")
        steps.append((t[order], acc[order]))
    grid = np.unique(np.concatenate([t for t, _ in steps]))  # [G] sorted union
    start, stop = max(t[0] for t, _ in steps), min(t[-1] for t, _ in steps)
    grid = grid[(grid >= start) & (grid <= stop)]
    if not len(grid):
        raise ValueError(f"runs {', '.join(str(r) for r, _ in runs)} have no eval time in "
                         "common (one ends before another starts); remove the odd run.")
    # side="right": of evals at equal times, the last written one holds
    values = np.stack([acc[np.searchsorted(t, grid, side="right") - 1] for t, acc in steps])
    k = len(runs)  # values: [k, G]
    sem = values.std(axis=0, ddof=1) / np.sqrt(k) if k > 1 else np.zeros(len(grid))
    return Curve(times=grid, mean=values.mean(axis=0), sem=sem, seeds=k,
                 runs=[run for run, _ in runs])


def summarize(out_dir: str | Path) -> list[dict[str, Any]]:
    """Write summary.json, summary.md and curves.png for a comparison folder; print the table.

    Rows in the spec's variant order; times are training seconds, accuracies in [0, 1]. The
    first baseline's figures are the row's ``time_to_baseline_peak``, ``speedup`` and
    ``steps_to_baseline_peak``; ``vs`` holds them for every baseline by name.
    """
    out_dir = Path(out_dir)
    spec_path = out_dir / "compare.yaml"
    if not spec_path.is_file():
        raise ValueError(f"{out_dir} has no compare.yaml: summarize a folder made by "
                         "`pods compare SPEC --out DIR`.")
    spec = yaml.safe_load(spec_path.read_text()) or {}
    order = list(spec.get("variants") or {})
    found = aggregate_curves(out_dir)
    if not found:
        raise ValueError(f"{out_dir} has no run with eval records yet; nothing to summarize.")
    curves = {n: found[n] for n in order if n in found}
    curves.update({n: c for n, c in found.items() if n not in curves})
    baselines = []
    for name in baseline_names(spec.get("baseline")):
        if name in curves:
            baselines.append(name)
        else:
            print(f"baseline {name!r} has no eval records yet: no speed-ups over it.")
    by_step = aggregate_curves(out_dir, x="step")
    rows = []
    for name, curve in curves.items():
        vs = {}
        for base in baselines:
            reach = _reach(curve, curves[base])
            vs[base] = {"time_to_peak": reach,
                        "speedup": _speedup(reach, curves[base], name == base),
                        "steps_to_peak": _reach(by_step.get(name), by_step.get(base))}
        first = vs[baselines[0]] if baselines else {}
        rows.append({**_row(name, curve),
                     "time_to_baseline_peak": first.get("time_to_peak"),
                     "speedup": first.get("speedup"),
                     "steps_to_baseline_peak": first.get("steps_to_peak"), "vs": vs})
    (out_dir / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
    table = markdown_table(rows)
    (out_dir / "summary.md").write_text(table)
    plot_compare(curves, out_dir / "curves.png", baseline=baselines[0] if baselines else None,
                 step_curves={n: by_step[n] for n in curves if n in by_step})
    print(table, end="")
    return rows


def baseline_names(value: Any) -> list[str]:
    """A spec's ``baseline:``, one name or a list of names, as a list."""
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]


def _speedup(reach: float | None, base: Curve, is_base: bool) -> float | None:
    """The baseline's time to its peak / ``reach``, the variant's time to that accuracy;
    None when the variant never gets there or a time is zero."""
    if is_base:
        return 1.0
    base_ttp = float(base.times[np.argmax(base.mean)])
    return base_ttp / reach if reach and base_ttp else None


def _row(name: str, curve: Curve) -> dict[str, Any]:
    peak = int(np.argmax(curve.mean))  # the first grid time at the peak
    steps = [read_metrics(run / "metrics.jsonl", "step") for run in curve.runs]
    per_step = [s[-1]["time"] / s[-1]["step"] for s in steps if s and s[-1].get("step")]
    return {
        "variant": name, "seeds": curve.seeds,
        "peak_acc": float(curve.mean[peak]), "time_to_peak": float(curve.times[peak]),
        "sec_per_step": float(np.mean(per_step)) if per_step else None,
        "generate_sec": _mean_of(steps, "time/generate"),
        "update_sec": _mean_of(steps, "time/update"),
        "zero_var_frac": _mean_of(steps, "select/zero_var_frac"),  # kept groups, no signal
        "var_kept": _mean_of(steps, "select/var_kept"),
        "completion_len": _mean_of(steps, "rollout/completion_len"),  # generated, tokens
        "kept_completion_len": _mean_of(steps, "select/completion_len"),  # trained on
        "peak_mem_mb": _max_of(steps, "mem/peak_rss_mb"),
        "peak_gpu_mb": _max_of(steps, "mem/peak_gpu_mb"),
        "final_acc": float(curve.mean[-1]),
    }


def _reach(curve: Curve | None, base: Curve | None) -> float | None:
    """First grid point where ``curve``'s mean reaches ``base``'s peak mean, or None."""
    if curve is None or base is None:
        return None
    # tolerance: equal accuracies averaged in another order may differ in the last bit
    hits = np.flatnonzero(curve.mean >= float(base.mean.max()) - 1e-9)
    return float(curve.times[hits[0]]) if len(hits) else None


def _values(steps: list[list[dict]], key: str) -> list[float]:
    return [r[key] for records in steps for r in records if r.get(key) is not None]


def _mean_of(steps: list[list[dict]], key: str) -> float | None:
    values = _values(steps, key)
    return float(np.mean(values)) if values else None


def _max_of(steps: list[list[dict]], key: str) -> float | None:
    values = _values(steps, key)
    return float(max(values)) if values else None


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The summary as a markdown table: accuracies in %, times in seconds; per baseline B the
    time to B's peak, the speed-up over B and the optimizer steps to B's peak."""
    def num(x: float | None, fmt: str, none: str = "-") -> str:
        return none if x is None else format(x, fmt)

    baselines = list(rows[0].get("vs") or {}) if rows else []
    head = ["variant", "seeds", "peak acc (%)", "time to peak (s)"]
    for base in baselines:
        head += [f"time to {base} peak (s)", f"speed-up vs {base}", f"steps to {base} peak"]
    head += ["final acc (%)", "s/step", "generate s/step", "update s/step",
             "completion len (tokens)", "peak RSS (MB)", "peak GPU (MB)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["variant"], str(r["seeds"]), num(100 * r["peak_acc"], ".1f"),
                 num(r["time_to_peak"], ".1f")]
        for base in baselines:
            v = r["vs"][base]
            speedup = "never" if v["time_to_peak"] is None else num(v["speedup"], ".2f", "n/a")
            speedup += "x" if v["speedup"] is not None else ""
            cells += [num(v["time_to_peak"], ".1f", "never"), speedup,
                      num(v["steps_to_peak"], ".0f", "never")]
        cells += [num(100 * r["final_acc"], ".1f"), num(r["sec_per_step"], ".3f"),
                  num(r["generate_sec"], ".3f"), num(r["update_sec"], ".3f"),
                  num(r.get("completion_len"), ".1f"), num(r["peak_mem_mb"], ".0f"),
                  num(r["peak_gpu_mb"], ".0f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
