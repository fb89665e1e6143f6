"""A comparison's finished runs, each read once: its eval and step records. The summary, its
tables and its plots all take these, so no metrics.jsonl is read twice."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pods.runs.metrics import read_metrics


@dataclass(frozen=True, eq=False)
class Run:
    """One finished run of a comparison: its folder and its records, in the order written."""

    path: Path  # OUT/<variant>/seed<k>
    evals: list[dict]  # its "eval" records that hold eval/accuracy
    steps: list[dict]  # its "step" records
    machine: dict | None = None  # its last "machine" record (pods.runtime.machine), if any

    @property
    def seed(self) -> str:
        """The seed folder's name without "seed" ("203")."""
        return self.path.name.removeprefix("seed")

    def sec_per_step(self) -> float | None:
        """Training seconds per optimizer step over the whole run; None without steps."""
        if not self.steps or not self.steps[-1].get("step"):
            return None
        return self.steps[-1]["time"] / self.steps[-1]["step"]


Runs = list[Run]  # a variant's runs, seeds in numeric order


def load_runs(out_dir: str | Path) -> dict[str, Runs]:
    """Each variant folder's finished runs that have eval records, seeds in numeric order. A
    run in progress or interrupted (no "done" record) is left out, with a printed line: its
    curve is shorter than the budget, and would cut every mean to its length."""
    found = {}
    for variant in sorted(p for p in Path(out_dir).iterdir() if p.is_dir()):
        runs = []
        for metrics in sorted(variant.glob("seed*/metrics.jsonl"), key=_seed_order):
            records = read_metrics(metrics)
            if not any(r.get("kind") == "done" for r in records):
                print(f"{metrics.parent}: not finished (no \"done\" record), left out; "
                      "running `pods compare` again goes on with it.")
                continue
            evals = [r for r in records if r.get("kind") == "eval" and "eval/accuracy" in r]
            if evals:
                machines = [r for r in records if r.get("kind") == "machine"]
                runs.append(Run(metrics.parent, evals,
                                [r for r in records if r.get("kind") == "step"],
                                machines[-1] if machines else None))
            else:
                print(f"{metrics.parent}: no eval records yet, left out.")
        if runs:
            found[variant.name] = runs
    return found


def _seed_order(metrics: Path) -> tuple[int, str]:
    digits = metrics.parent.name.removeprefix("seed")  # seed10 after seed2
    return (int(digits) if digits.isdigit() else -1, metrics.parent.name)
