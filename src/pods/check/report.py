"""What one mode's run measured (from its metrics.jsonl), and the check's table.

Step times are means over the steps after the first (the first pays for compilation,
allocator growth and cache warm-up); with a single step, that step. Memory is the largest
peak any step reported (``mem/``, the slowest rank's under torchrun).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pods.runs.metrics import PHASES, read_metrics

MEMORY = ("mem/peak_rss_mb", "mem/peak_gpu_mb")


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def measure(run_dir: Path) -> dict[str, Any]:
    """Steps done, seconds per step and per phase (over the steps after the first that
    updated; None where none did), peak memory, the engine/trainer log-prob gap (engines
    that return their log-probs) and the last test accuracy."""
    path = run_dir / "metrics.jsonl"
    records = read_metrics(path) if path.is_file() else []
    steps = [r for r in records if r.get("kind") == "step"]
    # timed: the steps after the first that updated (a step whose groups had no reward
    # variance skips the update, and its time is not a step's)
    timed = [r for r in steps[1:] if not r.get("optim/skipped")]
    evals = [r for r in records if r.get("kind") == "eval" and "eval/accuracy" in r]
    gaps = [r["rollout/logprob_gap"] for r in steps if "rollout/logprob_gap" in r]
    return {
        "steps": len(steps),
        "step_s": _mean([r["time/step"] for r in timed if "time/step" in r]),
        "phases_s": {phase: _mean([r[f"time/{phase}"] for r in timed if f"time/{phase}" in r])
                     for phase in PHASES},
        "memory_mb": {key.removeprefix("mem/"): max((r[key] for r in steps if key in r),
                                                     default=None) for key in MEMORY},
        "logprob_gap": _mean(gaps),
        "eval_accuracy": evals[-1]["eval/accuracy"] if evals else None,
    }


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _short(text: str, width: int = 160) -> str:
    text = " ".join(text.split()).replace("|", "/")  # one table cell
    return text if len(text) <= width else text[: width - 3] + "..."


def table(rows: list[dict[str, Any]]) -> str:
    """The modes as a Markdown table: result, precision (weights and compute dtypes),
    seconds per step and per phase, peak memory in MB, log-prob gap, and the reason a mode
    failed or was skipped."""
    head = ["mode", "result", "precision", "s/step", *PHASES, "peak RSS MB", "peak GPU MB",
            "logprob gap", "why"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        phases = row.get("phases_s") or {}
        memory = row.get("memory_mb") or {}
        cells = [row["mode"], row["status"], row.get("precision") or "-",
                 _num(row.get("step_s")), *(_num(phases.get(p)) for p in PHASES),
                 _num(memory.get("peak_rss_mb"), 0), _num(memory.get("peak_gpu_mb"), 0),
                 _num(row.get("logprob_gap"), 5), _short(row.get("reason") or "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio_line(ratio: dict[str, Any] | None) -> str:
    if not ratio:
        return ("step-time ratio: not measured (n == m, a side did not pass, or no step after "
                "the first updated on a side: a step without reward variance skips the "
                "update, so its time is not a step's; raise --steps)")
    return (f"step-time ratio PODS {ratio['pods']} : GRPO {ratio['grpo']} = "
            f"{ratio['value']:.2f} ({ratio['pods_s']:.3f} s : {ratio['grpo_s']:.3f} s per "
            f"step, {ratio['mode']})")


def markdown(report: dict[str, Any]) -> str:
    """check.md: the settings, the table and the step-time ratio."""
    s = report["settings"]
    return "\n".join([
        "# pods check", "",
        f"model {s['model']}, task {s['task']}, device {s['device']}, dtype {s['dtype']}, "
        f"{s['steps']} steps of P={s['prompts_per_step']} prompts, n={s['n']}, m={s['m']}, "
        f"{s['max_new_tokens']} new tokens", "",
        table(report["modes"]), "", ratio_line(report["ratio"]), "", sandbox_line(report), ""])


def sandbox_line(report: dict[str, Any]) -> str:
    """What the code tasks' sandbox can do for this caller: each isolation mode, and what
    bounds a sandbox's total memory (pods.sandbox.cgroup)."""
    sandbox = report.get("sandbox")
    if not sandbox:
        return "sandbox (code tasks): not probed"
    modes = ", ".join(f"{mode} {state}" for mode, state in sandbox["modes"].items())
    return f"sandbox (code tasks): {modes}; total memory: {sandbox['memory']}"
