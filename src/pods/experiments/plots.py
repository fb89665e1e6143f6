"""Learning curves as PNG files: one run, the variants of a comparison (their means), or
every seed of every variant.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot), so plotting needs no display
and leaves the process's matplotlib backend alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pods.runs.metrics import read_metrics

# a variant's curve: {"times": [G], "mean": [G], "sem": [G] (accuracies in [0, 1]), "seeds": k}
CurveData = Mapping[str, Any]

Z95 = 1.96  # band half-width in standard errors: a 95% normal interval


def plot_run(run_dir: str | Path) -> Path:
    """Write ``run_dir/curve.png``: test accuracy (left) and mean training reward (right)
    against training seconds, from ``run_dir/metrics.jsonl``. Returns the PNG path."""
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise ValueError(f"{run_dir} has no metrics.jsonl; pass a run folder (one made by "
                         "`pods train`, e.g. runs/<name>).")
    evals = [r for r in read_metrics(metrics, "eval") if "eval/accuracy" in r]
    steps = [r for r in read_metrics(metrics, "step") if "rollout/reward_mean" in r]
    fig = Figure(figsize=(11, 4), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    _panel(left, [r["time"] for r in evals], [100 * r["eval/accuracy"] for r in evals],
           "test accuracy (%)", "eval records")
    _panel(right, [r["time"] for r in steps], [r["rollout/reward_mean"] for r in steps],
           "mean training reward", "step records")
    sampling = _sampling(run_dir)
    left.set_title(f"held-out problems, {sampling[0]}", fontsize="medium")
    right.set_title(f"the step's rollouts, {sampling[1]} (another scale: not comparable "
                    f"to the left)", fontsize="medium")
    fig.suptitle(run_dir.resolve().name)
    path = run_dir / "curve.png"
    fig.savefig(path, dpi=100)
    return path


def _sampling(run_dir: Path) -> tuple[str, str]:
    """How the run's evaluations and rollouts sampled, from its config.yaml, in words."""
    try:
        from pods.config.files import load_run_config

        c = load_run_config(run_dir / "config.yaml")
    except (OSError, ValueError):
        return "evaluated", "sampled"
    t, repeats = c["eval_temperature"], c["eval_repeats"]
    evaluated = "greedy" if t == 0 else f"sampled at T={t:g}"
    return (f"{evaluated}, {repeats} sample{'s' if repeats != 1 else ''} each",
            f"sampled at T={c['temperature']:g}")


def _panel(ax, x: list[float], y: list[float], ylabel: str, what: str) -> None:
    ax.plot(x, y, marker="o" if len(x) < 30 else None, markersize=3)
    if not x:
        ax.text(0.5, 0.5, f"no {what} yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("training time (s)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def plot_compare(curves: Mapping[str, CurveData], path: str | Path,
                 baseline: str | None = None,
                 step_curves: Mapping[str, CurveData] | None = None) -> Path:
    """Write a PNG of each variant's mean test accuracy over seeds against training seconds,
    with a band of mean +- 1.96 SEM; a dotted line marks the ``baseline`` variant's peak.
    With ``step_curves`` (the same against optimizer steps) a second panel shows those; its
    dotted line is the same peak, the one the summary reads off the curve over time (a mean
    over steps pairs seeds at other moments and peaks elsewhere).
    Curves are plain data (``CurveData``), so any caller can draw them."""
    if baseline is not None and baseline not in curves:
        raise ValueError(f"baseline {baseline!r} has no curve; use one of "
                         f"{', '.join(curves)} or None.")
    panels = [(curves, "training time (s)")]
    if step_curves:
        panels.append((step_curves, "optimizer steps"))
    fig = Figure(figsize=(7 * len(panels), 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    peak = None if baseline is None else (baseline, 100 * float(np.max(curves[baseline]["mean"])))
    for ax, (panel_curves, xlabel) in zip(np.atleast_1d(fig.subplots(1, len(panels))), panels,
                                          strict=True):
        _compare_panel(ax, panel_curves, peak if baseline in panel_curves else None, xlabel)
    fig.suptitle(f"{Path(path).resolve().parent.name}: mean test accuracy over seeds (band: "
                 f"95% interval of the mean, ±1.96 SEM)", fontsize="medium")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def _compare_panel(ax, curves: Mapping[str, CurveData], peak: tuple[str, float] | None,
                   xlabel: str) -> None:
    colors = {}
    for name, c in curves.items():
        times = np.asarray(c["times"], dtype=float)  # [G]
        mean = 100 * np.asarray(c["mean"], dtype=float)  # [G] percent
        half = 100 * Z95 * np.asarray(c["sem"], dtype=float)  # [G]
        label = f"{name} ({c['seeds']} seed{'s' if c['seeds'] != 1 else ''})"
        # accuracy holds until the next eval: draw steps, not interpolated slopes
        (line,) = ax.plot(times, mean, drawstyle="steps-post", label=label)
        low, high = np.clip(mean - half, 0, 100), np.clip(mean + half, 0, 100)  # accuracies
        ax.fill_between(times, low, high, step="post", alpha=0.2, color=line.get_color(),
                        linewidth=0)
        colors[name] = line.get_color()
    if peak is not None:  # (baseline, its peak in percent over training time)
        baseline, at = peak
        ax.axhline(at, linestyle=":", color=colors[baseline],
                   label=f"{baseline} peak over time ({at:.1f}%)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(loc="best", framealpha=0.85)  # where it covers the fewest points


# a variant's runs, each drawn as it is: [(label, times [k_i], accuracies [k_i] in [0, 1])]
SeedCurves = list[tuple[str, list[float], list[float]]]


def plot_seeds(variants: Mapping[str, SeedCurves], path: str | Path) -> Path:
    """Write a PNG with one panel per variant holding each of its runs' test accuracy
    against training seconds (a step function per seed, labelled by its folder)."""
    if not variants:
        raise ValueError("no runs with evaluations to draw")
    fig = Figure(figsize=(7 * len(variants), 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(1, len(variants), sharey=True))
    for ax, (name, runs) in zip(axes, variants.items(), strict=True):
        for label, times, accuracies in runs:
            ax.plot(times, [100 * a for a in accuracies], drawstyle="steps-post",
                    marker=".", label=label)
        ax.set_title(f"{name} ({len(runs)} seed{'s' if len(runs) != 1 else ''})")
        ax.set_xlabel("training time (s)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small", ncols=2)
    axes[0].set_ylabel("test accuracy (%)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
