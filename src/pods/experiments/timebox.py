"""A comparison in a time box (``pods compare --budget SECONDS``): whole seeds, seeds in
order, each run started only if it can finish in the time left.

A run's training time is capped by its ``max_time``; what it costs beyond that (a fresh
process, the model's load, the first compile of a shape, the evaluations, which the
training clock excludes, the checkpoints and the last step's overshoot) is read from the
runs this folder has timed: the comparison writes each run's wall-clock seconds to
``run_times.jsonl`` (``record_time``). A run is estimated at its ``max_time`` plus the
most any timed run of its variant took beyond its own ``max_time`` (of any variant where
its own has none timed; nothing where the folder has none: the first runs in a new folder
are estimated by their training time alone, and a printed line says so). A seed starts
only if the estimates of all its runs still to do fit in the time left, so a short window
adds whole seeds and the variants stay balanced; each run is checked again before it
starts, so none is started that its estimate says cannot finish.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pods.runs.metrics import read_metrics

__all__ = ["TIMES", "TimeBox", "record_time"]

TIMES = "run_times.jsonl"  # in the comparison folder: one record per run trained there


def record_time(out_dir: Path, run: str, wall: float, max_time: float | None,
                resumed: bool) -> None:
    """Append a trained run's wall-clock seconds (from starting its process to its end) to
    ``out_dir/run_times.jsonl``; ``run`` is "variant/seed<k>"; a resumed run's time covers
    only its rest and is not used for estimates."""
    record = {"run": run, "wall": round(wall, 3), "max_time": max_time, "resumed": resumed}
    with (out_dir / TIMES).open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def beyond_limit(out_dir: Path) -> dict[str, float]:
    """By variant, the most a whole (not resumed) timed run took beyond its ``max_time``."""
    path, most = out_dir / TIMES, {}
    for r in read_metrics(path) if path.is_file() else []:
        if r.get("resumed") or r.get("max_time") is None:
            continue
        variant = str(r["run"]).split("/")[0]
        most[variant] = max(most.get(variant, 0.0), r["wall"] - r["max_time"])
    return most


@dataclass
class TimeBox:
    """The time left of ``budget`` seconds, started at creation, and the runs estimated
    against it; ``skipped`` lists, in order, the runs it did not start."""

    budget: float
    out_dir: Path
    clock: Callable[[], float] = time.monotonic
    skipped: list[str] = field(default_factory=list)
    start: float = field(init=False)
    shortfall: str = field(init=False, default="")  # why the first skipped run was skipped

    def __post_init__(self) -> None:
        if self.budget <= 0:
            raise ValueError(f"--budget {self.budget:g} leaves no time; give the seconds the "
                             "comparison may use, e.g. --budget 540.")
        self.start = self.clock()

    def left(self) -> float:
        return self.budget - (self.clock() - self.start)

    def estimate(self, variant: str, max_time: float | None) -> float:
        """Seconds a run of ``variant`` with this ``max_time`` should take, start to end."""
        if max_time is None:
            raise ValueError(f"--budget needs each run's time limit, and variant {variant!r} "
                             "has no max_time; set max_time in the spec (or as a flag).")
        beyond = beyond_limit(self.out_dir)
        return max_time + beyond.get(variant, max(beyond.values(), default=0.0))

    def admits(self, runs: list[tuple[str, str, float | None]]) -> bool:
        """Whether runs [(name "variant/seed<k>", variant, max_time)], to be trained one
        after the other, fit in the time left (if not, ``shortfall`` says by how much)."""
        need = sum(self.estimate(variant, limit) for _, variant, limit in runs)
        left = self.left()
        if need <= left:
            return True
        names = " + ".join(name for name, _, _ in runs)
        verb = "needs" if len(runs) == 1 else "need"
        self.shortfall = f"{names} {verb} about {need:.0f} s; {max(left, 0):.0f} s were left"
        return False

    def skip(self, names: list[str]) -> None:
        """Say that these runs were not started."""
        self.skipped += names

    def note(self) -> str:
        """The line printed when the comparison ends: what was skipped and why."""
        if not self.skipped:
            return f"budget: every run to do fit in the {self.budget:.0f} s."
        return f"budget: {len(self.skipped)} run(s) skipped ({self.shortfall}): " \
               f"{', '.join(self.skipped)}; run the same `pods compare` again to add them."

    def untimed_note(self) -> str | None:
        """The line said before the runs when no run of the folder was timed yet."""
        if beyond_limit(self.out_dir):
            return None
        return (f"budget: no run in {self.out_dir} was timed yet, so a run is estimated by "
                "its max_time alone (start-up, compilation and evaluations come on top) "
                "until the first one ends.")
