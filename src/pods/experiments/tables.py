"""A comparison's summary as markdown: the main table (one row per variant: peak and final
accuracy, speed-ups over each baseline with 95% intervals and verdicts, paired differences
by seed, phase times) and "Each run" (one row per run: its accuracy at every evaluation, the
steps it made, its seconds per step), the figures behind the mean curves, so a reader can
check a summary run by run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pods.experiments.intervals import MIN_SEEDS
from pods.experiments.run_records import Run, Runs
from pods.runtime.machine import on_gpu, speed_differences, speed_fields


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The summary as markdown, what a reader needs first, then the rest: per variant the
    peak and final accuracy and, per baseline B, the speed-up over B (with its 95%
    interval over seeds and verdict) and the end accuracy's paired difference from B;
    then "Details": the times to the peaks, the optimizer steps to B's peak and their
    ratio, the probability of ending above B, and the phase times and memory (all of it
    also in summary.json). A line above the table says how peak, final and steps are read."""
    baselines = list(rows[0].get("vs") or {}) if rows else []
    at_start = {r["variant"]: r["time_to_peak"] == 0 for r in rows}
    head = ["variant", "seeds", "peak acc (%)", "final acc (%)"]
    detail = ["variant", "time to peak (s)", "final at (s)"]
    for base in baselines:
        head += [f"speed-up vs {base} [95% CI]",
                 f"each seed's last acc - {base}'s, paired (points) [95% CI]"]
        detail += [f"time to {base} peak (s)", f"steps to {base} peak",
                   f"steps ratio vs {base} [95% CI]", f"P(end above {base}) [95% CI]"]
    detail += ["s/step", "generate s/step", "update s/step", "update positions / padded's",
               "completion len (tokens)", "peak RSS (MB)", "peak GPU (MB)"]
    main, more = [_row(head)], [_row(detail)]
    main.append("|" + "---|" * len(head))
    more.append("|" + "---|" * len(detail))
    for r in rows:
        cells = [r["variant"], str(r["seeds"]), num(100 * r["peak_acc"], ".1f"),
                 num(100 * r["final_acc"], ".1f")]
        extra = [r["variant"], num(r["time_to_peak"], ".1f") + (
            " (last eval)" if r.get("peak_at_last_eval") else ""),
            num(r.get("time_of_final"), ".1f")]
        for base in baselines:
            v = r["vs"][base]
            why = f"{base}'s peak was its start" if at_start.get(base) else "reached at 0 s"
            cells += [ratio_cell(v, "time_to_peak", "speedup", "verdict", why),
                      paired_cell(v)]
            extra += [num(v["time_to_peak"], ".1f", "never"),
                      num(v["steps_to_peak"], ".1f", "never"),
                      ratio_cell(v, "steps_to_peak", "steps_ratio", "steps_verdict",
                                 "reached at step 0"),
                      num(v["p_better_at_end"], ".2f") + ci_cell(v, "p_better_at_end_ci95")]
        extra += [seconds(r["sec_per_step"]), seconds(r["generate_sec"]),
                  seconds(r["update_sec"]), num(r.get("positions_share"), ".3f"),
                  num(r.get("completion_len"), ".1f"),
                  num(r["peak_mem_mb"], ".0f"), num(r["peak_gpu_mb"], ".0f")]
        main.append(_row(cells))
        more.append(_row(extra))
    return DEFINITIONS + "\n".join(main) + "\n\n### Details\n\n" + "\n".join(more) + "\n"


DEFINITIONS = (
    "Peak and final acc: the highest and the last value of the variant's mean curve over seeds "
    "(each seed's last evaluation at or before t), which ends where the first seed stopped "
    "(\"final at\" below); the speed-up's target is the baseline's peak on that curve. Steps to "
    "a peak: each seed's optimizer steps when the mean curve reached it, averaged. The paired "
    f"column compares each seed's own last evaluation. Intervals over seeds need {MIN_SEEDS} "
    "a side.\n\n")


def seconds(x: float | None) -> str:
    """Seconds to 3 significant digits (0.0312, 2.76, 45.1), "-" for None: a step of 0.03 s
    does not print as 0.0."""
    if x is None:
        return "-"
    if x == 0:
        return "0"
    return format(x, f".{max(0, 2 - int(np.floor(np.log10(abs(x)))))}f")


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def num(x: float | None, fmt: str, none: str = "-") -> str:
    return none if x is None else format(x, fmt)


def ratio_cell(v: dict[str, Any], reach: str, ratio: str, verdict: str,
               why: str = "a zero time") -> str:
    """"2.10x [1.40, 3.00] faster"; "never", or "n/a" and ``why`` (a zero time: no ratio)
    without an estimate."""
    if v[reach] is not None and v[ratio] is None:
        return f"n/a ({why})"
    text = "never" if v[reach] is None else f"{v[ratio]:.2f}x"
    return text + ci_cell(v, f"{ratio}_ci95") + (f" {v[verdict]}" if v[verdict] else "")


