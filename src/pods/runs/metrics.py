"""metrics.jsonl: one JSON object per line, flushed as written, read back tolerantly.

Every record has ``kind`` ("step" or "eval"), ``step`` (optimizer steps done) and ``time``
(training seconds: the clock that excludes evaluation and checkpointing). Other keys are
grouped by prefix: ``rollout/``, ``select/``, ``loss/``, ``time/``, ``mem/``, ``eval/``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class MetricsWriter:
    """Appends records to a metrics.jsonl file, one flushed line each."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, sort_keys=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_metrics(path: str | Path, kind: str | None = None) -> list[dict[str, Any]]:
    """All complete records of a metrics.jsonl (of one ``kind`` if given).

    A line that is not valid JSON (a run killed mid-write leaves a truncated last line) is
    skipped, so reading never fails on a crashed run's log.
    """
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and (kind is None or record.get("kind") == kind):
            records.append(record)
    return records


def truncate_metrics(path: str | Path, records: int | None, last_step: int) -> int:
    """On resume: keep the first ``records`` records, those written before the checkpoint
    (``None``, from older checkpoints: those up to ``last_step``); what comes after is redone.
    The records taken out are appended to metrics.redone.jsonl beside it, so nothing written
    is lost. Returns the number kept."""
    path = Path(path)
    if not path.exists():
        return 0
    old = read_metrics(path)
    keep = old[:records] if records is not None else \
        [r for r in old if r.get("step", 0) <= last_step]
    redone = old[len(keep):] if records is not None else \
        [r for r in old if r.get("step", 0) > last_step]
    with path.with_name("metrics.redone.jsonl").open("a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in redone)
    tmp = path.with_name(".metrics.jsonl.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in keep)
    tmp.replace(path)  # atomic: a kill here leaves the old or the new file whole
    return len(keep)


PHASES = ("generate", "reward", "select", "update", "sync")


def positions_share(steps: list[dict]) -> float | None:
    """The update's token positions over the run as a share of what padded rows would have
    processed (1.0 under the padded layout, less under the packed ones: the number a layout
    saves); None without those records (runs of an older pods)."""
    both = [r for r in steps if r.get("update/padded_positions")
            and r.get("update/positions") is not None]
    if not both:
        return None
    return sum(r["update/positions"] for r in both) / sum(r["update/padded_positions"]
                                                          for r in both)


def run_summary(run_dir: str | Path) -> str:
    """What a finished run achieved, from its metrics.jsonl: test accuracy at the start,
    best and end, steps, training seconds, each phase's share of the step time, the update's
    positions as a share of padded's, files."""
    run_dir = Path(run_dir)
    records = read_metrics(run_dir / "metrics.jsonl")
    evals = [r for r in records if r.get("kind") == "eval" and "eval/accuracy" in r]
    steps = [r for r in records if r.get("kind") == "step"]
    lines = [f"run folder: {run_dir}"]
    if evals:
        best = max(evals, key=lambda r: r["eval/accuracy"])
        lines.append(f"test accuracy: {100 * evals[0]['eval/accuracy']:.1f}% at the start, "
                     f"best {100 * best['eval/accuracy']:.1f}% (step {best['step']}, "
                     f"{best['time']:.0f} s), {100 * evals[-1]['eval/accuracy']:.1f}% at "
                     f"the end")
    if steps:
        total = sum(r.get("time/step", 0.0) for r in steps) or 1.0
        spent = {phase: sum(r.get(f"time/{phase}", 0.0) for r in steps) for phase in PHASES
                 if any(f"time/{phase}" in r for r in steps)}
        shares = ", ".join(f"{phase} {100 * t / total:.0f}%" for phase, t in spent.items())
        lines.append(f"{steps[-1]['step']} steps in {steps[-1]['time']:.1f} training seconds "
                     f"({total / len(steps):.3f} s per step: {shares})")
        share = positions_share(steps)
        if share is not None:
            lines.append(f"the update processed {share:.3f} of the positions padded rows "
                         f"would have (update/positions / update/padded_positions)")
        skipped = sum(r.get("optim/skipped", 0) for r in steps)
        if skipped:
            lines.append(f"{skipped} of the {len(steps)} steps had no reward variance in the "
                         f"rollouts kept: no update (optim/skipped)")
    if (run_dir / "curve.png").is_file():
        lines.append(f"learning curve: {run_dir / 'curve.png'}")
    return "\n".join(lines)