def ci_cell(v: dict[str, Any], key: str) -> str:
    """" [lo, hi]" ("inf" for an unbounded end); " (2 seeds: no CI, 3 a side give one)"
    when a side has fewer than ``MIN_SEEDS``; nothing for the baseline against itself."""
    ci = v[key]
    if ci is not None:
        return " [" + ", ".join("inf" if x is None else _bound(x) for x in ci) + "]"
    k = min(v["seeds_variant"], v["seeds_baseline"])
    if v["p_better_at_end"] is not None and k < MIN_SEEDS:
        return f" ({k} seed{'s' if k > 1 else ''}: no CI, {MIN_SEEDS} a side give one)"
    return ""


def _bound(x: float) -> str:
    """An interval's end to 2 decimals, or 4 where 2 would print 1.00 for a bound that is
    not 1 (then whether the interval holds 1 can be read)."""
    text = f"{x:.2f}"
    return f"{x:.4f}" if text == "1.00" and x != 1 else text


def paired_cell(v: dict[str, Any]) -> str:
    """"+10.0 [-3.2, 23.2] (5 seeds, 4 higher, sign-flip p = 0.188, 80% power at ±18.4)";
    "-" against itself or with no seed in common."""
    if v.get("paired_diff") is None:
        return "-"
    ci = v["paired_diff_ci95"]
    band = "" if ci is None else f" [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"
    k = v["paired_seeds"]
    p = "" if v.get("paired_p") is None else f", sign-flip p = {v['paired_p']:.3f}"
    if v.get("paired_detectable") is not None:  # beyond 1: no accuracy difference is found
        x = v["paired_detectable"]
        p += f", 80% power at ±{100 * x:.1f}" if x <= 1 else ", 80% power beyond ±100"
    return f"{100 * v['paired_diff']:+.1f}{band} ({k} seed{'s' if k > 1 else ''}, " \
           f"{v['paired_wins']} higher{p})"


LAST = 10  # steps over which the completion length at the end is averaged


def each_run_table(variants: Mapping[str, Runs]) -> str:
    """A markdown table, one row per run, variants in the order given and seeds as loaded.

    Evaluation i is column i; its header is the median training time of evaluation i over
    the runs that have it (runs evaluate at the first step past each mark, so their times
    differ by a step or so); a run with fewer evaluations has "-" there. Then the optimizer
    steps made, the mean seconds per step (training time / steps) and the mean completion
    length over the last ``LAST`` steps.
    """
    evals = [run.evals for runs in variants.values() for run in runs]
    width = max(len(e) for e in evals)
    marks = [float(np.median([e[i]["time"] for e in evals if len(e) > i])) for i in range(width)]
    head = ["variant", "seed", *(f"{t:.0f} s" for t in marks), "steps", "s/step",
            f"completion tokens (last {LAST} steps)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, runs in variants.items():
        for run in runs:
            accs = [f"{100 * r['eval/accuracy']:.1f}" for r in run.evals]
            lines.append("| " + " | ".join([name, run.seed, *accs,
                                            *["-"] * (width - len(accs)), *step_cells(run)]) + " |")
    return "\n".join(lines) + "\n"


def step_cells(run: Run) -> list[str]:
    """Steps made, seconds per step and the completion length at the end; "-" without step
    records."""
    per_step = run.sec_per_step()
    if per_step is None:
        return ["-", "-", "-"]
    lengths = [r["rollout/completion_len"] for r in run.steps[-LAST:]
               if r.get("rollout/completion_len") is not None]
    return [str(run.steps[-1]["step"]), seconds(per_step),
            f"{np.mean(lengths):.0f}" if lengths else "-"]


def machines_note(variants: Mapping[str, Runs]) -> str:
    """A warning paragraph naming each machine when the runs were made on more than one
    (pods.runtime.machine.speed_differences: the host for CPU runs, the GPU for GPU runs;
    their training times are not comparable); "" otherwise. Runs without a machine record
    (made before pods wrote one) count as unknown."""
    groups: list[tuple[list[dict], list[str]]] = []  # (machine records, runs)
    for name, runs in variants.items():
        for run in runs:
            m = run.machine or {}
            group = next((g for g in groups if all(_alike(m, other) for other in g[0])), None)
            if group is None:
                group = ([], [])
                groups.append(group)
            group[0].append(m)
            group[1].append(f"{name}/{run.path.name}")
    if len(groups) < 2:
        return ""
    lines = ["**These runs were made on different machines: their training times, and the "
             "speed-ups and accuracies at equal time computed from them, are not "
             "comparable.**", ""]
    for records, names in groups:
        m = records[0]
        where = ", ".join(f"{k.removeprefix('machine/')} {m.get(k)}" for k in speed_fields(m)
                          if k in m or not on_gpu(m))
        if not m:
            where = "machine not recorded (a run of an older pods)"
        lines.append(f"- {where}: {', '.join(names)}")
    return "\n".join(lines) + "\n\n"


def _alike(a: dict, b: dict) -> bool:
    """Two runs' machine records (``{}``: not recorded) set the same speed."""
    return (not a) == (not b) and not speed_differences(a, b)
